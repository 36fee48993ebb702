package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/configs"
	"github.com/onehost/onehost/internal/balancer"
	"github.com/onehost/onehost/internal/cluster/clustertest"
	"github.com/onehost/onehost/internal/proctest"
)

// askAgent is HAProxy's agent-check: connect, read the line, close.
func askAgent(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	return bufio.NewReader(c).ReadString('\n')
}

// waitAnswer waits until the agent at addr answers want.
func waitAnswer(t *testing.T, addr, want string) {
	t.Helper()
	var got string
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got, err = askAgent(addr); err == nil && got == want {
			return
		}
	}
	t.Fatalf("agent answers %q (%v), want %q", got, err, want)
}

// TestAgentAnswers runs `supervisor run -agent 127.0.0.1:0` and takes it through the states
// a balancer must hear of, in order, asking its agent as HAProxy does.
func TestAgentAnswers(t *testing.T) {
	t.Parallel()
	mode := filepath.Join(t.TempDir(), "mode")
	os.WriteFile(mode, []byte("ok"), 0o600)
	c := startRun(t, fmt.Sprintf("instances: 4\nlisten_timeout: 1m\nenv: {GORACE: atexit_sleep_ms=0, %s: worker, FAKE_MODE_FILE: %q}\n", roleEnv, mode),
		"-agent", "127.0.0.1:0", "--", os.Args[0])
	st, err := c.status()
	if err != nil || st.Agent == "" || strings.HasSuffix(st.Agent, ":0") {
		t.Fatalf("status -json agent = %q (%v), want the bound address", st.Agent, err)
	}
	agentAddr := st.Agent
	// kill ends slots' workers with SIGKILL; their successors read the mode file.
	kill := func(t *testing.T, slots ...int) {
		st, err := c.status()
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range st.Workers {
			for _, s := range slots {
				if w.ID == s && w.PID > 0 {
					syscall.Kill(w.PID, syscall.SIGKILL)
				}
			}
		}
	}
	tests := []struct {
		name string
		act  func(t *testing.T)
		want string
	}{
		{"all online: up, no ready (it would end a drain the operator made elsewhere)", func(t *testing.T) {}, "up 100%\n"},
		{"drained", func(t *testing.T) {
			// A balancer asks meanwhile, as HAProxy does every agent-inter: drain names it.
			stop := make(chan struct{})
			asked := make(chan struct{})
			go func() {
				defer close(asked)
				for {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
					}
					if c, err := net.Dial("tcp", agentAddr); err == nil {
						io.WriteString(c, "haproxy\n")
						io.Copy(io.Discard, c)
						c.Close()
					}
				}
			}()
			out, err := c.cmd("drain", "-quiet", "300ms", "-timeout", "20s")
			close(stop)
			<-asked
			if err != nil || !strings.Contains(out, "HAProxy at 127.0.0.1 heard drain") {
				t.Fatalf("drain: %v\n%s; want the balancer that heard it named", err, out)
			}
			if out, _ := c.cmd("status"); !strings.Contains(out, "drained") {
				t.Errorf("status does not show the drain:\n%s", out)
			}
		}, "drain #drained\n"},
		{"ready again: ready, to end the drain it announced", func(t *testing.T) {
			if out, err := c.cmd("ready"); err != nil {
				t.Fatalf("ready: %v\n%s", err, out)
			}
		}, "up ready 100%\n"},
		{"1 of 4 online", func(t *testing.T) {
			os.WriteFile(mode, []byte("notready"), 0o600) // their successors never say ready
			kill(t, 1, 2, 3)
		}, "up 25%\n"},
		{"none serving", func(t *testing.T) { kill(t, 0) }, "down #no worker serves\n"},
		{"stopping: down, which a restarted supervisor's up ends", func(t *testing.T) {
			if out, err := c.cmd("stop"); err != nil {
				t.Fatalf("stop: %v\n%s", err, out)
			}
		}, "down #stopping\n"},
	}
	for _, tt := range tests {
		if !t.Run(tt.name, func(t *testing.T) {
			tt.act(t)
			waitAnswer(t, agentAddr, tt.want)
		}) {
			return
		}
	}
	// The agent goes with the supervisor, after its grace.
	select {
	case err := <-c.done:
		c.done <- err // for startRun's cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("run did not return after stop")
	}
	if _, err := askAgent(agentAddr); err == nil {
		t.Error("the agent still answers after run returned")
	}
}

