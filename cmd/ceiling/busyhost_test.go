package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/onehost/onehost/internal/ceiling"
	"github.com/onehost/onehost/internal/seedtest"
)

// The ceiling tools on a host that is not quiet, run from a directory that is not the
// repository's (no configs/ there: the cluster's configuration is the one built in). A
// busy loop beside the measurement is other work that cannot be missed: whatever else
// loads the machine only adds to it.

// startBusyLoop runs a shell loop that spins for the rest of the test, pinned to cpus
// ("" unpinned). It is the test's child, not the measured command's, so the command counts
// it as other work.
func startBusyLoop(t *testing.T, cpus string) {
	t.Helper()
	argv := []string{"sh", "-c", "while :; do :; done"}
	if cpus != "" {
		argv = append([]string{os.Args[0], "pin", "-cpus", cpus, "--"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
}

// TestNICBesideABusyLoop runs `ceiling nic` at 100 Mbit/s with a busy loop on the server's
// core (core 0), from a temporary directory: the heavy PATCH and the static page fill the
// link whatever else runs, so both are judged nic, and their evidence says how much other
// work ran beside them. The server and the generator run at SCHED_FIFO priority (-fifo)
// so that a loaded test machine cannot starve the generator below the link's rate (on
// this 2-core machine beside other sessions' benchmarks, runs without it filled 13-66 %
// of the link, with it 99-101 %): the test is about the verdict beside other work, which
// the busy loop (a normal task, at least 0.1 cores whatever the load) and the machine's
// load provide.
func TestNICBesideABusyLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the cluster and the generator and runs two shaped runs")
	}
	if os.Geteuid() != 0 {
		t.Skip("ceiling nic needs root (a network namespace and a qdisc)")
	}
	probe := exec.Command(os.Args[0], "pin", "-cpus", "0", "-fifo", "1", "--", "true")
	probe.Env = append(os.Environ(), helperEnv+"=1")
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("no real-time priority here (root or CAP_SYS_NICE, and RT time in this cgroup): %v %s", err, out)
	}
	bin, work := t.TempDir(), t.TempDir()
	buildTools(t, bin, "cmd/supervisor", "cmd/worker", "bench/autocannon")
	seed := seedtest.Tiny(t, t.TempDir(), false)
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(tokens, []byte("[]"), 0o644); err != nil { // the mix's only
		t.Fatal(err)
	}
	startBusyLoop(t, "0")
	runCeilingIn(t, work, "nic", "-fifo", "10", "-n", "1", "-rates", "100mbit", "-workloads", "heavy,static", "-d", "2s", "-warmup", "1s",
		"-seed", seed, "-tokens", tokens, "-supervisor", filepath.Join(bin, "supervisor"),
		"-worker", filepath.Join(bin, "worker"), "-autocannon", filepath.Join(bin, "autocannon"))

	// -out's default, data/ceiling, is under the directory it ran in.
	runs, _, err := ceiling.LoadRuns(filepath.Join(work, "data", "ceiling", "nic", ceiling.ResultFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("%d runs, want heavy and static", len(runs))
	}
	for _, r := range runs {
		if r.Verdict != ceiling.VerdictNIC || !strings.Contains(r.Evidence, "; other work ") {
			t.Errorf("%s at 100 Mbit/s: verdict %s (%s); want nic, with the other work beside it", r.Workload, r.Verdict, r.Evidence)
		}
		if cfg := strings.Join(r.ServerCommand, " "); !strings.Contains(cfg, "-config /") || strings.Contains(cfg, "configs/cluster.yaml") {
			t.Errorf("server command %q: want the built-in configuration written into the scratch directory", cfg)
		}
		if gen := strings.Join(r.GenCommand, " "); !strings.Contains(gen, " -fifo 10 -- ") {
			t.Errorf("generator command %q: want it pinned at SCHED_FIFO priority 10", gen)
		}
	}
}

// TestChallengeHostBusy runs one trial of `ceiling challenge` beside a busy loop on the
// server's core, from a temporary directory: the trial is host-busy, the score none, and
// the report says so with the other work's cores and asks for a quiet run. Whether the
// trial itself passed does not matter (the machine's load decides that): a host-busy
// trial scores nothing either way.
func TestChallengeHostBusy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the worker and the generator and runs a trial")
	}
	bin, work := t.TempDir(), t.TempDir()
	buildTools(t, bin, "cmd/worker", "bench/autocannon")
	seed := seedtest.Tiny(t, t.TempDir(), false)
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	if out, err := exec.Command(filepath.Join(bin, "worker"), "seed", "-db", seed, "-tokens", tokens, "-n", "50").CombinedOutput(); err != nil {
		t.Fatalf("tokens: %v\n%s", err, out)
	}
	srv, _, err := challengeCPUs("", "")
	if err != nil {
		t.Fatal(err)
	}
	startBusyLoop(t, ceiling.FormatCPUList(srv))
	out := filepath.Join(t.TempDir(), "scores.json")
	report := runCeilingIn(t, work, "challenge", "-users", "100", "-time-scale", "5",
		"-ramp", "1s", "-hold", "2s", "-rampdown", "1s", "-seed", seed, "-tokens", tokens, "-cpu", "1",
		"-saturation", "hiccup=1s,send-lag=1s,cpu=100",
		"-worker", filepath.Join(bin, "worker"), "-autocannon", filepath.Join(bin, "autocannon"), "-out", out)
	for _, want := range []string{"worker: trial 100 users (500 user-equivalents): HOST-BUSY, not scored: other work ",
		"worker: HOST-BUSY, no score: other work on this host took ", "Run again on a quiet host"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if !regexp.MustCompile(`\bworker +host-busy +- `).MatchString(report) {
		t.Errorf("the report's table does not put host-busy in place of the score")
	}
	s := readScore(t, out)
	if len(s.Trials) != 1 {
		t.Fatalf("trials %+v: want one", s.Trials)
	}
	tr := s.Trials[0]
	if s.HostBusy == nil || s.HostBusy.OtherCores < 0.1 || s.Users != 0 || s.UserEquivalents != 0 || !tr.HostBusy || tr.Pass || tr.Result.Requests == 0 {
		t.Errorf("score %d users (%g UE), host busy %+v; trial host-busy %v pass %v, %d requests: want the trial measured, host-busy and not scored",
			s.Users, s.UserEquivalents, s.HostBusy, tr.HostBusy, tr.Pass, tr.Result.Requests)
	}
}
