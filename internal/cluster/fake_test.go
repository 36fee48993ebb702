package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-reuseport"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/procstat"
)

// The test binary plays the worker (and, for the kill -9 test, the supervisor) when this
// variable names the role.
const roleEnv = "CLUSTER_TEST_ROLE"

// init: a fake worker told where to rejoin clears its parent-death signal, as cmd/worker
// does, on the main thread (init runs there); it says so in its ready message.
func init() {
	if os.Getenv(roleEnv) == "worker" && os.Getenv(ipc.EnvAdopt) != "" {
		if err := ipc.OutliveParent(); err != nil {
			panic(err)
		}
	}
}

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "worker":
		fakeWorker()
		os.Exit(0)
	case "supervisor":
		fakeSupervisor()
		os.Exit(0)
	case "nobody-adoptee": // another user's process at the rendezvous (adopt_test.go)
		nobodyAdoptee()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeWorker is a tiny worker: net/http on fd 3, ipc on fd 4. Its behaviour comes from
// FAKE_MODE (or the file FAKE_MODE_FILE names, read at start): "ok", "notready" (never
// says ready), "sdnotify" (says READY=1 over NOTIFY_SOCKET instead), "watchdog" (and
// WATCHDOG=1 every 50 ms for WATCHDOG_STOP_MS, then nothing), "crash:MS" (exits 3
// after MS ms), "alloc:MB" (holds MB of touched memory), "extend:MS" (asks for MS+1000 ms
// more with EXTEND_TIMEOUT_USEC, says ready over ipc MS ms later), "sdstopping:SLOT" (READY=1
// over NOTIFY_SOCKET; the worker of that slot then says STOPPING=1). FAKE_ENV_FILE names a file it
// writes its environment to, one variable a line.
func fakeWorker() {
	if os.Getenv(ipc.EnvAdopt) != "" {
		// It may outlive its supervisor, and its output pipe with it: a write there must
		// fail, not kill it (Go's default for SIGPIPE on fds 1 and 2).
		signal.Ignore(syscall.SIGPIPE)
	}
	mode := os.Getenv("FAKE_MODE")
	if p := os.Getenv("FAKE_MODE_FILE"); p != "" {
		b, _ := os.ReadFile(p)
		mode = strings.TrimSpace(string(b))
	}
	var ln net.Listener
	var err error
	switch {
	case os.Getenv(ipc.EnvListenFDs) == "1":
		ln, err = net.FileListener(os.NewFile(uintptr(ipc.ListenFD), "listener"))
	case os.Getenv("FAKE_BIND") != "": // fork mode: a port of its own, bound alone (no SO_REUSEPORT), as a plain app does
		ln, err = net.Listen("tcp", os.Getenv("FAKE_BIND"))
	default: // self_bind mode
		ln, err = reuseport.Listen("tcp", net.JoinHostPort(os.Getenv("HOST"), os.Getenv("PORT")))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake worker:", err)
		os.Exit(2)
	}
	ipcFD, _ := strconv.Atoi(os.Getenv(ipc.EnvFD))
	conn, err := ipc.FromFile(os.NewFile(uintptr(ipcFD), "ipc"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake worker:", err)
		os.Exit(2)
	}
	var reqs atomic.Uint64
	var conns atomic.Int64
	slot := os.Getenv(ipc.EnvWorkerID)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reqs.Add(1)
			fmt.Fprintf(w, "slot %s pid %d\n", slot, os.Getpid())
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
		os.WriteFile(f+".tmp", []byte(strings.Join(os.Environ(), "\n")), 0o600)
		os.Rename(f+".tmp", f)
	}
	var ballast []byte
	switch {
	case strings.HasPrefix(mode, "crash:"):
		ms, _ := strconv.Atoi(strings.TrimPrefix(mode, "crash:"))
		if ms == 0 {
			os.Exit(3)
		}
		time.AfterFunc(time.Duration(ms)*time.Millisecond, func() { os.Exit(3) })
	case strings.HasPrefix(mode, "alloc:"):
		mb, _ := strconv.Atoi(strings.TrimPrefix(mode, "alloc:"))
		ballast = make([]byte, mb<<20)
		for i := 0; i < len(ballast); i += 4096 {
			ballast[i] = 1
		}
	}
	fmt.Fprintln(os.Stderr, "fake worker up, mode", mode)
	if ms, ok := strings.CutPrefix(mode, "extend:"); ok { // a slow start that asks for the time
		d, _ := strconv.Atoi(ms)
		if c, err := net.Dial("unixgram", os.Getenv("NOTIFY_SOCKET")); err == nil {
			c.Write([]byte("EXTEND_TIMEOUT_USEC=" + strconv.Itoa((d+1000)*1000)))
			c.Close()
		}
		time.Sleep(time.Duration(d) * time.Millisecond)
	}
	if slot, ok := strings.CutPrefix(mode, "sdstopping:"); ok { // READY=1; the slot named says STOPPING=1 and serves on
		mode = "sdstopping"
		if c, err := net.Dial("unixgram", os.Getenv("NOTIFY_SOCKET")); err == nil {
			c.Write([]byte("READY=1"))
			if os.Getenv(ipc.EnvWorkerID) == slot {
				time.AfterFunc(100*time.Millisecond, func() { c.Write([]byte("STOPPING=1\nSTATUS=draining")) })
			}
		}
	}
	switch mode {
	case "notready", "sdstopping":
	case "sdnotify": // ready as a systemd service says it, and nothing over our ipc
		if c, err := net.Dial("unixgram", os.Getenv("NOTIFY_SOCKET")); err == nil {
			c.Write([]byte("READY=1\nSTATUS=fake serving\nX_UNKNOWN=1"))
			c.Close()
		}
	case "watchdog": // sd_notify's watchdog for WATCHDOG_STOP_MS, then silence (hung)
		if c, err := net.Dial("unixgram", os.Getenv("NOTIFY_SOCKET")); err == nil {
			c.Write([]byte("READY=1\nSTATUS=watchdog " + os.Getenv("WATCHDOG_USEC")))
			stopMS, _ := strconv.Atoi(os.Getenv("WATCHDOG_STOP_MS"))
			go func() {
				for end := time.Now().Add(time.Duration(stopMS) * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
					c.Write([]byte("WATCHDOG=1"))
				}
			}()
		}
	default:
		conn.Send(ipc.Msg{Type: ipc.TypeReady, PID: os.Getpid(), Rejoin: os.Getenv(ipc.EnvAdopt) != ""})
	}
	stats := func() ipc.Msg {
		return ipc.Msg{PID: os.Getpid(), Requests: reqs.Load(), Connections: conns.Load()}
	}
	// Keep-alive as the host's drain sets it (hostdrain.go), as cmd/worker does.
	h := ipc.Handlers{Stats: stats, KeepAlive: srv.SetKeepAlivesEnabled}
	err = conn.ServeWith(context.Background(), h)
	// As cmd/worker does: a worker whose supervisor is gone serves on and waits for the
	// next one at the rendezvous socket (ipc.Rejoin), its listening socket passed along.
	for errors.Is(err, ipc.ErrParentGone) && os.Getenv(ipc.EnvAdopt) != "" {
		lf, ferr := ln.(*net.TCPListener).File()
		if ferr != nil {
			break
		}
		slotN, _ := strconv.Atoi(slot)
		started, _ := procstat.StartTime("", os.Getpid())
		c, out, rerr := ipc.Rejoin(context.Background(), os.Getenv(ipc.EnvAdopt),
			ipc.Hello{PID: os.Getpid(), Slot: slotN, Started: started}, lf, ipc.AdoptWait(os.Getenv(ipc.EnvAdoptWait)))
		lf.Close()
		if rerr != nil {
			break
		}
		if out != nil {
			syscall.Dup3(int(out.Fd()), 1, 0) // Dup3: every Linux architecture has it
			syscall.Dup3(int(out.Fd()), 2, 0)
			out.Close()
		}
		fmt.Fprintln(os.Stderr, "fake worker adopted")
		conn = c
		err = conn.ServeWith(context.Background(), h)
	}
	// Drain as the real worker does, not with http.Server.Shutdown: Shutdown drops a
	// request it reads after it began (no response at all), which a client sees as EOF.
	// Here: stop accepting, answer what comes on open connections with Connection: close,
	// exit when none is left.
	srv.SetKeepAlivesEnabled(false)
	ln.Close()
	time.Sleep(50 * time.Millisecond) // a connection Accept returned as we closed gets counted
	for deadline := time.Now().Add(5 * time.Second); conns.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	_ = ballast
}

