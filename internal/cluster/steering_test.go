package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/steering"
)

// steeredCluster starts a cluster that steers with the eBPF program, or skips the test
// where the kernel refuses it (the supervisor then uses the hash, which says so).
func steeredCluster(t *testing.T, cfg Config, env ...string) *Supervisor {
	t.Helper()
	s := startCluster(t, cfg, env...)
	if s.Steering() != steering.KindRoundRobin {
		t.Skipf("steering is %q here: the kernel refused the eBPF program (see the supervisor's log)", s.Steering())
	}
	return s
}

// keepAlive opens a connection, makes one request on it and returns the slot that
// answered, leaving the connection open until the test ends.
func keepAlive(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return askSlot(t, c)
}

// askSlot makes one request on c and returns the answering slot ("slot N pid P").
func askSlot(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: t\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	resp.Body.Close()
	return strings.Fields(string(b))[1]
}

func TestSteeringDealsConnectionsEvenly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		instances int
		conns     int
		want      []int // sorted counts per slot
	}{
		{"8 keep-alive connections on 2 workers", 2, 8, []int{4, 4}},
		{"5 connections on 4 workers", 4, 5, []int{1, 1, 1, 2}},
		{"2 connections on 2 workers", 2, 2, []int{1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := steeredCluster(t, Config{Instances: Instances(tc.instances)})
			for round := range 5 { // every time, not by luck
				counts := map[string]int{}
				for range tc.conns {
					counts[keepAlive(t, s.Addr())]++
				}
				var got []int
				for _, n := range counts {
					got = append(got, n)
				}
				for len(got) < tc.instances {
					got = append(got, 0)
				}
				slices.Sort(got)
				if !slices.Equal(got, tc.want) {
					t.Fatalf("round %d: connections per slot %v (%v), want %v", round, counts, got, tc.want)
				}
			}
		})
	}
}

// TestSteeringSkipsDeadWorker: kill -9 one worker of two whose next start waits a long
// backoff; fresh connections, including those made before the supervisor noticed, are all
// served at once by the live worker instead of waiting in the dead one's queue.
func TestSteeringSkipsDeadWorker(t *testing.T) {
	t.Parallel()
	s := steeredCluster(t, Config{Instances: 2, ExpBackoffRestartDelay: Duration(10 * time.Second)})
	migrates := false
	s.call(func() { migrates = s.steer.Migrates() })
	if !migrates {
		t.Skip("kernel before 5.14: the program cannot move a closing socket's queue, so a crashed slot keeps it")
	}
	victim := s.Status()[1].PID
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	type result struct {
		slot string
		took time.Duration
		err  error
	}
	results := make([]result, 40)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			start := time.Now()
			c, err := net.DialTimeout("tcp", s.Addr(), 5*time.Second)
			if err != nil {
				results[i].err = err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
			b, err := io.ReadAll(c)
			results[i] = result{took: time.Since(start), err: err}
			if j := strings.Index(string(b), "slot "); j >= 0 {
				results[i].slot = strings.Fields(string(b[j:]))[1]
			}
		})
	}
	wg.Wait()
	slow := 0
	for i, r := range results {
		if r.err != nil {
			t.Errorf("connection %d: %v", i, r.err)
		}
		if r.took > 500*time.Millisecond {
			slow++
		}
	}
	if slow > 0 {
		t.Errorf("%d of 40 connections took more than 0.5 s, want none", slow)
	}
	waitFor(t, 5*time.Second, "slot 1 waiting out its backoff", func() bool {
		return s.Status()[1].Status == StateWaitingRestart
	})
	for range 10 { // the live worker takes every new connection
		if slot := keepAlive(t, s.Addr()); slot != "0" {
			t.Fatalf("slot %s answered while slot 1 waits out its backoff", slot)
		}
	}
	// The closed socket's slot gets a fresh one, in the steering again, at its restart.
	if err := s.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for range 4 {
		counts[keepAlive(t, s.Addr())]++
	}
	if counts["0"] != 2 || counts["1"] != 2 {
		t.Fatalf("after the restart: connections per slot %v, want 2 and 2", counts)
	}
}

func TestSteeringStatusAndListeners(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mode string
		want string // "" : whatever the kernel allows
	}{
		{"hash as configured", SteeringHash, steering.KindHash},
		{"auto", SteeringAuto, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startCluster(t, Config{Instances: 2, Steering: tc.mode})
			if tc.want != "" && s.Steering() != tc.want {
				t.Fatalf("Steering() = %q, want %q", s.Steering(), tc.want)
			}
			// Plain TCP listeners, never MPTCP (Go's default since 1.24).
			s.call(func() {
				for id, sl := range s.slots {
					proto, err := steering.Protocol(sl.file)
					if err != nil || proto != unix.IPPROTO_TCP {
						t.Errorf("slot %d: socket protocol %d, %v; want TCP (%d)", id, proto, err, unix.IPPROTO_TCP)
					}
				}
			})
			seen := map[string]bool{}
			for range 20 {
				seen[strings.Fields(get(t, s.Addr()))[1]] = true
			}
			if s.Steering() == steering.KindRoundRobin && len(seen) != 2 {
				t.Errorf("slots that answered 20 fresh connections: %v, want both", seen)
			}
		})
	}
}

