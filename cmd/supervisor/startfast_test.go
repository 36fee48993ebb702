package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/cluster"
)

// startCmd runs `supervisor start ARGS` (the test binary as the supervisor) in the given
// environment, and returns its output, how long it took and its error.
func startCmd(t *testing.T, env []string, args ...string) (string, time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"start"}, args...)...)
	cmd.Env = append(env, roleEnv+"=supervisor", "GORACE=atexit_sleep_ms=0")
	began := time.Now()
	out, err := cmd.CombinedOutput()
	return string(out), time.Since(began), err
}

// envWithout is this process's environment less the named variables.
func envWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, roleEnv) && !slices.Contains(names, k) {
			env = append(env, kv)
		}
	}
	return env
}

// TestStartRefusesWhatCheckRefuses: `start` of what `run -check` refuses (the README's
// configs/cluster.yaml without SQLITE_PATH and the JWT secret, a program that is not there)
// fails at once in run -check's words, and leaves no supervisor behind: before, the
// workers crash-looped in the background and start failed only once they were out of
// restarts (85 s).
func TestStartRefusesWhatCheckRefuses(t *testing.T) {
	t.Parallel()
	repoCfg, err := os.ReadFile("../../configs/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	repoCfg = regexp.MustCompile(`(?m)^instances: .*$`).ReplaceAll(repoCfg, []byte("instances: 2"))
	repoCfg = regexp.MustCompile(`(?m)^listen: .*$`).ReplaceAll(repoCfg, []byte("listen: 127.0.0.1:0"))
	for _, tc := range []struct {
		name, config string
		want         []string
	}{
		{"cluster.yaml without the env", string(repoCfg), []string{
			"check: the workers would not start",
			"env: SQLITE_PATH is not set, and the worker refuses to start without its database",
			"neither JWT_SECRET nor JWT_SECRET_FILE is set",
		}},
		{"program not there", "instances: 1\nlisten: 127.0.0.1:0\ncommand: [/nonexistent/program]\n", []string{
			"check: the workers would not start",
			"command: /nonexistent/program",
			"fix the path",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := filepath.Join(dir, "cluster.yaml")
			os.WriteFile(cfg, []byte(tc.config), 0o600)
			sock := filepath.Join(dir, "s.sock")
			out, took, err := startCmd(t, envWithout("SQLITE_PATH", "JWT_SECRET", "JWT_SECRET_FILE"), cfg, "-socket", sock)
			c := &runningCluster{socket: sock}
			t.Cleanup(func() { c.cmd("kill") })
			if err == nil {
				t.Fatalf("start: no error\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("start: want %q in:\n%s", w, out)
				}
			}
			if strings.Contains(out, "runs in the background") || strings.Contains(out, "exited before") {
				t.Errorf("start went to the background:\n%s", out)
			}
			if took > 30*time.Second { // was 85 s; a bound for a loaded machine, not a timing
				t.Errorf("start took %v to refuse", took)
			}
			if _, err := c.status(); err == nil {
				t.Errorf("a supervisor answers at %s after the refusal", sock)
			}
		})
	}
}

// TestStartCrashLoop: a start whose workers exit at start in a way no check foresees (a
// script that exits 1) stops waiting once every worker of the app has been restarted a few
// times without being online, naming the app, with the workers' own reason from their log;
// the supervisor runs on (as PM2's, which lists the app errored), and start says so. An
// app beside it that starts well changes nothing.
func TestStartCrashLoop(t *testing.T) {
	t.Parallel()
	const reason = "crash.sh: cannot read /etc/crash-test.conf: no such file"
	for _, tc := range []struct {
		name string
		args func(dir, script string) []string
		app  string
	}{
		{"script", func(dir, script string) []string {
			return []string{script, "-instances", "2", "-listen", "127.0.0.1:0"}
		}, "app crash.sh"},
		{"one app of two", func(dir, script string) []string {
			eco := filepath.Join(dir, "ecosystem.config.json")
			os.WriteFile(eco, []byte(fmt.Sprintf(`{"apps": [
  {"name": "api", "script": %[1]q, "interpreter": "none", "instances": 1, "wait_ready": true,
   "env": {"PORT": 0, "HOST": "127.0.0.1", %[2]q: "worker", "GORACE": "atexit_sleep_ms=0"}},
  {"name": "broken", "script": %[3]q, "interpreter": "none", "instances": 2, "env": {"PORT": 0, "HOST": "127.0.0.1"}}
]}`, os.Args[0], roleEnv, script)), 0o600)
			return []string{eco}
		}, "app broken"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			script := filepath.Join(dir, "crash.sh")
			os.WriteFile(script, []byte("#!/bin/sh\necho '"+reason+"' >&2\nexit 1\n"), 0o700)
			sock := filepath.Join(dir, "s.sock")
			out, took, err := startCmd(t, envWithout(), append(tc.args(dir, script), "-socket", sock)...)
			c := &runningCluster{socket: sock}
			t.Cleanup(func() { c.cmd("kill") })
			if err == nil {
				t.Fatalf("start: no error\n%s", out)
			}
			for _, w := range []string{tc.app + ": its workers exit at start and are being restarted with backoff",
				"runs on", "`supervisor kill -socket " + sock + "` stops it", "`supervisor logs -socket " + sock + "` shows more", reason} {
				if !strings.Contains(out, w) {
					t.Errorf("start: want %q in:\n%s", w, out)
				}
			}
			if took > 30*time.Second { // was 85 s (out of restarts); a bound, not a timing
				t.Errorf("start took %v to say so", took)
			}
			if _, err := c.status(); err != nil {
				t.Errorf("status after start: %v; want the supervisor running on", err)
			}
		})
	}
}

