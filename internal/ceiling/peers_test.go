package ceiling

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/contentcoding"
	"github.com/onehost/onehost/internal/proctest"
)

// fakePM2 plays `pm2 start SCRIPT -i N --no-daemon` (a God in the foreground: it writes
// PM2_HOME/pm2.pid, forks N workers running SCRIPT and serves PORT until SIGTERM) and
// `pm2 kill` (SIGTERM to the pid in PM2_HOME/pm2.pid, then waits for it to go).
func fakePM2(args []string) int {
	pidFile := filepath.Join(os.Getenv("PM2_HOME"), "pm2.pid")
	switch args[0] {
	case "start":
		if !slices.Contains(args, "--no-daemon") {
			fmt.Fprintln(os.Stderr, "fake pm2: only --no-daemon")
			return 2
		}
		script, n := args[1], 1
		for i, a := range args {
			if a == "-i" && i+1 < len(args) {
				n, _ = strconv.Atoi(args[i+1])
			}
		}
		exe, err := os.Executable()
		if err != nil {
			return 1
		}
		var workers []*exec.Cmd
		for i := 0; i < n; i++ {
			c := exec.Command(exe, script)
			c.Env = append(os.Environ(), fakeEnv+"=pm2-worker")
			c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := c.Start(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			workers = append(workers, c)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, strings.Repeat("y", 2000))
		}))
		os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
		sleepUntilTerm()
		ln.Close()
		for _, c := range workers {
			c.Process.Signal(syscall.SIGTERM)
			c.Wait()
		}
		os.Remove(pidFile)
		return 0
	case "kill":
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return 0 // the real one would start a daemon and kill it
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		syscall.Kill(pid, syscall.SIGTERM)
		for i := 0; i < 100; i++ {
			if _, err := os.Stat(pidFile); err != nil {
				return 0
			}
			time.Sleep(50 * time.Millisecond)
		}
		return 1
	}
	return 2
}

func sleepUntilTerm() int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	return 0
}

// wrapRole is a shell script that runs the test binary as role (the sweep hands every
// child the same Environ).
func wrapRole(t *testing.T, dir, role string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "fake-"+role)
	script := fmt.Sprintf("#!/bin/sh\n%s=%s exec %q \"$@\"\n", fakeEnv, role, exe)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// peerDir is a Fastify peer directory as findPM2 checks it: heavy.js and node_modules/fastify.
