package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
)

// pidsByApp maps "app/slot" to each worker's pid.
func pidsByApp(st control.Status) map[string]int {
	m := map[string]int{}
	for _, w := range st.Workers {
		m[fmt.Sprintf("%s/%d", w.App, w.ID)] = w.PID
	}
	return m
}

// TestEcosystemApps: an ecosystem file of an API in cluster mode on one port, a second
// on another and a fork-mode program, as PM2 runs such a file: all supervised and listed;
// each reloaded, restarted, scaled and stopped alone without touching the others; a
// crash of one app's worker restarts only that worker.
func TestEcosystemApps(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	eco := filepath.Join(tmp, "ecosystem.config.json")
	logDir := filepath.Join(tmp, "logs")
	bin := os.Args[0]
	os.WriteFile(eco, []byte(fmt.Sprintf(`{"apps": [
  {"name": "api", "script": %[1]q, "interpreter": "none", "instances": 2, "wait_ready": true,
   "env": {"PORT": 0, "HOST": "127.0.0.1", %[2]q: "worker"}},
  {"name": "admin", "script": %[1]q, "interpreter": "none", "instances": 1, "wait_ready": true,
   "env": {"PORT": 0, "HOST": "127.0.0.1", %[2]q: "worker"}},
  {"name": "jobs", "script": %[1]q, "interpreter": "none", "exec_mode": "fork", "kill_timeout": 3000,
   "env": {%[2]q: "background"}}
]}`, bin, roleEnv)), 0o600)
	c, logs := runEcosystem(t, eco, "-log-dir", logDir)
	var st control.Status
	waitUntil(t, 30*time.Second, "every app's workers online", func() bool {
		var err error
		st, err = c.status()
		return err == nil && len(st.Workers) == 4 && everyOnline(st)
	})
	if len(st.Apps) != 3 || st.Apps[0].Name != "api" || st.Apps[1].Name != "admin" || st.Apps[2].Mode != cluster.ExecFork ||
		st.Apps[0].Addr == st.Apps[1].Addr || st.Apps[2].Addr != "" {
		t.Fatalf("apps %+v: want api and admin on ports of their own, jobs in fork mode without one", st.Apps)
	}
	for _, a := range st.Apps[:2] {
		if code, body, err := fetch("http://"+a.Addr+"/", 5*time.Second); err != nil || code != 200 {
			t.Errorf("GET %s (%s): %d %q %v", a.Addr, a.Name, code, body, err)
		}
	}
	table, err := c.cmd("status")
	if err != nil || !strings.Contains(table, "app api (cluster): serving "+st.Apps[0].Addr) ||
		!strings.Contains(table, "app jobs (fork): 1 processes") || !hasRow(table, "app", "id") || !hasRow(table, "jobs", "0") {
		t.Errorf("status table (err %v):\n%s\nwant a line per app and an app column", err, table)
	}

	// Each app alone: the others' processes stay.
	steps := []struct {
		name    string
		args    []string
		changed []string // the workers that get new pids
	}{
		{"reload admin", []string{"reload", "admin"}, []string{"admin/0"}},
		{"reload jobs (fork: a restart)", []string{"reload", "jobs"}, []string{"jobs/0"}},
		{"restart api", []string{"restart", "api"}, []string{"api/0", "api/1"}},
	}
	for _, step := range steps {
		before := pidsByApp(st)
		if out, err := c.cmd(step.args...); err != nil {
			t.Fatalf("%s: %v\n%s", step.name, err, out)
		}
		st, _ = c.status()
		after := pidsByApp(st)
		for k, pid := range before {
			want := strings.Contains(strings.Join(step.changed, " "), k)
			if got := after[k] != pid && after[k] != 0; got != want {
				t.Errorf("%s: %s pid %d → %d; want changed=%v", step.name, k, pid, after[k], want)
			}
		}
		if !everyOnline(st) {
			t.Errorf("%s: not all online after: %+v", step.name, st.Workers)
		}
	}

	// kill -9 of one api worker: only it restarts.
	before := pidsByApp(st)
	syscall.Kill(before["api/1"], syscall.SIGKILL)
	waitUntil(t, 20*time.Second, "api/1 restarted", func() bool {
		st, _ = c.status()
		p := pidsByApp(st)["api/1"]
		return p != 0 && p != before["api/1"] && everyOnline(st)
	})
	for k, pid := range pidsByApp(st) {
		if k != "api/1" && pid != before[k] {
			t.Errorf("kill -9 of api/1 changed %s: pid %d → %d", k, before[k], pid)
		}
	}

	// scale names its app; stop one app, and restart starts it again.
	if out, err := c.cmd("scale", "+1"); err == nil || !strings.Contains(out+err.Error(), "name the app") {
		t.Errorf("scale +1 with three apps: %v %s, want an error asking for the app", err, out)
	}
	if out, err := c.cmd("scale", "api", "+1"); err != nil || !hasRow(out, "api", "2") {
		t.Errorf("scale api +1: %v\n%s", err, out)
	}
	if out, err := c.cmd("stop", "jobs"); err != nil || !strings.Contains(out, "app jobs (fork): stopped") {
		t.Errorf("stop jobs: %v\n%s", err, out)
	}
	st, _ = c.status()
	if n := len(st.Workers); n != 4 || st.Apps[2].Status != "stopped" {
		t.Errorf("after stop jobs: %d workers, apps %+v; want api's 3 and admin's 1, jobs stopped", n, st.Apps)
	}
	if code, _, err := fetch("http://"+st.Apps[0].Addr+"/", 5*time.Second); err != nil || code != 200 {
		t.Errorf("api after jobs stopped: %d %v", code, err)
	}
	if out, err := c.cmd("restart", "jobs"); err != nil {
		t.Errorf("restart a stopped app: %v\n%s", err, out)
	}
	waitUntil(t, 20*time.Second, "jobs running again", func() bool {
		st, _ = c.status()
		return len(st.Workers) == 5 && everyOnline(st) && st.Apps[2].Status == "running"
	})

	// Names are checked; logs and status take one app.
	if out, err := c.cmd("reload", "nope"); err == nil || !strings.Contains(out+err.Error(), `app "nope": no such app: the apps are api, admin, jobs`) {
		t.Errorf("reload nope: %v %s", err, out)
	}
	if out, err := c.cmd("logs", "jobs", "-n", "0"); err != nil || !strings.Contains(out, "background up") || strings.Contains(out, `"app": "api"`) || strings.Contains(out, "|api") {
		t.Errorf("logs jobs: %v\n%s\nwant jobs' lines only", err, out)
	}
	one, err := c.cmd("status", "admin", "-json")
	if err != nil || strings.Count(one, `"app":"admin"`) != 1 || strings.Contains(one, `"app":"api"`) {
		t.Errorf("status admin -json: %v\n%s", err, one)
	}
	for _, f := range []string{"api-0.log", "api-1.log", "admin-0.log", "jobs-0.log"} {
		if _, err := os.Stat(filepath.Join(logDir, f)); err != nil {
			t.Errorf("-log-dir: %v", err)
		}
	}
	if !strings.Contains(logs.String(), `"app": "jobs"`) {
		t.Errorf("no line of app jobs in the log")
	}
}