// TestStartWaitsForSlowStarter: a worker that takes 5 s to say ready, and does not exit,
// is waited for: start returns once it is online, unrestarted.
func TestStartWaitsForSlowStarter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "slow.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("instances: 2\nwait_ready: true\nlisten: 127.0.0.1:0\ncommand: [%q]\nenv: {%s: worker, FAKE_READY_DELAY_MS: 5000, GORACE: atexit_sleep_ms=0}\n",
		os.Args[0], roleEnv)), 0o600)
	sock := filepath.Join(dir, "s.sock")
	began := time.Now()
	_, out := startInShell(t, cfg, "-socket", sock)
	c := &runningCluster{socket: sock}
	t.Cleanup(func() { c.cmd("kill") })
	if took := time.Since(began); took < 5*time.Second {
		t.Errorf("start returned after %v, before the workers said ready (5 s)", took)
	}
	st, err := c.status()
	if err != nil || len(st.Workers) != 2 {
		t.Fatalf("status: %+v %v\n%s", st, err, out)
	}
	for _, w := range st.Workers {
		if w.Status != cluster.StateOnline || w.Restarts != 0 {
			t.Errorf("worker %d: %s, %d restarts; want online, none\n%s", w.ID, w.Status, w.Restarts, out)
		}
	}
}

// TestStartReportThisRunOnly: a failed start's report shows its own run's lines, not an
// earlier run's from the same log directory (they are appended to across runs).
func TestStartReportThisRunOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	script := filepath.Join(dir, "crash.sh")
	c := &runningCluster{socket: sock}
	for _, run := range []string{"FIRST-RUN", "SECOND-RUN"} {
		os.WriteFile(script, []byte("#!/bin/sh\necho '"+run+": cannot start' >&2\nexit 1\n"), 0o700)
		out, _, err := startCmd(t, envWithout(), script, "-instances", "1", "-listen", "127.0.0.1:0", "-socket", sock)
		c.cmd("kill")
		if err == nil || !strings.Contains(out, run) {
			t.Fatalf("%s: start = %v, want a failure with its reason\n%s", run, err, out)
		}
		if run == "SECOND-RUN" && strings.Contains(out, "FIRST-RUN") {
			t.Errorf("the second start's report shows the first run's lines:\n%s", out)
		}
	}
}
