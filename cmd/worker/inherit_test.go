package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/http1"
	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/seedtest"
)

// TestInheritedSocketAndIPC plays the supervisor: it owns the listening socket, hands it to
// the worker as fd 3 with the ipc socketpair as fd 4, waits for "ready", reads the
// counters, asks for a drain, and checks that the socket's queue outlives the worker.
func TestInheritedSocketAndIPC(t *testing.T) { forTransports(t, testInheritedSocketAndIPC) }

func testInheritedSocketAndIPC(t *testing.T, transport string) {
	ln, sup, cmd, logs := startInherited(t, ipc.EnvWorkerID+"=3", "TRANSPORT="+transport,
		"GOMAXPROCS=2") // two loops on the loop transport, whatever the machine
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs.String())
		}
	}()

	m, err := sup.Recv()
	if err != nil || m.Type != ipc.TypeReady || m.PID != cmd.Process.Pid {
		t.Fatalf("first message %+v, %v; want ready from pid %d", m, err, cmd.Process.Pid)
	}

	// A keep-alive client on the inherited socket.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	// /feed, not /health: health checks are not counted (http1.Response.Probe).
	for range 3 {
		fmt.Fprint(c, "GET /feed HTTP/1.1\r\nHost: x\r\n\r\n")
		if line, err := readHTTP(br); err != nil || line != "HTTP/1.1 200 OK" {
			t.Fatalf("GET /feed over the inherited socket: %q, %v", line, err)
		}
	}

	if err := sup.Send(ipc.Msg{Type: ipc.TypeStats}); err != nil {
		t.Fatal(err)
	}
	m, err = sup.Recv()
	if err != nil || m.Type != ipc.TypeStats || m.Requests != 3 || m.Connections != 1 {
		t.Errorf("stats %+v, %v; want 3 requests on 1 connection", m, err)
	}
	// The connections per loop: the loop transport's two loops, the one connection on one.
	if wantLoops := map[string]int{http1.TransportLoop: 2}[transport]; len(m.LoopConnections) != wantLoops ||
		(wantLoops > 0 && m.LoopConnections[0]+m.LoopConnections[1] != 1) {
		t.Errorf("stats' loop_connections %v, want %d loops holding 1 connection", m.LoopConnections, wantLoops)
	}

	if err := sup.Send(ipc.Msg{Type: ipc.TypeDrain}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("worker exit after drain: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("worker did not exit after drain")
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("idle keep-alive after drain: %v, want EOF", err)
	}
	if !strings.Contains(logs.String(), `"worker":3`) {
		t.Errorf("logs do not carry the slot id 3:\n%s", logs.String())
	}

	// The supervisor still holds the socket: a connection made now waits in its queue for
	// the next worker instead of being refused or reset.
	c2, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	if err != nil {
		t.Fatalf("connect after the worker left: %v; the queue must outlive it", err)
	}
	c2.Close()
}

// TestWorkerExitsWhenSupervisorDies checks parent-death detection: the worker drains when
// its end of the socketpair reads EOF.
func TestWorkerExitsWhenSupervisorDies(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	lf, _ := ln.(*net.TCPListener).File()
	defer lf.Close()
	sup, child, err := ipc.Pair()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{"ONEHOST_TEST_WORKER=1", "JWT_SECRET=" + testSecret, "SQLITE_PATH=" + seedtest.Path(t),
		"LISTEN_FDS=1", ipc.EnvFD + "=4"}
	cmd.ExtraFiles = []*os.File{lf, child}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child.Close()
	defer cmd.Process.Kill()
	if m, err := sup.Recv(); err != nil || m.Type != ipc.TypeReady {
		t.Fatalf("ready: %+v %v", m, err)
	}
	sup.Close() // the supervisor "dies"
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("worker exit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("worker still running 10 s after its supervisor went away")
	}
}

// readHTTP reads one response framed by Content-Length and returns its status line.
func readHTTP(br *bufio.Reader) (string, error) {
	status, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	n := 0
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return "", err
		}
		if l == "\r\n" {
			break
		}
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ": "); ok && strings.EqualFold(k, "content-length") {
			fmt.Sscan(v, &n)
		}
	}
	if _, err := io.CopyN(io.Discard, br, int64(n)); err != nil {
		return "", err
	}
	return strings.TrimSpace(status), nil
}

// startInherited starts the test binary as a worker the way the supervisor does: the
// listening socket at fd 3, the ipc socketpair at fd 4, env added to the worker's base
// environment. The listener and the supervisor's end close at the test's end; the caller
// waits for the process.
func startInherited(t *testing.T, env ...string) (net.Listener, *ipc.Conn, *exec.Cmd, *strings.Builder) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	lf, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	sup, child, err := ipc.Pair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sup.Close() })
	cmd := exec.Command(os.Args[0])
	cmd.Env = append([]string{"ONEHOST_TEST_WORKER=1", "JWT_SECRET=" + testSecret, "SQLITE_PATH=" + seedtest.Path(t),
		"LISTEN_FDS=1", ipc.EnvFD + "=4"}, env...)
	cmd.ExtraFiles = []*os.File{lf, child}
	logs := &strings.Builder{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child.Close() // only the worker holds its end now: its exit is our EOF
	return ln, sup, cmd, logs
}