// fakeSupervisor runs a two-slot cluster of fake workers and prints "ADDR PID PID", then
// waits to be killed.
func fakeSupervisor() {
	wait, _ := time.ParseDuration(os.Getenv("FAKE_ADOPT_WAIT"))
	// Online once ready: the worker has cleared its parent-death signal by then (in init),
	// so a kill -9 right after the line below does not take it along.
	ready := true
	s, err := New(Config{Instances: 2, Listen: "127.0.0.1:0", Command: []string{os.Args[0]}, AdoptWait: Duration(wait), WaitReady: &ready},
		Options{Environ: workerEnv(), Adopt: os.Getenv("FAKE_ADOPT")})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	if err := s.Start(context.Background()); err != nil {
		fmt.Println("error", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitOnline(ctx); err != nil {
		fmt.Println("error", err)
		return
	}
	line := s.Addr()
	for _, r := range s.Status() {
		line += " " + strconv.Itoa(r.PID)
	}
	fmt.Println(line)
	select {}
}

// workerEnv is the environment of fake workers. A race-enabled binary sleeps a second at
// exit (GORACE atexit_sleep_ms), which would hide how fast workers really stop.
func workerEnv() []string { return []string{roleEnv + "=worker", "GORACE=atexit_sleep_ms=0"} }

// syncBuffer collects logs; a test prints them only when it fails.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) Sync() error { return nil }

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// testLogger returns a logger whose output the test prints if it fails.
func testLogger(t *testing.T) (*zap.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	log := zap.New(zapcore.NewCore(enc, buf, zap.DebugLevel))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("supervisor log:\n%s", buf)
		}
	})
	return log, buf
}

