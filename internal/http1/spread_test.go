package http1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestLoopsShareConnections: the loop transport's connections end up spread evenly over
// its loops however they arrive. Before the hand-off, the loop that woke for the listener
// kept what it accepted: a burst (a load generator opening its connections at once) and a
// trickle (EPOLLEXCLUSIVE wakes the same waiter first) both landed on one or two loops.
// Four loops, whatever GOMAXPROCS is.
func TestLoopsShareConnections(t *testing.T) {
	const loops, conns = 4, 64
	cases := []struct {
		name string
		open func(t *testing.T, addr string) []*client
	}{
		{"burst", func(t *testing.T, addr string) []*client {
			// All dialled at once, before any is served: they wait in the accept queue
			// together, and one wake-up accepts them all.
			cs := make([]*client, conns)
			var wg sync.WaitGroup
			for i := range cs {
				wg.Go(func() { cs[i] = newClient(t, addr) })
			}
			wg.Wait()
			return cs
		}},
		{"trickle", func(t *testing.T, addr string) []*client {
			// One at a time, each served before the next is dialled.
			cs := make([]*client, conns)
			for i := range cs {
				cs[i] = newClient(t, addr)
				cs[i].get(t, "/trickle", false)
			}
			return cs
		}},
		{"reconnect after Connection: close", func(t *testing.T, addr string) []*client {
			// A burst, then every client asks three times for "Connection: close" and
			// dials again once the server closed: the loops that lose connections must be
			// the ones that get the new ones.
			cs := make([]*client, conns)
			var wg sync.WaitGroup
			for i := range cs {
				wg.Go(func() {
					c := newClient(t, addr)
					for range 3 {
						c.get(t, "/close", true)
						c = newClient(t, addr)
					}
					cs[i] = c
				})
			}
			wg.Wait()
			return cs
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{Transport: TransportLoop, Loops: loops}
			addr := startServer(t, s)
			cs := tc.open(t, addr)
			for i, c := range cs {
				if c == nil {
					t.Fatalf("client %d did not connect", i)
				}
				c.get(t, fmt.Sprintf("/after/%d", i), false) // each is served where it went
			}
			per := s.Stats().LoopConnections
			t.Logf("connections per loop: %v", per)
			if len(per) != loops {
				t.Fatalf("LoopConnections has %d loops, want %d: %v", len(per), loops, per)
			}
			if lo, hi := slices.Min(per), slices.Max(per); lo < conns/loops-1 || hi > conns/loops+1 {
				t.Errorf("connections per loop %v: want %d±1 on each of %d loops", per, conns/loops, loops)
			}
			var sum int64
			for _, n := range per {
				sum += n
			}
			if open := s.Stats().Connections; sum != open || open != conns {
				t.Errorf("loops hold %d connections, the server counts %d open, want %d", sum, open, conns)
			}
		})
	}
}

type client struct {
	c  net.Conn
	br *bufio.Reader
}

// newClient dials addr; the connection closes when the test ends. Safe to call from the
// test's goroutines: it reports failures with Errorf, and a nil client is checked later.
func newClient(t *testing.T, addr string) *client {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Errorf("dial: %v", err)
		return nil
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return &client{c: c, br: bufio.NewReader(c)}
}

// get sends one request and reads its answer; with close, the request asks for
// "Connection: close" and get waits until the server has closed the connection.
func (c *client) get(t *testing.T, path string, close bool) {
	if c == nil {
		return
	}
	req := "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n"
	if close {
		req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	}
	if _, err := io.WriteString(c.c, req); err != nil {
		t.Errorf("GET %s: %v", path, err)
		return
	}
	if r, err := readResponse(c.br); err != nil || r.status != 200 {
		t.Errorf("GET %s: %+v, %v; want 200", path, r, err)
		return
	}
	if close {
		if b, err := io.ReadAll(c.br); err != nil || len(b) > 0 {
			t.Errorf("GET %s with Connection: close: then %q, %v; want the server to close", path, b, err)
		}
		c.c.Close()
	}
}

// TestLoopsDrainHandedOver: connections accepted just before Shutdown, some possibly still
// on their way to the loop picked for them, are served there: every request already sent
// is answered, every connection is closed by the drain (within IdleGrace), Shutdown
// returns, and no loop counts a connection after it.
func TestLoopsDrainHandedOver(t *testing.T) {
	const conns = 64
	s := &Server{Transport: TransportLoop, Loops: 4, IdleGrace: 300 * time.Millisecond, Handler: echoHandler{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	cs := make([]*client, conns)
	var wg sync.WaitGroup
	for i := range cs {
		wg.Go(func() {
			if cs[i] = newClient(t, ln.Addr().String()); cs[i] != nil {
				fmt.Fprintf(cs[i].c, "GET /draining/%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
			}
		})
	}
	wg.Wait()
	// Accepted, not necessarily adopted by their loops yet: a connection left in the
	// accept queue when the listener closes is reset, as on any server.
	for deadline := time.Now().Add(10 * time.Second); s.Stats().Accepted < conns; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("accepted %d of %d connections", s.Stats().Accepted, conns)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	for i, c := range cs {
		if c == nil {
			t.Fatalf("client %d did not connect", i)
		}
		// Answered before Shutdown or during the drain (then with "Connection: close").
		if r, err := readResponse(c.br); err != nil || r.status != 200 || r.body != fmt.Sprintf("GET /draining/%d ?|", i) {
			t.Errorf("client %d, request sent before Shutdown: %+v, %v; want its answer", i, r, err)
		}
		if b, err := io.ReadAll(c.br); err != nil || len(b) > 0 {
			t.Errorf("client %d after its answer: %q, %v; want the drain to close the connection", i, b, err)
		}
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve = %v, want ErrServerClosed", err)
	}
	if st := s.Stats(); st.Connections != 0 || slices.Max(st.LoopConnections) != 0 {
		t.Errorf("after Shutdown: %d connections open, per loop %v; want none", st.Connections, st.LoopConnections)
	}
}