// TestDrainAndReady: `supervisor drain` returns once requests stop coming, fails when
// they keep coming, and has the workers close kept-alive connections until `ready`.
func TestDrainAndReady(t *testing.T) {
	t.Parallel()
	c := startRun(t, fmt.Sprintf("instances: 2\nstats_interval: 200ms\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv),
		"-agent", "127.0.0.1:0", "--", os.Args[0])
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + st.Addr + "/"
	// A gentle load: the machine is shared, and a drain needs requests, not many.
	gentle := func() *clustertest.Load {
		return clustertest.StartLoadFunc(2, func(hc *http.Client, _, _ int) error {
			time.Sleep(10 * time.Millisecond)
			resp, err := hc.Get(url)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		})
	}

	t.Run("returns when requests stop", func(t *testing.T) {
		l := gentle()
		time.Sleep(500 * time.Millisecond)
		l.Finish(t) // bounded: stopped before the drain
		const quiet = time.Second
		began := time.Now()
		out, err := c.cmd("drain", "-quiet", quiet.String(), "-timeout", "30s", "-no-balancer")
		took := time.Since(began)
		if err != nil || !strings.Contains(out, "quiet: no request for 1s") {
			t.Fatalf("drain = %v\n%s", err, out)
		}
		// The counters are read every stats_interval (200 ms): quiet, plus at most one
		// interval to see the last request, plus the machine's slack.
		if took > quiet+3*time.Second {
			t.Errorf("drain took %v after the load had stopped, want about %v", took, quiet)
		}
		c.cmd("ready")
	})
	t.Run("times out while requests go on", func(t *testing.T) {
		l := gentle()
		defer l.Finish(t) // Connection: close costs the clients no request
		out, err := c.cmd("drain", "-quiet", "1s", "-timeout", "3s", "-no-balancer")
		if err == nil || !strings.Contains(err.Error(), "requests still arriving after 3s") || !strings.Contains(err.Error(), "supervisor ready") {
			t.Fatalf("drain under load = %v\n%s; want a timeout that says so", err, out)
		}
		if st, _ := c.status(); !st.Drained {
			t.Error("a drain that timed out left the host ready, want drained")
		}
		c.cmd("ready")
	})
	t.Run("kept-alive client closed after drain, kept after ready", func(t *testing.T) {
		conn, err := net.Dial("tcp", st.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		get := func(conn net.Conn, br *bufio.Reader) (closes bool) {
			t.Helper()
			fmt.Fprint(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("GET: %v", err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.Close
		}
		if get(conn, br) {
			t.Fatal("before the drain: Connection: close, want keep-alive")
		}
		if out, err := c.cmd("drain", "-quiet", "300ms", "-timeout", "20s", "-no-balancer"); err != nil {
			t.Fatalf("drain: %v\n%s", err, out)
		}
		if !get(conn, br) {
			t.Error("after drain: the kept-alive connection's response kept it alive, want Connection: close")
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("after drain: the connection gave %v after its response, want EOF", err)
		}
		if out, err := c.cmd("ready"); err != nil {
			t.Fatalf("ready: %v\n%s", err, out)
		}
		// ready's messages are written when it returns, read by the workers a moment later.
		deadline := time.Now().Add(10 * time.Second)
		for {
			conn2, err := net.Dial("tcp", st.Addr)
			if err != nil {
				t.Fatal(err)
			}
			br2 := bufio.NewReader(conn2)
			first := get(conn2, br2)
			kept := !first && !get(conn2, br2) // two requests on the one connection
			conn2.Close()
			if kept {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("after ready: connections still closed after their response, want keep-alive")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// TestDrainHeardByHAProxy: a real HAProxy in front of a real supervisor with its agent.
// `supervisor drain` names HAProxy as the one that heard it and HAProxy shows the server
// DRAIN; `ready` brings it back. A drain the operator sets through HAProxy's runtime API
// stays, the agent on, until `supervisor ready` (the agent once said "ready" on every
// check, which undid it ~1.5 s later).
func TestDrainHeardByHAProxy(t *testing.T) {
	t.Parallel()
	bin, err := balancer.LookHAProxy()
	if err != nil {
		proctest.Missing(t, err.Error())
	}
	c := startRun(t, fmt.Sprintf("instances: 2\nstats_interval: 200ms\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv),
		"-agent", "127.0.0.1:0", "--", os.Args[0])
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	_, agentPort, _ := net.SplitHostPort(st.Agent)
	port, _ := strconv.Atoi(agentPort)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	front := ln.Addr().String()
	ln.Close()
	hp, err := balancer.StartHAProxy(context.Background(), []byte(configs.HAProxy), balancer.HAProxyOptions{Binary: bin, Dir: t.TempDir(),
		Params: balancer.HAProxyParams{Listen: front, Servers: []balancer.Server{{Name: "h1", Addr: st.Addr, AgentAddr: "127.0.0.1", AgentPort: port}},
			CheckInter: 200 * time.Millisecond, AgentInter: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer hp.Stop()
	status := func() string {
		ss, err := hp.Stat()
		if err != nil || len(ss) != 1 {
			return fmt.Sprintf("show stat: %v %+v", err, ss)
		}
		return ss[0].Status
	}
	wait := func(what string, cond func(string) bool) {
		t.Helper()
		var last string
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if last = status(); cond(last) {
				return
			}
		}
		t.Fatalf("%s: HAProxy says %q", what, last)
	}
	isUp := func(s string) bool { return strings.HasPrefix(s, "UP") }
	wait("h1 up", isUp)

	out, err := c.cmd("drain", "-quiet", "300ms", "-timeout", "20s")
	// The template's agent-send names HAProxy to the agent.
	if err != nil || !strings.Contains(out, "HAProxy at 127.0.0.1 heard drain") {
		t.Fatalf("drain: %v\n%s; want HAProxy named", err, out)
	}
	wait("h1 drained by the agent", func(s string) bool { return strings.HasPrefix(s, "DRAIN") })
	if out, err := c.cmd("ready"); err != nil {
		t.Fatalf("ready: %v\n%s", err, out)
	}
	wait("h1 back", isUp)

	if err := hp.SetState("h1", "drain"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // 25 agent checks
	if s := status(); !strings.HasPrefix(s, "DRAIN") {
		t.Fatalf("a drain set through the runtime API: %q 5 s later with the agent on, want DRAIN", s)
	}
	if out, err := c.cmd("ready"); err != nil {
		t.Fatalf("ready: %v\n%s", err, out)
	}
	wait("h1 back after supervisor ready", isUp)
}

// TestDrainWithoutBalancer: a drain that no balancer hears says so, naming the agent's
// address, and fails; the host stays drained.
func TestDrainWithoutBalancer(t *testing.T) {
	t.Parallel()
	c := startRun(t, fmt.Sprintf("instances: 1\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv), "-agent", "127.0.0.1:0", "--", os.Args[0])
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.cmd("drain", "-heard", "1s")
	if err == nil || !strings.Contains(err.Error(), "no balancer asked the agent at "+st.Agent) || !strings.Contains(err.Error(), "-no-balancer") {
		t.Fatalf("drain with no balancer: %v\n%s; want a failure naming %s", err, out, st.Agent)
	}
	if st, _ := c.status(); !st.Drained {
		t.Error("the host is not drained after a drain no balancer heard")
	}
	noAgent := startRun(t, fmt.Sprintf("instances: 1\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv), "--", os.Args[0])
	if out, err := noAgent.cmd("drain", "-heard", "1s"); err == nil || !strings.Contains(err.Error(), "runs no agent") {
		t.Errorf("drain without an agent: %v\n%s", err, out)
	}
	if out, err := noAgent.cmd("drain", "-no-balancer", "-quiet", "200ms"); err != nil {
		t.Errorf("drain -no-balancer: %v\n%s", err, out)
	}
}
