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
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/control"
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

// TestControlVersionHeader: every answer of the control socket says the protocol's
// version, so that a client of another version can tell (control.Error).
func TestControlVersionHeader(t *testing.T) {
	t.Parallel()
	c := startRun(t, fmt.Sprintf("instances: 1\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv), "--", os.Args[0])
	cl := control.NewClient(c.socket)
	for _, path := range []string{control.PathStatus, "/no-such-route"} {
		resp, err := cl.Do(context.Background(), "GET", path, nil)
		var ce *control.Error
		switch {
		case err == nil:
			resp.Body.Close()
			if v := resp.Header.Get(control.VersionHeader); v != strconv.Itoa(control.Version) {
				t.Errorf("GET %s: %s %q, want %d", path, control.VersionHeader, v, control.Version)
			}
		case errors.As(err, &ce):
			if ce.Peer != strconv.Itoa(control.Version) {
				t.Errorf("GET %s: %s %q, want %d", path, control.VersionHeader, ce.Peer, control.Version)
			}
		default:
			t.Errorf("GET %s: %v", path, err)
		}
	}
}