// hasRow reports whether a table has a line whose first two columns are a and b.
func hasRow(table, a, b string) bool {
	for _, l := range strings.Split(table, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == a && f[1] == b {
			return true
		}
	}
	return false
}

// runEcosystem runs `supervisor run -config FILE` with extra arguments, and stops it at
// the end.
func runEcosystem(t *testing.T, eco string, extra ...string) (*runningCluster, *syncBuffer) {
	t.Helper()
	c := &runningCluster{socket: filepath.Join(t.TempDir(), "s.sock"), done: make(chan error, 1)}
	logs := &syncBuffer{}
	go func() {
		// Not t.Context(): it is cancelled just before the cleanup below runs, and a stop
		// command arriving during the stop that started is a second stop (kill now), which
		// run reports as an error (CI saw it once).
		c.done <- run(context.Background(), append([]string{"run", "-config", eco, "-socket", c.socket}, extra...),
			func(string) string { return "" }, os.Stderr, logs)
	}()
	t.Cleanup(func() {
		c.cmd("stop")
		select {
		case err := <-c.done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("run did not return after stop")
		}
		if t.Failed() {
			t.Logf("supervisor log:\n%s", logs)
		}
	})
	return c, logs
}

// TestEcosystemAppsRefused: the command line's one-cluster settings are refused for a file
// of several apps, and -only picks one.
func TestEcosystemAppsRefused(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	eco := filepath.Join(tmp, "ecosystem.json")
	os.WriteFile(eco, []byte(`{"apps":[{"name":"a","script":"/bin/true"},{"name":"b","script":"/bin/true","exec_mode":"fork"}]}`), 0o600)
	sock := filepath.Join(tmp, "s.sock")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"-listen with two apps", []string{"-listen", "127.0.0.1:0"}, "listen: applies to one app, and " + eco + " has 2: set it in the file, or pick one app with -only NAME"},
		{"-instances with two apps", []string{"-instances", "2"}, "instances: applies to one app"},
		{"-only unknown", []string{"-only", "c"}, `only: "c": ` + eco + " has no app of that name (its apps: a, b)"},
		{"-only a fork app with -listen", []string{"-only", "b", "-listen", "127.0.0.1:0"}, "app b: listen: \"127.0.0.1:0\": exec_mode: fork gets no socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "-config", eco, "-socket", sock}, tc.args...)
			err := run(t.Context(), args, func(string) string { return "" }, os.Stderr, &syncBuffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run %q = %v, want %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestRestartsKeptAcrossStopStart: `stop` then `start` keeps each slot's restart count, as
// PM2's ↺ (it went back to 0 with the new cluster).
func TestRestartsKeptAcrossStopStart(t *testing.T) {
	t.Parallel()
	c := startRun(t, fmt.Sprintf("instances: 1\nrestart_delay: 10ms\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv), "--", os.Args[0])
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(st.Workers[0].PID, syscall.SIGKILL)
	waitUntil(t, 30*time.Second, "the killed worker restarted and online", func() bool {
		st, err := c.status()
		return err == nil && len(st.Workers) == 1 && st.Workers[0].Restarts == 1 && everyOnline(st)
	})
	for _, args := range [][]string{{"stop", "all"}, {"start", "all"}} {
		if out, err := c.cmd(args...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	if st, err := c.status(); err != nil || len(st.Workers) != 1 || st.Workers[0].Restarts != 1 {
		t.Errorf("after stop and start: %+v %v; want the slot's 1 restart kept", st.Workers, err)
	}
}
