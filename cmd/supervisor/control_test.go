package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/procstat"
)

// workerCalls are the requests a worker makes on the control socket in
// TestWorkerRefusedControl, with the status each must get: the reads answer, every command
// that changes the cluster is refused (403), whatever it names. The commands name no app
// the supervisor has, so that without the refusal they fail harmlessly (404, or 409 for
// the upgrade to /bin/true) rather than stop the test's cluster.
var workerCalls = []struct {
	method, path string
	want         int
}{
	{"GET", "/status", 200},
	{"GET", "/logs?n=1", 200},
	{"GET", "/metrics", 200},
	{"POST", "/upgrade?binary=/bin/true", 403},
	{"POST", "/stop?app=nosuch", 403},
	{"POST", "/reload?app=nosuch", 403},
	{"POST", "/restart?app=nosuch", 403},
	{"POST", "/scale?app=nosuch&n=1", 403},
	// The host's drain takes it out of its balancer: the operator's too (it would only
	// drain the test's cluster, which no balancer fronts, if let through).
	{"POST", "/drain", 403},
	{"POST", "/ready", 403},
}

// workerCallsControl is a fake worker's attack: once the test has written the control
// socket's path to file, it calls the socket itself (into file.self), through a child that
// left its process group and session (file.child), and through a grandchild whose parent
// exited at once, leaving it an orphan (file.orphan: the double fork of a daemon), as a
// compromised application could.
func workerCallsControl(file string) {
	var socket []byte
	for deadline := time.Now().Add(30 * time.Second); len(socket) == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		socket, _ = os.ReadFile(file)
	}
	callControl(string(socket), file+".self")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"=control-client", "FAKE_CONTROL_SOCKET="+string(socket), "FAKE_CONTROL_OUT="+file+".child")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Run()
	cmd = exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"=control-forker", "FAKE_CONTROL_SOCKET="+string(socket), "FAKE_CONTROL_OUT="+file+".orphan")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Run()
}

// callControl makes workerCalls on socket and writes "METHOD PATH STATUS BODY" lines to
// out (renamed into place when complete).
func callControl(socket, out string) {
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}
	var b strings.Builder
	for _, call := range workerCalls {
		req, _ := http.NewRequest(call.method, "http://supervisor"+call.path, nil)
		code, body := 0, ""
		if resp, err := c.Do(req); err != nil {
			body = err.Error()
		} else {
			raw, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
			resp.Body.Close()
			code, body = resp.StatusCode, strings.Join(strings.Fields(string(raw)), " ")
		}
		fmt.Fprintf(&b, "%s %s %d %s\n", call.method, call.path, code, body)
	}
	os.WriteFile(out+".tmp", []byte(b.String()), 0o600)
	os.Rename(out+".tmp", out)
}