func peerDir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "node-heavy")
	if err := os.MkdirAll(filepath.Join(d, "node_modules", "fastify"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "heavy.js"), []byte("// the peer\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestServesWorkload(t *testing.T) {
	for _, tc := range []struct {
		mode, workload string
		want           bool
	}{
		{ModeCluster, "mix", true},
		{ModeSingle, "static", true},
		{ModePM2, "heavy", true},
		{ModePM2, "static", false},
		{ModeNginx, "static", true},
		{ModeNginx, "heavy", false},
		{ModeCluster, AppWorkload, true},
		{ModePM2, AppWorkload, true},
		{ModeNginx, AppWorkload, false},
		{ModeSingle, AppWorkload, false},
	} {
		t.Run(tc.mode+"/"+tc.workload, func(t *testing.T) {
			if got := ServesWorkload(tc.mode, tc.workload); got != tc.want {
				t.Errorf("ServesWorkload(%s, %s) = %v, want %v", tc.mode, tc.workload, got, tc.want)
			}
		})
	}
}

func TestParsePIDFile(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     int
	}{
		{"pm2's", "24053", 24053},
		{"newline", "17\n", 17},
		{"spaces", " 42 \n", 42},
		{"empty", "", 0},
		{"zero", "0", 0},
		{"negative", "-5", 0},
		{"plus", "+5", 0},
		{"text", "pid 5", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePIDFile([]byte(tc.in))
			if got != tc.want || (err == nil) != (tc.want > 0) {
				t.Errorf("parsePIDFile(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
	if _, err := readPIDFile(filepath.Join(t.TempDir(), "pm2.pid")); err == nil {
		t.Error("readPIDFile of a missing file: got no error")
	}
}

func FuzzParsePIDFile(f *testing.F) {
	for _, s := range []string{"24053", "17\n", "", "-1", "+1", "99999999999999999999"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		pid, err := parsePIDFile(b)
		if (err == nil) != (pid > 0) {
			t.Errorf("parsePIDFile(%q) = %d, %v: a pid without error or an error with a pid", b, pid, err)
		}
	})
}

func TestCmdlineHas(t *testing.T) {
	const script = "/tmp/peer/heavy.js"
	for _, tc := range []struct {
		name, cmdline string
		want          bool
	}{
		{"argv", "node\x00/tmp/peer/heavy.js\x00", true},
		{"argv with flags", "node\x00--max-old-space-size=512\x00/tmp/peer/heavy.js\x00", true},
		{"node's process.title", "node /tmp/peer/heavy.js\x00\x00\x00\x00", true},
		{"the program itself", "/tmp/peer/heavy.js\x00", false},
		{"another script", "node\x00/tmp/peer/heavy.jsx\x00", false},
		{"prefix of a word", "node /tmp/peer/heavy.js.bak", false},
		{"empty (a zombie)", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cmdlineHas([]byte(tc.cmdline), script); got != tc.want {
				t.Errorf("cmdlineHas(%q, %s) = %v, want %v", tc.cmdline, script, got, tc.want)
			}
		})
	}
}

// TestProcessesRunning finds a child by an argument of its command line, through the
// process tree the sweep samples, and not by its program's name.
func TestProcessesRunning(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "heavy.js")
	c := exec.Command(exe, script)
	c.Env = append(os.Environ(), fakeEnv+"=sleeper")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { c.Process.Signal(syscall.SIGTERM); c.Wait() }()
	tree := processTree([]int{os.Getpid()})
	if !slices.Contains(tree, c.Process.Pid) {
		t.Fatalf("process tree %v lacks the child %d", tree, c.Process.Pid)
	}
	// The child may still be between fork and exec: wait for its command line.
	var got []int
	for i := 0; i < 200 && len(got) == 0; i++ {
		got = processesRunning(tree, script)
		time.Sleep(10 * time.Millisecond)
	}
	if !slices.Equal(got, []int{c.Process.Pid}) {
		t.Errorf("processesRunning(tree, %s) = %v, want [%d]", script, got, c.Process.Pid)
	}
	if got := processesRunning(tree, exe); len(got) != 0 {
		t.Errorf("processesRunning(tree, the program itself) = %v, want none: only arguments count", got)
	}
}

// TestPeersSkipped: every missing piece skips its peer with a note naming it, and a sweep
// of skipped peers starts nothing and succeeds.
func TestPeersSkipped(t *testing.T) {
	dir := t.TempDir()
	good := peerDir(t)
	noFastify := filepath.Join(dir, "bare")
	os.MkdirAll(noFastify, 0o755)
	os.WriteFile(filepath.Join(noFastify, "heavy.js"), nil, 0o644)
	nodePM2 := filepath.Join(dir, "pm2-on-node")
	os.WriteFile(nodePM2, []byte("#!/usr/bin/env node\n"), 0o755)
	shPM2 := wrapRole(t, dir, "pm2")
	static := filepath.Join(dir, "static")
	os.MkdirAll(static, 0o755)
	tmpl := filepath.Join(dir, "static.conf")
	os.WriteFile(tmpl, []byte("events {}\n"), 0o644)
	nginx, _ := exec.LookPath("true") // exists; findNginx checks the files next

	for _, tc := range []struct {
		name   string
		mode   string
		cfg    SweepConfig
		noNode bool
		want   string
	}{
		{"no peer directory", ModePM2, SweepConfig{PM2: shPM2}, false, "no Fastify peer directory"},
		{"no heavy.js", ModePM2, SweepConfig{PeerHeavyDir: dir, PM2: shPM2}, false, "no heavy.js in"},
		{"no fastify", ModePM2, SweepConfig{PeerHeavyDir: noFastify, PM2: shPM2}, false, "run npm install there"},
		{"no pm2", ModePM2, SweepConfig{PeerHeavyDir: good, PM2: filepath.Join(dir, "absent-pm2")}, false, "pm2 not found"},
		{"no node", ModePM2, SweepConfig{PeerHeavyDir: good, PM2: nodePM2}, true, "which is not on PATH"},
		{"no nginx", ModeNginx, SweepConfig{Nginx: filepath.Join(dir, "absent-nginx")}, false, "absent-nginx"},
		{"no template", ModeNginx, SweepConfig{Nginx: nginx, NginxTemplate: filepath.Join(dir, "none.conf")}, false, "read the nginx template"},
		{"no page", ModeNginx, SweepConfig{Nginx: nginx, NginxTemplate: tmpl, StaticRoot: static}, false, "nothing to serve for /static/catalog.html"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.noNode {
				t.Setenv("PATH", t.TempDir())
			}
			var runs []Run
			cfg := tc.cfg
			cfg.SeedDB, cfg.WorkDir, cfg.NoPin, cfg.Modes = "unused", t.TempDir(), true, []string{tc.mode}
			cfg.Workloads = DefaultWorkloads("")
			cfg.Report = func(r Run) { runs = append(runs, r) }
			s, err := NewSweeper(cfg)
			if err != nil {
				t.Fatal(err)
			}
			notes := strings.Join(s.Notes(), "\n")
			if !strings.Contains(notes, "peer "+tc.mode) || !strings.Contains(notes, tc.want) {
				t.Errorf("got notes %q, want one skipping %s because %q", notes, tc.mode, tc.want)
			}
			if err := s.Sweep(context.Background()); err != nil || len(runs) != 0 {
				t.Errorf("Sweep = %v with %d runs, want nil and none", err, len(runs))
			}
		})
	}
	t.Run("no workload for the peer", func(t *testing.T) {
		s, err := NewSweeper(SweepConfig{SeedDB: "unused", WorkDir: t.TempDir(), NoPin: true,
			Modes: []string{ModePM2}, Workloads: []Workload{{Name: "feed", Path: "/feed"}}})
		if err != nil || len(s.Notes()) != 0 {
			t.Errorf("got %v, notes %q; want no note: pm2 has nothing to run", err, s.Notes())
		}
	})
}

