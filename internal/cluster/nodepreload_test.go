package cluster

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestNodeEnv(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		env       []string
		want      []string // entries of the result
		absent    []string // keys not in it
		preloaded bool
	}{
		{"defaults", Config{}, nil,
			[]string{"NODE_APP_INSTANCE=1", "pm_id=1", "ONEHOST_NODE_PORT=3108", "PORT=3108", "NODE_OPTIONS=--require DIR/onehost-preload.cjs"}, nil, true},
		{"the user's PORT and NODE_OPTIONS kept", Config{}, []string{"PORT=4444", "NODE_OPTIONS=--max-old-space-size=512"},
			[]string{"ONEHOST_NODE_PORT=3108", "NODE_OPTIONS=--max-old-space-size=512 --require DIR/onehost-preload.cjs"}, []string{"PORT"}, true},
		{"the user's NODE_APP_INSTANCE kept", Config{}, []string{"NODE_APP_INSTANCE=7"}, []string{"pm_id=1"}, []string{"NODE_APP_INSTANCE"}, true},
		{"preload off", Config{}, []string{"ONEHOST_NODE_PRELOAD=0"}, []string{"NODE_APP_INSTANCE=1"}, []string{"NODE_OPTIONS", "PORT", "ONEHOST_NODE_PORT"}, false},
		{"drain grace and stats interval", Config{KillTimeout: Duration(600 * time.Millisecond), StatsInterval: Duration(time.Second)}, nil,
			[]string{"ONEHOST_NODE_GRACE_MS=300", "ONEHOST_NODE_STATS_MS=1000"}, nil, true},
		{"drain grace at most 1 s", Config{KillTimeout: Duration(5 * time.Second)}, nil,
			[]string{"ONEHOST_NODE_GRACE_MS=1000"}, nil, true},
		{"self_bind", Config{SelfBind: true}, nil, []string{"pm_id=1"}, []string{"NODE_OPTIONS", "PORT", "ONEHOST_NODE_PORT"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := &Supervisor{cfg: tc.cfg, log: zap.NewNop(), addr: "127.0.0.1:3108", notifyDir: dir}
			got, preloaded := s.nodeEnv(tc.env, 1)
			for i := range got {
				got[i] = strings.ReplaceAll(got[i], dir, "DIR")
			}
			if preloaded != tc.preloaded {
				t.Errorf("preloaded = %v, want %v", preloaded, tc.preloaded)
			}
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("nodeEnv = %q, want %q in it", got, w)
				}
			}
			for _, k := range tc.absent {
				if _, ok := lookupEnv(got, k); ok {
					t.Errorf("nodeEnv = %q, want no %s", got, k)
				}
			}
		})
	}
	if got := nodeQuote(`/tmp/a b/"x".cjs`); got != `"/tmp/a b/\"x\".cjs"` {
		t.Errorf("nodeQuote = %s", got)
	}
}

// TestNodePreload runs the preload in a real node with a listening socket at fd 3, and
// checks each form of listen an app may call (testdata/preload-cases.js reports them).
func TestNodePreload(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("SKIP: node not installed (Debian: .ci/run installs it)")
	}
	cmd, port := preloadedNode(t, "testdata/preload-cases.js")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var got map[string]string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node said %s: %v", out, err)
	}
	want := map[string]string{
		"first {port, host}":      "listening 127.0.0.1:" + port, // the slot's socket, its address
		"second for the port":     "error EADDRINUSE",
		"numeric string, another": "error ONEHOST_PORT",
		"another port":            "error ONEHOST_PORT",
		"port 0":                  "listening own",
		"unix path":               "listening path",
		"child process":           "error EADDRINUSE", // not the worker: its listen is its own bind
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %q, want %q", k, got[k], w)
		}
	}
	if msg := got["message"]; !strings.Contains(msg, "the app listens on port 1, but the supervisor serves port "+port) {
		t.Errorf("wrong-port message %q, want both ports named", msg)
	}
}

// TestNodePreloadDrain stops a node:http app the preload serves, as a reload does, with a
// busy keep-alive connection and an idle one: the request sent on the busy one after the
// stop signal is answered, with "Connection: close", and its connection closed after it;
// the idle one is closed after the grace; then the app exits 0.
func TestNodePreloadDrain(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("SKIP: node not installed (Debian: .ci/run installs it)")
	}
	cmd, port := preloadedNode(t, "testdata/preload-http.js")
	// The grace is long enough that the request below, sent right after the signal, is
	// surely inside it on a loaded machine; nothing here measures it.
	cmd.Env = append(cmd.Env, "PORT="+port, envNodeGrace+"=3000")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "listening\n" {
		t.Fatalf("app said %q, %v", line, err)
	}
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	get := func(c net.Conn, r *bufio.Reader) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://127.0.0.1:"+port+"/", nil)
		if err := req.Write(c); err != nil {
			t.Fatalf("send: %v", err)
		}
		resp, err := http.ReadResponse(r, req)
		if err != nil {
			t.Fatalf("the request sent on a kept-alive connection during the drain: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	busy, busyR := dial()
	idle, idleR := dial()
	if resp := get(busy, busyR); resp.Close {
		t.Fatalf("before the stop: Connection: close, want keep-alive")
	}
	get(idle, idleR)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the signal is handled: the drain has begun
	resp := get(busy, busyR)
	if resp.StatusCode != 200 || !resp.Close {
		t.Errorf("during the drain: %s, Connection %q; want 200 and Connection: close", resp.Status, resp.Header.Get("Connection"))
	}
	if _, err := busyR.ReadByte(); err != io.EOF {
		t.Errorf("busy connection after its Connection: close response: read %v, want EOF", err)
	}
	if _, err := idleR.ReadByte(); err != io.EOF {
		t.Errorf("idle connection after the grace: read %v, want EOF", err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("app exit: %v, want 0", err)
		}
		exited <- err
	case <-time.After(20 * time.Second):
		t.Error("the app did not exit after its connections closed")
	}
}

// preloadedNode is `node SCRIPT` (a testdata path) with the preload required and a socket
// listening on 127.0.0.1 at its fd 3, as a worker of the supervisor gets them; the test's
// own copy of the socket is closed (the app's serves). It returns the command, not
// started, and the socket's port.
func preloadedNode(t *testing.T, script string) (*exec.Cmd, string) {
	t.Helper()
	preload := filepath.Join(t.TempDir(), preloadName)
	if err := os.WriteFile(preload, nodePreload, 0o444); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	abs, _ := filepath.Abs(script)
	cmd := exec.Command("node", abs)
	cmd.ExtraFiles = []*os.File{f}
	cmd.Env = append(os.Environ(), "LISTEN_FDS=1", envNodePort+"="+port, "NODE_OPTIONS=--require "+preload)
	return cmd, port
}