// TestWorkerRefusedControl: a worker the supervisor started, a child of it in a session of
// its own, and a grandchild left an orphan by a double fork (the supervisor is the
// subreaper that inherits it) call the control socket as any process of the supervisor's user may:
// status, logs and metrics answer; upgrade, stop, reload, restart, scale, drain and ready are refused
// with 403 and a message that says why.
func TestWorkerRefusedControl(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	socketFile := filepath.Join(dir, "socket")
	c := startRun(t, fmt.Sprintf("instances: 1\nlisten_timeout: 5s\nenv: {GORACE: atexit_sleep_ms=0, %s: worker, FAKE_CONTROL_SOCKET_FILE: %q}\n", roleEnv, socketFile),
		"--", os.Args[0])
	if err := os.WriteFile(socketFile, []byte(c.socket), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{"self", "child", "orphan"} {
		t.Run(who, func(t *testing.T) {
			var got []byte
			waitUntil(t, 60*time.Second, "the worker's calls", func() bool {
				var err error
				got, err = os.ReadFile(socketFile + "." + who)
				return err == nil
			})
			lines := strings.Split(strings.TrimSpace(string(got)), "\n")
			if len(lines) != len(workerCalls) {
				t.Fatalf("the worker's calls:\n%s", got)
			}
			for i, call := range workerCalls {
				prefix := fmt.Sprintf("%s %s %d", call.method, call.path, call.want)
				if !strings.HasPrefix(lines[i], prefix) {
					t.Errorf("%s: %q, want %q...", who, lines[i], prefix)
				}
				if call.want == 403 && !strings.Contains(lines[i], "one of this supervisor's workers or a process one started") {
					t.Errorf("%s: %q: the refusal does not say why", who, lines[i])
				}
			}
		})
	}
	// The operator (here the test process, which is also the supervisor) is not refused.
	if out, err := c.cmd("reload"); err != nil {
		t.Errorf("reload from outside the workers: %v (%s)", err, out)
	}
}

// TestWorkerLineage: how a peer's pid is traced to a worker, through a table of processes
// (pid: parent, process group).
func TestWorkerLineage(t *testing.T) {
	const self = 100
	procs := map[int]procstat.Lineage{
		100: {PPID: 1, PGID: 100},   // the supervisor
		200: {PPID: 100, PGID: 200}, // a worker (its own group)
		201: {PPID: 200, PGID: 200}, // its child
		202: {PPID: 201, PGID: 202}, // a grandchild in a session of its own
		203: {PPID: 1, PGID: 200},   // a daemon of the worker's, reparented to init
		300: {PPID: 1, PGID: 300},   // an adopted worker (a previous supervisor's)
		301: {PPID: 300, PGID: 301}, // its child, in a group of its own
		400: {PPID: 1, PGID: 400},   // the operator's shell
		401: {PPID: 400, PGID: 401}, // supervisor reload
		500: {PPID: 100, PGID: 100}, // a check the supervisor runs (upgrade's -h)
	}
	read := func(pid int) (procstat.Lineage, error) {
		l, ok := procs[pid]
		if !ok {
			return l, errors.New("no such process")
		}
		return l, nil
	}
	workers := map[int]bool{200: true, 300: true}
	tests := []struct {
		name    string
		pid     int
		want    int
		wantErr bool
	}{
		{"the supervisor itself", 100, 0, false},
		{"a worker", 200, 200, false},
		{"a worker's child", 201, 200, false},
		{"a worker's grandchild after setsid", 202, 200, false},
		{"a worker's daemon reparented to init", 203, 200, false},
		{"an adopted worker", 300, 300, false},
		{"an adopted worker's child", 301, 300, false},
		{"the operator's command", 401, 0, false},
		{"a child of the supervisor", 500, self, false},
		{"outside the pid namespace", 0, 0, false},
		{"gone", 999, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := workerLineage(tc.pid, self, workers, read)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("workerLineage(%d) = %d, %v; want %d, error %v", tc.pid, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestUpgradeBinaryChecks: an upgrade executes this supervisor's own binary, or one that
// -upgrade-binary names, and only a file nobody but its owner (this user or root) can
// write, in a directory likewise; symbolic links are resolved once. A binary that passes
// every check of the path goes on to the next check, which fails here since the test is
// not `supervisor run`.
func TestUpgradeBinaryChecks(t *testing.T) {
	dir := t.TempDir()
	script := []byte("#!/bin/sh\necho 'usage: supervisor run'\n")
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, script, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	os.Chmod(dir, 0o755)
	own := mk("supervisor", 0o755)
	other := mk("supervisor-2", 0o755)
	groupWritable := mk("supervisor-gw", 0o775)
	notExec := mk("supervisor-nx", 0o644)
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	inOpen := filepath.Join(open, "supervisor")
	os.WriteFile(inOpen, script, 0o755)
	link := filepath.Join(dir, "current")
	os.Symlink(own, link)
	linkToGW := filepath.Join(dir, "current-gw")
	os.Symlink(groupWritable, linkToGW)

	const passed = "not started as `supervisor run ...`"
	tests := []struct {
		name    string
		allowed []string
		bin     string
		want    string
	}{
		{"its own path", nil, own, passed},
		{"a link to its own path", nil, link, passed},
		{"another path", nil, other, "start it with -upgrade-binary " + other},
		{"another path named by -upgrade-binary", []string{other}, other, passed},
		{"a group-writable file", []string{groupWritable}, groupWritable, "is writable by its group or by others (mode -rwxrwxr-x)"},
		{"a link allowed, to a group-writable file", []string{linkToGW}, linkToGW, groupWritable + " is writable by its group"},
		{"a file in an open directory", []string{inOpen}, inOpen, open + " is writable by its group or by others"},
		{"not executable", []string{notExec}, notExec, "is not an executable file"},
		{"relative", nil, "supervisor", "want an absolute path"},
		{"missing", []string{filepath.Join(dir, "nope")}, filepath.Join(dir, "nope"), "nope: no such file or directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := &upgrader{fl: &fleet{}, defaultBinary: own, allowed: tc.allowed}
			_, err := u.check(tc.bin)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("check(%s) = %v, want an error with %q", tc.bin, err, tc.want)
			}
		})
	}
}