// TestSweepPM2WithFake runs the pm2 mode against a fake pm2 (this binary): the God's
// tree is found from PM2_HOME/pm2.pid, the run is measured, `pm2 kill` stops it, and a
// pm2 that fails to start makes skipped runs, not a failed sweep.
func TestSweepPM2WithFake(t *testing.T) {
	dir := t.TempDir()
	seed := filepath.Join(dir, "seed.db")
	os.WriteFile(seed, []byte("x"), 0o644)
	peer := peerDir(t)
	var runs []Run
	cfg := SweepConfig{
		PM2: wrapRole(t, dir, "pm2"), PeerHeavyDir: peer, Wrk: wrapRole(t, dir, "wrk"),
		SeedDB: seed, WorkDir: filepath.Join(dir, "work"), Ns: []int{1, 2}, Duration: time.Second, Warmup: -1, NoPin: true,
		Modes:     []string{ModePM2},
		Workloads: DefaultWorkloads(""),
		Report:    func(r Run) { runs = append(runs, r) },
	}
	s, err := NewSweeper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Notes()) != 0 {
		t.Fatalf("got notes %q, want none", s.Notes())
	}
	if err := s.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		for _, r := range runs {
			t.Log(r.Line())
		}
		t.Fatalf("got %d runs, want 2 (heavy only, N = 1 and 2)", len(runs))
	}
	for _, r := range runs {
		cmd := strings.Join(r.ServerCommand, " ")
		if r.Workload != "heavy" || r.Mode != ModePM2 || r.Skipped != "" || r.Requests != 20 || r.Verdict == "" {
			t.Errorf("got %q (skipped %q), want heavy on pm2 with 20 requests and a verdict", r.Line(), r.Skipped)
		}
		if !strings.Contains(cmd, "PM2_HOME=") || !strings.Contains(cmd, fmt.Sprintf("start %s -i %d --no-daemon", filepath.Join(peer, "heavy.js"), r.N)) {
			t.Errorf("server command %q, want a private PM2_HOME and start heavy.js -i %d --no-daemon", cmd, r.N)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "work", "server-*", "pm2")); len(m) != 0 {
		t.Errorf("PM2_HOME left behind: %v", m)
	}
	if left := processesRunning(processTree([]int{os.Getpid()}), filepath.Join(peer, "heavy.js")); len(left) != 0 {
		t.Errorf("peer workers left running: %v", left)
	}

	runs = nil
	s.cfg.Ns = []int{1}
	s.peers.pm2 = wrapRole(t, dir, "pm2-broken")
	if err := s.Sweep(context.Background()); err != nil {
		t.Fatalf("Sweep with a broken pm2 = %v, want nil", err)
	}
	if len(runs) != 1 || !strings.Contains(runs[0].Skipped, "Cannot find module") || !strings.Contains(runs[0].Line(), "mode=pm2 skipped=") {
		t.Errorf("got %+v, want one skipped pm2 run quoting its log", runs)
	}
}