// startCluster starts a supervisor of fake workers with cfg (Command and Listen filled
// in), waits until every worker is online, and stops it when the test ends.
func startCluster(t *testing.T, cfg Config, env ...string) *Supervisor {
	t.Helper()
	s, _ := startClusterOpts(t, cfg, Options{}, env...)
	return s
}

// startClusterOpts is startCluster with Options (Logger and Environ are the test's) and
// the supervisor's log.
func startClusterOpts(t *testing.T, cfg Config, opt Options, env ...string) (*Supervisor, *syncBuffer) {
	t.Helper()
	cfg.Command = []string{os.Args[0]}
	if cfg.Listen == "" && !cfg.Fork() {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.WaitReady == nil { // the fake worker says ready, as ours does
		ready := true
		cfg.WaitReady = &ready
	}
	log, logs := testLogger(t)
	opt.Logger, opt.Environ = log, append(workerEnv(), env...)
	s, err := New(cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := s.Stop(sctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		cancel()
	})
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	if err := s.WaitOnline(wctx); err != nil {
		t.Fatal(err)
	}
	return s, logs
}

// waitFor polls cond every 20 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// get does one request on a fresh connection and returns the body.
func get(t *testing.T, addr string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func pids(s *Supervisor) []int {
	var out []int
	for _, r := range s.Status() {
		out = append(out, r.PID)
	}
	return out
}

// gone reports whether pid has exited (a zombie of an absent reaper counts as gone).
func gone(pid int) bool { return !procstat.Running("", pid) }

// startSupervisorProcess runs fakeSupervisor in a child process and returns it with its
// address and worker pids.
func startSupervisorProcess(t *testing.T, env ...string) (*exec.Cmd, string, []int) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), roleEnv+"=supervisor"), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("read supervisor's line: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] == "error" {
		t.Fatalf("supervisor said %q", line)
	}
	var ps []int
	for _, s := range f[1:] {
		p, _ := strconv.Atoi(s)
		ps = append(ps, p)
	}
	return cmd, f[0], ps
}
