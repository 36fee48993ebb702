package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/systemd"

	"github.com/onehost/onehost/internal/cluster/clustertest"
)

// roleEnv makes the test binary play a worker.
const roleEnv = "SUPERVISOR_TEST_ROLE"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == systemd.ListenPIDShim { // the supervisor starts workers through itself
		err := systemd.ExecWithListenPID(os.Args[2:])
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	switch os.Getenv(roleEnv) {
	case "worker":
		fakeWorker()
		os.Exit(0)
	case "nobody-listener": // another user's program where the supervisor should be (security_test.go)
		nobodyListen()
	case "control-client": // a worker's child that left its process group: see fakeWorker
		if os.Getenv("FAKE_CONTROL_ORPHAN") == "1" { // calls once its parent has gone
			for parent, deadline := os.Getppid(), time.Now().Add(20*time.Second); os.Getppid() == parent && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
		}
		callControl(os.Getenv("FAKE_CONTROL_SOCKET"), os.Getenv("FAKE_CONTROL_OUT"))
		os.Exit(0)
	case "control-forker": // starts a control-client and leaves it an orphan (double fork)
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), roleEnv+"=control-client", "FAKE_CONTROL_ORPHAN=1")
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case "background": // a fork-mode program: no socket, stops on SIGTERM
		fmt.Println("background up, pid", os.Getpid())
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		<-sig
		fmt.Println("background stopping")
		os.Exit(0)
	case "supervisor": // the supervisor as a process of its own, for kill -9 (TestMain is its main)
		if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeWorker serves "ok" on fd 3 and speaks ipc on fd 4; it never says ready when the
// file named by FAKE_MODE_FILE says "notready", and says it FAKE_READY_DELAY_MS late.
func fakeWorker() {
	ln, err := net.FileListener(os.NewFile(uintptr(ipc.ListenFD), "listener"))
	if err != nil {
		os.Exit(2)
	}
	conn, err := ipc.FromFile(os.NewFile(4, "ipc"))
	if err != nil {
		os.Exit(2)
	}
	var reqs atomic.Uint64
	var conns atomic.Int64
	var closeAfter atomic.Bool // keep-alive off, as cmd/worker's http1 does it: after the next response
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reqs.Add(1)
			if closeAfter.Load() {
				w.Header().Set("Connection", "close")
			}
			if name, ok := strings.CutPrefix(r.URL.Path, "/env/"); ok { // what this worker was given (updateenv_test.go)
				fmt.Fprintf(w, "%s %d\n", os.Getenv(name), os.Getpid())
				return
			}
			io.WriteString(w, "ok\n")
		}),
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				conns.Add(1)
			case http.StateClosed, http.StateHijacked:
				conns.Add(-1)
			}
		},
	}
	go srv.Serve(ln)
	if f := os.Getenv("FAKE_ENV_FILE"); f != "" { // what the worker was given
		os.WriteFile(f, []byte(strings.Join(os.Environ(), "\n")), 0o600)
	}
	if ms, err := strconv.Atoi(os.Getenv("FAKE_READY_DELAY_MS")); err == nil {
		time.Sleep(time.Duration(ms) * time.Millisecond) // a slow start (serving already)
	}
	if f := os.Getenv("FAKE_CONTROL_SOCKET_FILE"); f != "" {
		go workerCallsControl(f) // what a compromised worker would try
	}
	mode, _ := os.ReadFile(os.Getenv("FAKE_MODE_FILE"))
	if strings.TrimSpace(string(mode)) != "notready" {
		conn.Send(ipc.Msg{Type: ipc.TypeReady, PID: os.Getpid()})
	}
	conn.ServeWith(context.Background(), ipc.Handlers{Stats: func() ipc.Msg {
		return ipc.Msg{Requests: reqs.Load(), Connections: conns.Load()}
	}, KeepAlive: func(on bool) { closeAfter.Store(!on) }}) // `supervisor drain` and `ready`
	// Drain: Connection: close on what comes, exit when no connection is left.
	srv.SetKeepAlivesEnabled(false)
	ln.Close()
	time.Sleep(50 * time.Millisecond)
	for deadline := time.Now().Add(5 * time.Second); conns.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

// syncBuffer is an io.Writer safe for the supervisor's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// runningCluster is a `supervisor run` running in-process.
type runningCluster struct {
	socket string
	done   chan error
	logs   *syncBuffer
}

