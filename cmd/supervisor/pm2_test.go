package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/procstat"
)

// pm2Eco writes an ecosystem file of a cluster-mode api (2 workers on a port of its own)
// and a fork-mode jobs program, both this test binary, and returns its path.
func pm2Eco(t *testing.T, dir string) string {
	t.Helper()
	eco := filepath.Join(dir, "ecosystem.config.json")
	err := os.WriteFile(eco, []byte(fmt.Sprintf(`{"apps": [
  {"name": "api", "script": %[1]q, "interpreter": "none", "instances": 2, "wait_ready": true,
   "env": {"PORT": 0, "HOST": "127.0.0.1", %[2]q: "worker", "GORACE": "atexit_sleep_ms=0"}},
  {"name": "jobs", "script": %[1]q, "interpreter": "none", "exec_mode": "fork", "kill_timeout": 3000,
   "env": {%[2]q: "background", "GORACE": "atexit_sleep_ms=0"}}
]}`, os.Args[0], roleEnv)), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	return eco
}

var backgroundPID = regexp.MustCompile(`supervisor pid (\d+) runs in the background`)

// startInShell runs `supervisor start ARGS` from a shell that exits once start returns,
// as a user's ssh session would, and returns the background supervisor's pid. The test
// binary is the supervisor (roleEnv) and so the one start re-executes.
func startInShell(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", append([]string{"-c", `exec "$0" start "$@"`, os.Args[0]}, args...)...)
	cmd.Env = append(os.Environ(), roleEnv+"=supervisor", "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("start %v: %v\n%s", args, err, out)
	}
	m := backgroundPID.FindSubmatch(out)
	if m == nil {
		t.Fatalf("start %v printed no background pid:\n%s", args, out)
	}
	pid, _ := strconv.Atoi(string(m[1]))
	t.Cleanup(func() { // whatever the test did, nothing stays behind
		if alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pid, string(out)
}

// alive reports whether pid is a live process (a zombie is not: it only waits for init).
func alive(pid int) bool { return procstat.Running("", pid) }

// sessionOf is the session id of pid (/proc/PID/stat's sixth field).
func sessionOf(t *testing.T, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	sid, _ := strconv.Atoi(f[3]) // state ppid pgrp session
	return sid
}

// TestPM2Day: a PM2 user's commands against real processes: `start FILE` from a shell
// that exits (the supervisor serves on, in a session of its own, logging to files), ls,
// jlist, describe, stop APP listed as stopped, start APP, scale, save, kill, resurrect
// (the saved scale and the stopped app as they were), delete, flush, kill.
func TestPM2Day(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	eco := pm2Eco(t, dir)
	sock := filepath.Join(dir, "s.sock")
	pid, out := startInShell(t, eco, "-socket", sock)
	c := &runningCluster{socket: sock}

	if !alive(pid) {
		t.Fatalf("the background supervisor %d is gone once the shell exited:\n%s", pid, out)
	}
	if sid := sessionOf(t, pid); sid != pid {
		t.Errorf("background supervisor %d is in session %d, want its own (setsid)", pid, sid)
	}
	if !hasRow(out, "api", "0") || !hasRow(out, "jobs", "0") {
		t.Errorf("start printed no table of the apps:\n%s", out)
	}
	logFile := filepath.Join(dir, "s-logs", "supervisor.log")
	if fi, err := os.Stat(logFile); err != nil || fi.Size() == 0 {
		t.Errorf("the background supervisor's log %s: %v (want it written)", logFile, err)
	}

	steps := []struct {
		name  string
		args  []string
		check func(out string) error
	}{
		{"ls", []string{"ls"}, rows("api 0", "api 1", "jobs 0")},
		{"list", []string{"list", "api"}, rows("api 0", "api 1")},
		{"jlist", []string{"jlist"}, func(out string) error {
			var st control.Status
			if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Workers) != 3 || len(st.Apps) != 2 {
				return fmt.Errorf("want JSON of 3 workers and 2 apps (%v)", err)
			}
			return nil
		}},
		{"describe", []string{"describe", "api"}, func(out string) error {
			st, _ := c.status()
			for _, want := range []string{"cwd", "command", "restarts", "uptime", "HOST, PORT", strconv.Itoa(st.Workers[0].PID), strconv.Itoa(st.Workers[1].PID)} {
				if !strings.Contains(out, want) {
					return fmt.Errorf("no %q", want)
				}
			}
			return nil
		}},
		{"stop APP keeps it listed", []string{"stop", "api"}, rows("api -", "jobs 0")},
		{"stopped in ls", []string{"ls"}, func(out string) error {
			if !regexp.MustCompile(`(?m)^api\s+-\s+-\s+stopped`).MatchString(out) {
				return errors.New("no row api - - stopped")
			}
			return nil
		}},
		{"start APP", []string{"start", "api"}, rows("api 0", "api 1", "jobs 0")},
		{"scale", []string{"scale", "api", "3"}, rows("api 2")},
		{"scale out of range", []string{"scale", "api", "-5"}, nil},
		{"stop jobs", []string{"stop", "jobs"}, rows("jobs -")},
		{"save", []string{"save"}, contains("saved 2 app(s) to " + filepath.Join(dir, "s.dump.json"))},
		{"kill", []string{"kill"}, contains("killed")},
	}
	for _, s := range steps {
		out, err := c.cmd(s.args...)
		if s.check == nil { // scale -5 from 3: the real numbers, said once
			if err == nil || !strings.Contains(err.Error(), "-5 from 3 workers leaves -2: want 1 to") || strings.Contains(err.Error(), "scale: scale:") {
				t.Errorf("%s: %v, want one \"scale:\" and the numbers", s.name, err)
			}
			continue
		}
		if err == nil {
			err = s.check(out)
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", s.name, err, out)
		}
	}
	if alive(pid) {
		t.Fatalf("supervisor %d alive after kill", pid)
	}
	if fi, err := os.Stat(filepath.Join(dir, "s.dump.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("dump: %v, want mode 0600 (it holds the environment)", err)
	}

	// resurrect: in the background again, with the saved scale and jobs stopped.
	var rout bytes.Buffer
	if err := run(context.Background(), []string{"resurrect", "-socket", sock}, func(string) string { return "" }, &rout, &rout); err != nil {
		t.Fatalf("resurrect: %v\n%s", err, rout.String())
	}
	st, err := c.status()
	if err != nil || len(st.Workers) != 3 || len(st.Apps) != 2 || st.Apps[1].Status != "stopped" {
		t.Fatalf("after resurrect: %+v %v; want api's 3 workers and jobs stopped\n%s", st, err, rout.String())
	}
	if code, _, err := fetch("http://"+st.Apps[0].Addr+"/", 5*time.Second); err != nil || code != 200 {
		t.Errorf("api after resurrect: %d %v", code, err)
	}
	for _, s := range []struct {
		name  string
		args  []string
		check func(string) error
	}{
		{"delete", []string{"delete", "jobs"}, func(out string) error {
			if strings.Contains(out, "jobs") {
				return errors.New("jobs still listed")
			}
			return nil
		}},
		{"delete needs a name", []string{"delete"}, nil},
		{"flush", []string{"flush"}, contains("flushed " + filepath.Join(dir, "s-logs", "api-0.log"))},
		{"kill", []string{"kill"}, contains("killed")},
	} {
		out, err := c.cmd(s.args...)
		if s.check == nil {
			if err == nil {
				t.Errorf("%s: no error\n%s", s.name, out)
			}
			continue
		}
		if err == nil {
			err = s.check(out)
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", s.name, err, out)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "s-logs", "api-0.log")); err != nil || fi.Size() > 4096 {
		t.Errorf("api-0.log after flush: %v, size %d; want it emptied (what came after is small)", err, fi.Size())
	}
}

// rows checks that a table has a row beginning with each "COL1 COL2".
func rows(want ...string) func(string) error {
	return func(out string) error {
		for _, w := range want {
			f := strings.Fields(w)
			if !hasRow(out, f[0], f[1]) {
				return fmt.Errorf("no row %q", w)
			}
		}
		return nil
	}
}

func contains(want string) func(string) error {
	return func(out string) error {
		if !strings.Contains(out, want) {
			return fmt.Errorf("no %q", want)
		}
		return nil
	}
}

// TestStartFailsWithLog: a background start whose supervisor exits at once says so with
// the end of its log, instead of waiting. (A port another process holds: run -check, which
// start runs first, binds nothing and passes it; a program not there it refuses before:
// TestStartRefusesWhatCheckRefuses.)
func TestStartFailsWithLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	cfg := filepath.Join(dir, "bad.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("instances: 1\nlisten: %s\ncommand: [%q]\nenv: {%s: worker}\n", held.Addr(), os.Args[0], roleEnv)), 0o600)
	cmd := exec.Command(os.Args[0], "start", cfg, "-socket", filepath.Join(dir, "s.sock"))
	cmd.Env = append(os.Environ(), roleEnv+"=supervisor", "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "exited before its apps were online") || !strings.Contains(string(out), "served by another process") {
		t.Errorf("start on a held port: %v\n%s\nwant an error with the log's end naming the port's other process", err, out)
	}
}

// TestSecondSupervisorOnPort: a second supervisor on a port the first serves is refused,
// naming the first's pid and control socket, unless -share-port says to share it.
func TestSecondSupervisorOnPort(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("instances: 1\nwait_ready: true\nlisten: 127.0.0.1:0\ncommand: [%q]\nenv: {%s: worker, GORACE: atexit_sleep_ms=0}\n",
		os.Args[0], roleEnv)), 0o600)
	first := filepath.Join(dir, "a.sock")
	pid, _ := startInShell(t, cfg, "-socket", first)
	a := &runningCluster{socket: first}
	t.Cleanup(func() { a.cmd("kill") })
	st, err := a.status()
	if err != nil {
		t.Fatal(err)
	}
	second := filepath.Join(dir, "b.sock")
	cmd := exec.Command(os.Args[0], "run", "-config", cfg, "-listen", st.Addr, "-socket", second)
	cmd.Env = append(os.Environ(), roleEnv+"=supervisor", "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	for _, want := range []string{"served by another process", fmt.Sprintf("pid %d", pid), "control socket " + first, "-share-port"} {
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("second supervisor on %s: %v, want a refusal with %q:\n%s", st.Addr, err, want, out)
		}
	}

	// Shared on purpose: it starts, and both serve.
	b, _ := startInShell(t, cfg, "-listen", st.Addr, "-socket", second, "-share-port")
	bc := &runningCluster{socket: second}
	if out, err := bc.cmd("kill"); err != nil || alive(b) {
		t.Errorf("kill of the sharing supervisor: %v\n%s", err, out)
	}
}

// TestUnknownCommandSuggests: a mistyped command names the nearest one.
func TestUnknownCommandSuggests(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"staus", `unknown command "staus"; did you mean "status"?`},
		{"stauts", `did you mean "status"?`},
		{"restrat", `did you mean "restart"?`},
		{"jlsit", `did you mean "jlist"?`},
		{"resurect", `did you mean "resurrect"?`},
		{"dlete", `did you mean "delete"?`},
		{"frobnicate", `unknown command "frobnicate"`},
		{"--versoin", `did you mean "version"?`},
		{"lst", `did you mean "ls"?`},
		{"x", `unknown command "x"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), []string{tc.in}, func(string) string { return "" }, &out, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want %q", tc.in, err, tc.want)
			}
			if !strings.Contains(tc.want, "did you mean") && err != nil && strings.Contains(err.Error(), "did you mean") {
				t.Errorf("%s: %v, want no suggestion", tc.in, err)
			}
		})
	}
}

// TestStartScript: `start app.js` runs an unmodified Node script in the background as
// `node app.js` on the cluster's port, as `pm2 start app.js` does.
func TestStartScript(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("no node")
	}
	dir := t.TempDir()
	app := filepath.Join(dir, "app.js")
	os.WriteFile(app, []byte("require('http').createServer((q, s) => s.end('hello ' + process.argv[2])).listen(process.env.PORT)\n"), 0o600)
	sock := filepath.Join(dir, "s.sock")
	pid, out := startInShell(t, app, "-instances", "2", "-listen", "127.0.0.1:0", "-socket", sock, "--", "there")
	c := &runningCluster{socket: sock}
	t.Cleanup(func() { c.cmd("kill") })
	st, err := c.status()
	if err != nil || len(st.Workers) != 2 {
		t.Fatalf("status: %+v %v\n%s", st, err, out)
	}
	if code, body, err := fetch("http://"+st.Addr+"/", 5*time.Second); err != nil || code != 200 || body != "hello there" {
		t.Errorf("GET: %d %q %v, want 200 \"hello there\"", code, body, err)
	}
	if out, err := c.cmd("describe"); err != nil || !strings.Contains(out, "node "+app+" there") {
		t.Errorf("describe: %v\n%s\nwant the command node %s there", err, out, app)
	}
	if out, err := c.cmd("kill"); err != nil || alive(pid) {
		t.Errorf("kill: %v, supervisor alive %v\n%s", err, alive(pid), out)
	}
}

// TestStartOneShotJob: `start` of a file whose fork-mode job runs once and exits
// (autorestart: false) returns once the job has ended, listing it stopped, instead of
// waiting (120 s) for it to come online; a cluster app whose workers never come up and run
// out of restarts ends errored, and start says so at once.
func TestStartOneShotJob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, app, wantRow string
		wantErr            bool
	}{
		// A fork-mode worker is online from its start, so the job may be seen either way.
		{"finished", `{"name": "once", "script": "/bin/true", "interpreter": "none", "exec_mode": "fork", "autorestart": false}`, "(online|stopped)", false},
		{"out of restarts", `{"name": "once", "script": "/bin/false", "interpreter": "none", "exec_mode": "cluster", "instances": 1,
		  "wait_ready": true, "max_restarts": 1, "min_uptime": 60000, "restart_delay": 10, "env": {"PORT": 0, "HOST": "127.0.0.1"}}`, "errored", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			eco := filepath.Join(dir, "ecosystem.config.json")
			os.WriteFile(eco, []byte(`{"apps": [`+tc.app+`]}`), 0o600)
			sock := filepath.Join(dir, "s.sock")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "start", eco, "-socket", sock)
			cmd.Env = append(os.Environ(), roleEnv+"=supervisor", "GORACE=atexit_sleep_ms=0")
			out, err := cmd.CombinedOutput()
			c := &runningCluster{socket: sock}
			t.Cleanup(func() { c.cmd("kill") })
			if (err != nil) != tc.wantErr || !regexp.MustCompile(`(?m)^once\s+0\s+\S+\s+`+tc.wantRow).Match(out) {
				t.Errorf("start: %v\n%s\nwant error %v and the job listed %s", err, out, tc.wantErr, tc.wantRow)
			}
		})
	}
}

// TestSaveToStateDir: the supervisor on the default socket keeps its dump and the logs of
// `start` in the state directory ($XDG_STATE_HOME/onehost), which outlives a reboot where
// the runtime directory (/run/user/UID, tmpfs) does not: save writes dump.json there (the
// directory 0700, the file 0600), resurrect reads it there. (save once wrote to /run.)
func TestSaveToStateDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	eco := pm2Eco(t, dir)
	runtime, state := filepath.Join(dir, "run"), filepath.Join(dir, "state")
	os.Mkdir(runtime, 0o700)
	env := map[string]string{"XDG_RUNTIME_DIR": runtime, "XDG_STATE_HOME": state}
	getenv := func(k string) string { return env[k] }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := exec.CommandContext(ctx, os.Args[0], "start", eco)
	start.Env = append(os.Environ(), roleEnv+"=supervisor", "GORACE=atexit_sleep_ms=0", "XDG_RUNTIME_DIR="+runtime, "XDG_STATE_HOME="+state)
	out, err := start.CombinedOutput()
	if err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	cmd := func(args ...string) (string, error) {
		var b bytes.Buffer
		err := run(context.Background(), args, getenv, &b, &b)
		return b.String(), err
	}
	t.Cleanup(func() { cmd("kill") })
	logs := filepath.Join(state, "onehost", "logs")
	for _, f := range []string{"supervisor.log", "api-0.log", "api-1.log", "jobs-0.log"} {
		if _, err := os.Stat(filepath.Join(logs, f)); err != nil {
			t.Errorf("start's logs: %v", err)
		}
	}
	if out, err := cmd("stop", "jobs"); err != nil {
		t.Fatalf("stop jobs: %v\n%s", err, out)
	}
	dump := filepath.Join(state, "onehost", "dump.json")
	if out, err := cmd("save"); err != nil || !strings.Contains(out, "saved 2 app(s) to "+dump) {
		t.Fatalf("save: %v\n%s", err, out)
	}
	if fi, err := os.Stat(filepath.Dir(dump)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state directory: %v, %v; want mode 0700", fi, err)
	}
	b, err := os.ReadFile(dump)
	var d control.Dump
	if err != nil || json.Unmarshal(b, &d) != nil || d.Socket != "" {
		t.Fatalf("dump: %v %q; want one without the default socket (resurrect takes its own environment's)", err, d.Socket)
	}
	if out, err := cmd("kill"); err != nil {
		t.Fatalf("kill: %v\n%s", err, out)
	}
	if out, err := cmd("resurrect"); err != nil || !strings.Contains(out, "resurrected from "+dump) {
		t.Fatalf("resurrect: %v\n%s", err, out)
	}
	out2, err := cmd("status", "-json")
	var st control.Status
	if err != nil || json.Unmarshal([]byte(out2), &st) != nil || len(st.Apps) != 2 || st.Apps[1].Status != "stopped" {
		t.Fatalf("after resurrect: %v %+v; want api running and jobs stopped", err, st.Apps)
	}
}

// TestPM2Spellings: what a PM2 user types works as they meant it. A configuration file
// where an app is expected means its apps (`reload ecosystem.config.js --update-env`,
// restart, stop, delete), `start FILE` of the file the supervisor runs starts its stopped
// and deleted apps (pm2 start after pm2 delete; the supervisor once stayed empty), flags go
// before the file too (`start -i 2 app.js`), `--name` names the app, `logs --nostream`
// prints and returns, and a bare `startup` makes the unit of the running supervisor's
// configuration. (Each was refused or misread before.)
func TestPM2Spellings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	eco := pm2Eco(t, dir)
	runtime, state := filepath.Join(dir, "run"), filepath.Join(dir, "state")
	os.Mkdir(runtime, 0o700)
	env := map[string]string{"XDG_RUNTIME_DIR": runtime, "XDG_STATE_HOME": state, "PATH": os.Getenv("PATH")}
	getenv := func(k string) string { return env[k] }
	start := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"start"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), roleEnv+"=supervisor", "GORACE=atexit_sleep_ms=0", "XDG_RUNTIME_DIR="+runtime, "XDG_STATE_HOME="+state)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("start %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	cmd := func(args ...string) (string, error) {
		var b bytes.Buffer
		err := run(context.Background(), args, getenv, &b, &b)
		return b.String(), err
	}
	t.Cleanup(func() { cmd("kill") })
	status := func() control.Status {
		t.Helper()
		out, err := cmd("jlist")
		var st control.Status
		if err != nil || json.Unmarshal([]byte(out), &st) != nil {
			t.Fatalf("jlist: %v\n%s", err, out)
		}
		return st
	}
	start(eco)
	steps := []struct {
		name  string
		args  []string
		want  string
		check func(control.Status) error
	}{
		{"reload FILE --update-env", []string{"reload", eco, "--update-env"}, "reloaded", nil},
		{"restart FILE", []string{"restart", eco}, "restarted", nil},
		{"stop FILE", []string{"stop", eco}, "stopped", func(st control.Status) error {
			if len(st.Apps) != 2 || st.Apps[0].Status != "stopped" || st.Apps[1].Status != "stopped" {
				return fmt.Errorf("apps %+v, want both stopped", st.Apps)
			}
			return nil
		}},
		{"logs --nostream", []string{"logs", "--nostream", "-n", "3"}, "", nil},
		{"delete FILE", []string{"delete", eco}, "deleted", func(st control.Status) error {
			if len(st.Apps) != 0 {
				return fmt.Errorf("apps %+v, want none", st.Apps)
			}
			return nil
		}},
	}
	for _, s := range steps {
		out, err := cmd(s.args...)
		if err != nil || !strings.Contains(out, s.want) {
			t.Fatalf("%s: %v\n%s", s.name, err, out)
		}
		if s.check != nil {
			if err := s.check(status()); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
		}
	}
	// start FILE again on the emptied supervisor: its apps come back.
	if out := start(eco); !strings.Contains(out, "started again") {
		t.Errorf("start FILE after delete FILE:\n%s", out)
	}
	if st := status(); len(st.Apps) != 2 || !everyOnline(st) || len(st.Workers) != 3 {
		t.Fatalf("after start FILE: %+v", st.Apps)
	}
	// A bare startup: the running supervisor's configuration.
	if out, err := cmd("startup"); err != nil || !strings.Contains(out, "run -config "+eco) {
		t.Errorf("bare startup: %v\n%s", err, out)
	}
	// Every app deleted, then another file: the empty supervisor is replaced.
	if out, err := cmd("delete", "all"); err != nil {
		t.Fatalf("delete all: %v\n%s", err, out)
	}
	script := filepath.Join(dir, "server.sh") // the fake worker, whatever role the supervisor's environment gives
	os.WriteFile(script, []byte(fmt.Sprintf("#!/bin/sh\n%s=worker exec %q\n", roleEnv, os.Args[0])), 0o700)
	out := start("-i", "2", script, "--name", "api2", "-listen", "127.0.0.1:0")
	if !strings.Contains(out, "had no app left") {
		t.Errorf("start on an empty supervisor did not say it replaced it:\n%s", out)
	}
	st := status()
	if len(st.Apps) != 1 || st.Apps[0].Name != "api2" || len(st.Workers) != 2 {
		t.Errorf("after start -i 2 FILE --name api2: %+v, %d workers", st.Apps, len(st.Workers))
	}
}

// TestKillEmptySupervisor: `kill` of a supervisor with no app left gets its answer. Such a
// supervisor stops within microseconds of the request, and its control server once closed
// the connection before the 202 was written: kill (and start, replacing an emptied
// supervisor) failed with "Post http://supervisor/stop: EOF", now and then.
func TestKillEmptySupervisor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	runtime := filepath.Join(dir, "run")
	os.Mkdir(runtime, 0o700)
	env := map[string]string{"XDG_RUNTIME_DIR": runtime, "XDG_STATE_HOME": filepath.Join(dir, "state"), "PATH": os.Getenv("PATH")}
	cmd := func(args ...string) (string, error) {
		var b bytes.Buffer
		err := run(context.Background(), args, func(k string) string { return env[k] }, &b, &b)
		return b.String(), err
	}
	t.Cleanup(func() { cmd("kill") })
	script := filepath.Join(dir, "server.sh")
	os.WriteFile(script, []byte(fmt.Sprintf("#!/bin/sh\n%s=worker exec %q\n", roleEnv, os.Args[0])), 0o700)
	for i := range 6 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		start := exec.CommandContext(ctx, os.Args[0], "start", "-i", "1", script, "-listen", "127.0.0.1:0")
		start.Env = append(os.Environ(), roleEnv+"=supervisor", "GORACE=atexit_sleep_ms=0", "XDG_RUNTIME_DIR="+runtime)
		out, err := start.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("round %d: start: %v\n%s", i, err, out)
		}
		if out, err := cmd("delete", "all"); err != nil {
			t.Fatalf("round %d: delete all: %v\n%s", i, err, out)
		}
		if out, err := cmd("kill"); err != nil || !strings.Contains(out, "killed") {
			t.Fatalf("round %d: kill of the emptied supervisor: %v\n%s", i, err, out)
		}
	}
}