// The user's app under PM2: the same script, with its arguments after --, no seed and no
// heavy peer directory needed.
func TestSweepAppPM2WithFake(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "server.js")
	os.WriteFile(script, []byte("// the user's app\n"), 0o644)
	var runs []Run
	s, err := NewSweeper(SweepConfig{
		PM2: wrapRole(t, dir, "pm2"), Wrk: wrapRole(t, dir, "wrk"), WorkDir: filepath.Join(dir, "work"),
		App: []string{"node", script, "--flag", "x"}, AppPM2Script: script, AppPM2Args: []string{"--flag", "x"},
		Workloads: []Workload{AppRequest("GET", "data", nil, "")},
		Ns:        []int{1, 2}, Duration: time.Second, Warmup: -1, NoPin: true, Modes: []string{ModePM2},
		Report: func(r Run) { runs = append(runs, r) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Notes()) != 0 {
		t.Fatalf("got notes %q, want none", s.Notes())
	}
	if err := s.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("got %d runs, want 2 (the app on pm2 at N = 1 and 2)", len(runs))
	}
	for _, r := range runs {
		cmd := strings.Join(r.ServerCommand, " ")
		if r.Workload != AppWorkload || r.Mode != ModePM2 || r.Skipped != "" || r.Requests != 20 || r.Verdict == "" {
			t.Errorf("got %q (skipped %q), want the app on pm2 with 20 requests and a verdict", r.Line(), r.Skipped)
		}
		if want := fmt.Sprintf("start %s -i %d --no-daemon -- --flag x", script, r.N); !strings.Contains(cmd, want) {
			t.Errorf("server command %q, want %q", cmd, want)
		}
	}
	if left := processesRunning(processTree([]int{os.Getpid()}), script); len(left) != 0 {
		t.Errorf("app workers left running: %v", left)
	}
}

// TestSweepNginx runs the nginx mode with the real nginx (skipped without one), pinned
// through the sweep's Pin where core 0 is ours, against the fake wrk.
func TestSweepNginx(t *testing.T) {
	if _, err := exec.LookPath("nginx"); err != nil {
		if _, err := os.Stat("/usr/sbin/nginx"); err != nil {
			t.Skip("no nginx")
		}
	}
	dir := t.TempDir()
	static := filepath.Join(dir, "static")
	os.MkdirAll(static, 0o755)
	page := strings.Repeat("<p>catalogue</p>\n", 100)
	os.WriteFile(filepath.Join(static, "catalog.html"), []byte(page), 0o644)
	var runs []Run
	cfg := SweepConfig{
		Wrk: wrapRole(t, dir, "wrk"), NginxTemplate: "../../configs/nginx/static.conf", StaticRoot: static,
		SeedDB: "unused", WorkDir: filepath.Join(dir, "work"), Ns: []int{1}, Duration: time.Second, Warmup: -1,
		Modes:     []string{ModeNginx},
		Workloads: DefaultWorkloads(""),
		Report:    func(r Run) { runs = append(runs, r) },
	}
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil && set.IsSet(0) {
		// nice(1) stands in for `ceiling pin`: a wrapper that execs its command.
		cfg.Pin = func(cpus []int, argv []string) []string { return append([]string{"nice", "-n", "1"}, argv...) }
	} else {
		cfg.NoPin = true
	}
	s, err := NewSweeper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Notes()) != 0 {
		t.Fatalf("got notes %q, want none", s.Notes())
	}
	if err := s.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 {
		t.Fatalf("got %d runs, want 1 (static only)", len(runs))
	}
	r := runs[0]
	if r.Workload != "static" || r.Mode != ModeNginx || r.Skipped != "" || r.Requests != 20 || r.BytesPerReq != float64(len(page)+100) {
		t.Errorf("got %q (skipped %q, %.0f B/req), want static on nginx: 20 requests of the %d-byte page", r.Line(), r.Skipped, r.BytesPerReq, len(page))
	}
	cmd := strings.Join(r.ServerCommand, " ")
	if !strings.Contains(cmd, "nginx -p ") || (!cfg.NoPin && !strings.HasPrefix(cmd, "nice -n 1 ")) {
		t.Errorf("server command %q, want nginx (under the pin wrapper when pinned)", cmd)
	}
}