// startRun runs `supervisor run` with the given config text and extra arguments, waits
// until its control socket answers with every worker online, and stops it at the end.
func startRun(t *testing.T, config string, extra ...string) *runningCluster {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "cluster.yaml")
	if !strings.Contains(config, "wait_ready:") {
		config = "wait_ready: true\n" + config // the workers here say ready: online means serving
	}
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &runningCluster{socket: filepath.Join(dir, "s.sock"), done: make(chan error, 1), logs: &syncBuffer{}}
	args := append([]string{"run", "-config", cfgPath, "-socket", c.socket, "-listen", "127.0.0.1:0"}, extra...)
	go func() {
		c.done <- run(context.Background(), args, func(string) string { return "" }, io.Discard, c.logs)
	}()
	t.Cleanup(func() {
		var out bytes.Buffer
		run(context.Background(), []string{"stop", "-socket", c.socket}, func(string) string { return "" }, &out, &out)
		select {
		case err := <-c.done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("run did not return after stop")
		}
		if t.Failed() {
			t.Logf("supervisor log:\n%s", c.logs)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.status()
		if err == nil && len(st.Workers) > 0 && everyOnline(st) {
			return c
		}
		select {
		case err := <-c.done:
			t.Fatalf("run returned early: %v\n%s", err, c.logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not online: %+v, %v\n%s", st, err, c.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cmd runs a client command against the cluster.
func (c *runningCluster) cmd(args ...string) (string, error) {
	var out, errb bytes.Buffer
	err := run(context.Background(), append(args, "-socket", c.socket), func(string) string { return "" }, &out, &errb)
	return out.String() + errb.String(), err
}

func (c *runningCluster) status() (control.Status, error) {
	out, err := c.cmd("status", "-json")
	var st control.Status
	if err != nil {
		return st, err
	}
	err = json.Unmarshal([]byte(out), &st)
	return st, err
}

func TestControlCommands(t *testing.T) {
	t.Parallel()
	// listen_timeout well above a -race worker's start on a loaded machine: the reload
	// under load must not abort for a slow start (TestReloadAborted has the short one).
	c := startRun(t, fmt.Sprintf("instances: 2\nlisten_timeout: 15s\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv),
		"--", os.Args[0])

	t.Run("socket mode 0600", func(t *testing.T) {
		fi, err := os.Stat(c.socket)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("control socket mode %v, want 0600", got)
		}
	})
	t.Run("status json shape", func(t *testing.T) {
		out, err := c.cmd("status", "-json")
		if err != nil {
			t.Fatal(err)
		}
		var raw struct {
			Steering string
			Workers  []map[string]any
		}
		if err := json.Unmarshal([]byte(out), &raw); err != nil || len(raw.Workers) != 2 {
			t.Fatalf("status -json = %s (%v), want 2 workers", out, err)
		}
		if raw.Steering != "bpf-rr" && raw.Steering != "hash" {
			t.Errorf("status -json steering = %q, want bpf-rr or hash", raw.Steering)
		}
		for _, k := range []string{"id", "pid", "status", "uptime_s", "restarts", "cpu_percent", "rss_bytes", "requests", "rps", "connections"} {
			if _, ok := raw.Workers[0][k]; !ok {
				t.Errorf("worker object %v lacks %q", raw.Workers[0], k)
			}
		}
	})
	t.Run("status table", func(t *testing.T) {
		out, err := c.cmd("status")
		if err != nil || !strings.Contains(out, "id  pid") || !strings.Contains(out, "online") || !strings.Contains(out, "steering: ") || strings.Count(out, "\n") != 4 {
			t.Errorf("status = %q, %v; want a header and two online rows", out, err)
		}
	})
	t.Run("second run refused", func(t *testing.T) {
		var out syncBuffer
		err := run(context.Background(), []string{"run", "-socket", c.socket, "--", os.Args[0]}, func(string) string { return "" }, &out, &out)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
			t.Errorf("second run = %v, want a refusal naming pid %d", err, os.Getpid())
		}
	})
	st, _ := c.status()
	addr := st.Addr
	t.Run("reload under load", func(t *testing.T) {
		l := clustertest.StartLoad("http://"+addr+"/", 4)
		out, err := c.cmd("reload")
		l.Finish(t)
		if err != nil {
			t.Errorf("reload: %v (%s)", err, out)
		}
	})
	t.Run("scale", func(t *testing.T) {
		if out, err := c.cmd("scale", "+1"); err != nil {
			t.Fatalf("scale +1: %v %s", err, out)
		} else if !strings.Contains(out, "id") || !strings.Contains(out, "status") || strings.Count(out, "\n") < 5 {
			t.Errorf("scale +1 printed %q, want the new table (pm2 scale)", out) // scaled, serving, header, 3 rows
		}
		if st, _ := c.status(); len(st.Workers) != 3 {
			t.Errorf("after scale +1: %d workers, want 3", len(st.Workers))
		}
		if out, err := c.cmd("scale", "-1"); err != nil {
			t.Fatalf("scale -1: %v %s", err, out)
		}
		if out, err := c.cmd("scale", "1"); err != nil {
			t.Fatalf("scale 1: %v %s", err, out)
		}
		if st, _ := c.status(); len(st.Workers) != 1 {
			t.Errorf("after scale 1: %d workers, want 1", len(st.Workers))
		}
		if _, err := c.cmd("scale", "zero"); err == nil {
			t.Error("scale zero: got nil error")
		}
	})
}

// TestReloadAborted: a reload whose new worker never says ready fails after listen_timeout
// (1 s here, so the test is quick), exits non-zero, and leaves the old workers serving.
func TestReloadAborted(t *testing.T) {
	t.Parallel()
	modeFile := filepath.Join(t.TempDir(), "mode")
	os.WriteFile(modeFile, []byte("ok"), 0o600)
	c := startRun(t, fmt.Sprintf("instances: 1\nlisten_timeout: 1s\nenv: {GORACE: atexit_sleep_ms=0, %s: worker, FAKE_MODE_FILE: %q}\n", roleEnv, modeFile),
		"--", os.Args[0])
	os.WriteFile(modeFile, []byte("notready"), 0o600)
	out, err := c.cmd("reload")
	if err == nil || !strings.Contains(err.Error(), "reload aborted") {
		t.Errorf("reload = %v (%s), want an error saying it was aborted", err, out)
	}
	if st, _ := c.status(); !everyOnline(st) {
		t.Errorf("after the aborted reload: %+v, want every worker online", st.Workers)
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	tests := []struct{ name, config, want string }{
		{"instances", "instances: lots", "instances: \"lots\" is out of range"},
		{"kill_timeout", "kill_timeout: 20m", "kill_timeout: 20m0s is out of range"},
		{"duration", "instances: 2\nlisten_timeout: 3 seconds", `listen_timeout: "3 seconds" is not a duration (line 2): write a duration such as 5s`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "c.yaml")
			os.WriteFile(p, []byte(tt.config), 0o600)
			err := run(context.Background(), []string{"run", "-config", p, "-socket", filepath.Join(dir, "s")}, func(string) string { return "" }, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	if err := run(context.Background(), []string{"run", "-instances", "-5"}, func(string) string { return "" }, io.Discard, io.Discard); err == nil {
		t.Error("-instances -5: got nil error")
	}
}

func TestClientWithoutSupervisor(t *testing.T) {
	err := run(context.Background(), []string{"status", "-socket", filepath.Join(t.TempDir(), "none.sock")}, func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "is `supervisor run` running?") {
		t.Errorf("status without a supervisor = %v, want a hint", err)
	}
}

// TestClientArgumentErrors: what a user mistypes gets an error that says what is wanted,
// whatever the order of the count and the flags.
func TestClientArgumentErrors(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	long := "/tmp/" + strings.Repeat("d", 120) + "/s.sock"
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"scale 0 before the flags", []string{"scale", "0", "-socket", sock}, `scale: "0" is not N (1 to 1024), +N or -N`},
		{"scale 0 after the flags", []string{"scale", "-socket", sock, "0"}, `scale: "0" is not N (1 to 1024), +N or -N`},
		{"scale word", []string{"scale", "lots", "-socket", sock}, `scale: "lots" is not N`},
		{"scale nothing", []string{"scale", "-socket", sock}, "scale: want [APP] N, +N or -N"},
		{"scale -1 before the flags", []string{"scale", "-1", "-socket", sock}, "is `supervisor run` running?"},
		{"scale an app by -1", []string{"scale", "api", "-1", "-socket", sock}, "is `supervisor run` running?"},
		{"scale an app without a count", []string{"scale", "api", "-socket", sock}, `scale: "api" is not N`},
		{"scale three arguments", []string{"scale", "api", "+1", "x", "-socket", sock}, "scale: want [APP] N, +N or -N"},
		{"status of a number", []string{"status", "7", "-socket", sock}, `status: "7": want an app's name`},
		{"restart two apps", []string{"restart", "a", "b", "-socket", sock}, `restart: unexpected argument "b": want at most one APP`},
		{"logs slot before app", []string{"logs", "0", "api", "-socket", sock}, `logs: unexpected argument "api": want [APP] [SLOT]`},
		{"socket path too long", []string{"status", "-socket", long}, "a unix socket path holds at most 107"},
		{"run with a socket path too long", []string{"run", "-socket", long}, "a unix socket path holds at most 107"},
		{"dashboard-ceiling without -dashboard", []string{"run", "-socket", sock, "-dashboard-ceiling", "data/ceiling"}, "needs -dashboard HOST:PORT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := run(context.Background(), tc.args, func(string) string { return "" }, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
			}
		})
	}
}

func TestRunStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("instances: 1\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv)), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs := &syncBuffer{}
	sock := filepath.Join(dir, "s.sock")
	go func() {
		done <- run(ctx, []string{"run", "-config", cfg, "-socket", sock, "-listen", "127.0.0.1:0", "--", os.Args[0]},
			func(string) string { return "" }, io.Discard, logs)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), "worker online") {
		if time.Now().After(deadline) {
			t.Fatalf("no worker online:\n%s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run = %v, want nil after a graceful stop", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	if strings.Contains(logs.String(), "killing the workers now") {
		t.Errorf("a cancelled context escalated to an immediate stop:\n%s", logs)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("control socket left behind: %v", err)
	}
}

func TestRunRefusesMissingWorker(t *testing.T) {
	dir := t.TempDir()
	err := run(context.Background(), []string{"run", "-socket", filepath.Join(dir, "s.sock"), "-listen", "127.0.0.1:0", "--", filepath.Join(dir, "no-such-worker")},
		func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "command:") {
		t.Errorf("run with a missing worker = %v, want a command error", err)
	}
}