// TestSteeringRoundRobinRequired: steering: round-robin starts with the program or not at
// all; with self_bind it is a configuration error.
func TestSteeringRoundRobinRequired(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Steering: SteeringRoundRobin, SelfBind: true, Listen: "127.0.0.1:3999", Command: []string{"true"}}, Options{})
	if err == nil || !strings.Contains(err.Error(), "self_bind") {
		t.Fatalf("round-robin with self_bind: %v, want an error naming self_bind", err)
	}
	cfg := Config{Instances: 1, Steering: SteeringRoundRobin, Listen: "127.0.0.1:0", Command: []string{"true"}}
	s, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Start(ctx); err != nil {
		if !strings.Contains(err.Error(), "steering: round-robin") {
			t.Fatalf("Start: %v, want a steering error", err)
		}
		return
	}
	defer s.Kill()
	if s.Steering() != steering.KindRoundRobin {
		t.Fatalf("started with steering %q", s.Steering())
	}
}

// TestSteeringQueueLeavesBackoffWhenAnotherComesBack: both workers crash, one after the
// other. While neither is up, new connections queue on the socket of the last one to
// crash (the only one left open). When the first comes back, that socket closes and its
// queue moves to it, instead of waiting out the second one's backoff: every connection is
// answered by slot 0, none by slot 1's next worker.
func TestSteeringQueueLeavesBackoffWhenAnotherComesBack(t *testing.T) {
	t.Parallel()
	// Backoff 4 s, the second crash 1.5 s after the first: slot 0 restarts 1.5 s before slot
	// 1, more than a -race worker's start varies on a loaded machine.
	s := steeredCluster(t, Config{Instances: 2, ExpBackoffRestartDelay: Duration(4 * time.Second)})
	migrates := false
	s.call(func() { migrates = s.steer.Migrates() })
	if !migrates {
		t.Skip("kernel before 5.14: the program cannot move a closing socket's queue")
	}
	rows := s.Status()
	if err := syscall.Kill(rows[0].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "slot 0 waiting out its backoff", func() bool {
		return s.Status()[0].Status == StateWaitingRestart
	})
	time.Sleep(1500 * time.Millisecond) // slot 1's restart comes well after slot 0's
	if err := syscall.Kill(rows[1].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "slot 1 waiting out its backoff", func() bool {
		return s.Status()[1].Status == StateWaitingRestart
	})
	if st := s.Status()[0].Status; st != StateWaitingRestart {
		t.Skipf("slot 0 is %s already: the machine was too slow for the two crashes to overlap", st)
	}
	answers := make([]string, 10)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			c, err := net.DialTimeout("tcp", s.Addr(), 5*time.Second)
			if err != nil {
				answers[i] = err.Error()
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
			b, err := io.ReadAll(c)
			if j := strings.Index(string(b), "slot "); j >= 0 {
				answers[i] = "slot " + strings.Fields(string(b[j:]))[1]
			} else {
				answers[i] = fmt.Sprintf("no answer (%v)", err)
			}
		})
	}
	wg.Wait()
	for i, a := range answers {
		if a != "slot 0" {
			t.Errorf("connection %d: %s, want slot 0 (slot 1's socket should have given up its queue when slot 0 came back)", i, a)
		}
	}
}

// TestSteeringSkipsStoppingWorker: a program that says STOPPING=1 over sd_notify (and
// serves on, as one draining would) gets no new connection; status shows what it said.
func TestSteeringSkipsStoppingWorker(t *testing.T) {
	t.Parallel()
	s := steeredCluster(t, Config{Instances: 2}, "FAKE_MODE=sdstopping:0")
	waitFor(t, 5*time.Second, "slot 0 saying it is stopping", func() bool {
		return s.Status()[0].Note == "stopping: draining"
	})
	for range 8 {
		if slot := keepAlive(t, s.Addr()); slot != "1" {
			t.Fatalf("slot %s took a new connection, want slot 1 only: slot 0 said STOPPING=1", slot)
		}
	}
	if r := s.Status()[0]; r.Status != StateOnline || r.Restarts != 0 {
		t.Errorf("slot 0: %+v, want online, not restarted (it stops on its own time)", r)
	}
}