func TestComparePeers(t *testing.T) {
	run := func(wl, mode string, n int, rps, cpu, bytes float64, verdict string) Run {
		return Run{Workload: wl, Mode: mode, Purpose: PurposeSweep, N: n, RPS: rps, Requests: int64(rps),
			ServerCPUUsPerReq: cpu, BytesPerReq: bytes, Verdict: verdict}
	}
	runs := []Run{
		run("heavy", ModeCluster, 1, 12000, 50, 31000, VerdictCPU),
		run("heavy", ModeSingle, 1, 11000, 55, 31000, VerdictCPU),
		run("heavy", ModePM2, 1, 3000, 400, 32000, VerdictCPU),
		run("static", ModeCluster, 1, 40000, 20, 6900, VerdictCPU),
		{Workload: "static", Mode: ModeNginx, Purpose: PurposeSweep, N: 1, Skipped: "start nginx: boom"},
		run("heavy", ModePM2, 2, 5000, 420, 32000, VerdictCPU), // no cluster run at N = 2
		{Workload: "heavy", Mode: ModePM2, Purpose: PurposeNIC, N: 1, RPS: 1, LinkBitsPerS: 1e9},
	}
	got := ComparePeers(runs)
	if len(got) != 3 {
		t.Fatalf("got %d comparisons, want 3: %+v", len(got), got)
	}
	if c := got[0]; c.Peer != ModePM2 || c.N != 1 || c.RPSRatio != 4 || c.CPURatio != 0.125 || c.BytesRatio != 0.969 {
		t.Errorf("pm2 at 1: got ratios %v %v %v, want 4, 0.125, 0.969", c.RPSRatio, c.CPURatio, c.BytesRatio)
	}
	if c := got[1]; c.Peer != ModeNginx || c.RPSRatio != 0 || !strings.Contains(c.Line(), `skipped="start nginx: boom"`) {
		t.Errorf("skipped nginx: got %+v (%s), want zero ratios and the reason", c, c.Line())
	}
	if c := got[2]; c.N != 2 || c.RPSRatio != 0 || c.Ours.Workload != "" {
		t.Errorf("pm2 at 2: got %+v, want no cluster run beside it", c)
	}
	if line := got[0].Line(); !strings.HasPrefix(line, "peer=pm2 workload=heavy n=1 rps_ratio=4.00 cpu_us_ratio=0.12") {
		t.Errorf("got line %q", line)
	}

	// A -repeat sweep's raw runs: each round's peer run beside that round's cluster run.
	rounds := []Run{run("heavy", ModeCluster, 1, 12000, 50, 31000, VerdictCPU), run("heavy", ModePM2, 1, 3000, 400, 32000, VerdictCPU),
		run("heavy", ModeCluster, 1, 9000, 50, 31000, VerdictCPU), run("heavy", ModePM2, 1, 3000, 400, 32000, VerdictCPU)}
	rounds[0].Round, rounds[1].Round, rounds[2].Round, rounds[3].Round = 1, 1, 2, 2
	if got := ComparePeers(rounds); len(got) != 2 || got[0].RPSRatio != 4 || got[1].RPSRatio != 3 {
		t.Errorf("two rounds: got %+v, want rps ratios 4 (round 1) and 3 (round 2)", got)
	}

	var b bytes.Buffer
	if err := WriteReport(&b, runs, nil, ReportConfig{}); err != nil {
		t.Fatal(err)
	}
	report := b.String()
	for _, want := range []string{
		"## Peers in the same run",
		"| heavy | PM2 cluster + Fastify | 1 | 4.00 (12000 / 3000) | 0.12 (50.0 / 400.0) | 0.97 (31000 / 32000) | cpu / cpu |",
		"| static | nginx | 1 | - | - | - | peer skipped: start nginx: boom |",
		"| heavy | PM2 cluster + Fastify | 2 | - | - | - | no cluster run at this N |",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	var names []string
	for _, sr := range ThroughputChart(runs, Fit(runs), "heavy").Series {
		names = append(names, sr.Name)
	}
	if !slices.Contains(names, "PM2 cluster + Fastify (peer)") {
		t.Errorf("heavy throughput chart has series %q, want the PM2 peer's", names)
	}

	b.Reset()
	if err := WriteReport(&b, runs[:2], nil, ReportConfig{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "No peer runs") {
		t.Errorf("report without peers lacks the no-peers line:\n%s", b.String())
	}
}

func TestPlain(t *testing.T) {
	in := "\x1b[2m\x1b[90m02:29:52 \x1b[39m\x1b[22m\x1b[34mPM2      | \x1b[39mApp [heavy:1] exited"
	if got, want := string(plain([]byte(in))), "02:29:52 PM2      | App [heavy:1] exited"; got != want {
		t.Errorf("plain(%q) = %q, want %q", in, got, want)
	}
}

// TestPM2CompressSkipped: pm2-compress needs @fastify/compress beside fastify, and runs
// only the workloads that ask for a coding.
func TestPM2CompressSkipped(t *testing.T) {
	coded, err := SelectWorkloads(DefaultWorkloads(""), []string{"heavy", "heavy+gzip"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSweeper(SweepConfig{SeedDB: "unused", WorkDir: t.TempDir(), NoPin: true, PeerHeavyDir: peerDir(t),
		PM2: wrapRole(t, t.TempDir(), "pm2"), Modes: []string{ModePM2Compress}, Workloads: coded})
	if err != nil {
		t.Fatal(err)
	}
	if notes := strings.Join(s.Notes(), "\n"); !strings.Contains(notes, "peer pm2-compress") || !strings.Contains(notes, "npm install @fastify/compress@"+PeerCompressVersion) {
		t.Errorf("got notes %q, want pm2-compress skipped for want of @fastify/compress", notes)
	}
	s, err = NewSweeper(SweepConfig{SeedDB: "unused", WorkDir: t.TempDir(), NoPin: true,
		Modes: []string{ModePM2Compress, ModeNginxGzip}, Workloads: DefaultWorkloads("")})
	if err != nil || len(s.Notes()) != 0 {
		t.Errorf("got %v, notes %q; want no note: no workload asks for a coding", err, s.Notes())
	}
}

// startPeer starts mode at N = 1 with cfg (NoPin) and returns its address; the server
// stops with the test.
func startPeer(t *testing.T, cfg SweepConfig, mode string) (*Sweeper, string) {
	t.Helper()
	cfg.SeedDB, cfg.WorkDir, cfg.NoPin, cfg.Modes = "unused", filepath.Join(t.TempDir(), "work"), true, []string{mode}
	s, err := NewSweeper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.peers.skip[mode] != "" {
		t.Fatalf("%s skipped: %s", mode, s.peers.skip[mode])
	}
	srv, err := s.StartServer(context.Background(), mode, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s, srv.Addr
}

// codedGet sends method to url with Accept-Encoding: accept (Go's client left to add
// nothing) and returns the answer's Content-Encoding and the body decoded.
func codedGet(t *testing.T, method, url, accept, body string) (string, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept-Encoding", accept)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s %s: %d, %v", method, url, resp.StatusCode, err)
	}
	ce := resp.Header.Get("Content-Encoding")
	k := contentcoding.Identity
	if ce != "" {
		if k, err = contentcoding.Parse(ce); err != nil {
			t.Fatal(err)
		}
	}
	plain, err := contentcoding.Decompress(k, raw, 1<<24)
	if err != nil {
		t.Fatalf("%s body: %v", ce, err)
	}
	return ce, plain
}

// TestNginxGzipPeer runs the real nginx both ways on a page with no .gz beside it:
// gzip_static (ModeNginx) then has nothing to send but the page, gzip on (ModeNginxGzip)
// compresses it per request, and both bodies are the page.
func TestNginxGzipPeer(t *testing.T) {
	if _, err := exec.LookPath("nginx"); err != nil {
		if _, err := os.Stat("/usr/sbin/nginx"); err != nil {
			proctest.Missing(t, "no nginx")
		}
	}
	static := t.TempDir()
	page := []byte(strings.Repeat("<p>catalogue</p>\n", 300))
	os.WriteFile(filepath.Join(static, "catalog.html"), page, 0o644)
	cfg := SweepConfig{NginxTemplate: "../../configs/nginx/static.conf", StaticRoot: static,
		Workloads: []Workload{withCoding(DefaultWorkloads("")[1], contentcoding.Gzip)}}
	for _, tc := range []struct {
		mode, want string
	}{
		{ModeNginx, ""},
		{ModeNginxGzip, "gzip"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			_, addr := startPeer(t, cfg, tc.mode)
			ce, body := codedGet(t, "GET", "http://"+addr+"/static/catalog.html", "gzip", "")
			if ce != tc.want || !bytes.Equal(body, page) {
				t.Errorf("Content-Encoding %q, %d bytes decoded; want %q and the %d-byte page", ce, len(body), tc.want, len(page))
			}
		})
	}
}

// heavyPeer is a Fastify app in the node-heavy peer's shape (PATCH /api/resource/:id, a
// few KB of indented JSON), for TestPM2CompressPeer.
const heavyPeer = `const fastify = require('fastify')({ logger: false });
fastify.patch('/api/resource/:id', async (req, reply) => {
  const items = [];
  for (let i = 0; i < 40; i++) items.push({ id: i, name: 'item-' + i, tags: ['alpha', 'beta'] });
  reply.header('content-type', 'application/json');
  return JSON.stringify({ id: Number(req.params.id), patch: req.body, items }, null, 2);
});
fastify.listen({ port: Number(process.env.PORT), host: '127.0.0.1' });
`

// TestPM2CompressPeer runs the real PM2 and Fastify with @fastify/compress registered by
// the sweep's script (npm ci in cmd/supervisor/testdata/node, and in the repository for
// pm2): each coding node has comes back as asked and decodes to the plain answer; a
// coding node lacks is noted and left out.
func TestPM2CompressPeer(t *testing.T) {
	modules, err := filepath.Abs("../../cmd/supervisor/testdata/node/node_modules")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(modules, "@fastify", "compress")); err != nil {
		proctest.Missing(t, "no @fastify/compress: (cd cmd/supervisor/testdata/node && npm ci)")
	}
	pm2, err := exec.LookPath("pm2")
	if err != nil {
		if pm2, err = filepath.Abs("../../node_modules/.bin/pm2"); err == nil {
			_, err = os.Stat(pm2)
		}
		if err != nil {
			proctest.Missing(t, "no pm2: npm ci in the repository")
		}
	}
	peer := t.TempDir()
	os.WriteFile(filepath.Join(peer, "heavy.js"), []byte(heavyPeer), 0o644)
	if err := os.Symlink(modules, filepath.Join(peer, "node_modules")); err != nil {
		t.Fatal(err)
	}
	wls, err := SelectWorkloads(DefaultWorkloads(""), []string{"heavy+gzip", "heavy+zstd", "heavy+br"})
	if err != nil {
		t.Fatal(err)
	}
	s, addr := startPeer(t, SweepConfig{PM2: pm2, PeerHeavyDir: peer, Workloads: wls}, ModePM2Compress)
	url := "http://" + addr + "/api/resource/7"
	_, plain := codedGet(t, "PATCH", url, "identity", `{"foo1":"bar"}`)
	if len(plain) < 2048 {
		t.Fatalf("plain answer %d bytes, want a few KB", len(plain))
	}
	for _, w := range s.workloadsFor(ModePM2Compress) {
		coding := requestedCoding(w.Name)
		ce, body := codedGet(t, "PATCH", url, coding, `{"foo1":"bar"}`)
		if ce != coding || !bytes.Equal(body, plain) {
			t.Errorf("%s: Content-Encoding %q, %d bytes decoded; want %q and the %d plain bytes", w.Name, ce, len(body), coding, len(plain))
		}
	}
	if lacks := s.peers.lacks[ModePM2Compress]; len(lacks) > 0 && !strings.Contains(strings.Join(s.Notes(), "\n"), "heavy+zstd not measured") {
		t.Errorf("node lacks %v, notes %q say nothing of it", lacks, s.Notes())
	}
	t.Logf("codings served: %d of 3 (node lacks %v)", len(s.workloadsFor(ModePM2Compress)), s.peers.lacks[ModePM2Compress])
}
