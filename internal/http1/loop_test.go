package http1

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// gate is a handler whose /async/wait requests block until release: a stand-in for a write
// waiting for its group commit.
type gate struct {
	once    sync.Once
	release chan struct{}
	entered chan struct{}
}

func newGate() *gate { return &gate{release: make(chan struct{}), entered: make(chan struct{}, 16)} }

func (g *gate) ServeHTTP1(w *Response, r *Request) {
	if string(r.Path) == "/async/wait" {
		g.entered <- struct{}{}
		<-g.release
	}
	echo(w, r)
}

func (g *gate) MayBlock(r *Request) bool { return strings.HasPrefix(string(r.Path), "/async/") }

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// TestBlockingRequestDoesNotHoldOthers: while one request's handler waits, other
// connections are answered, and the waiting one is answered when its handler returns.
func TestBlockingRequestDoesNotHoldOthers(t *testing.T) {
	forTransports(t, testBlockingRequestDoesNotHoldOthers)
}

func testBlockingRequestDoesNotHoldOthers(t *testing.T, transport string) {
	g := newGate()
	t.Cleanup(g.open)
	addr := startServer(t, &Server{Transport: transport, Handler: g})
	waiting, waitingR := dial(t, addr)
	io.WriteString(waiting, "GET /async/wait HTTP/1.1\r\nHost: h\r\n\r\n")
	<-g.entered
	for i := range 3 {
		c, br := dial(t, addr)
		fmt.Fprintf(c, "GET /other/%d HTTP/1.1\r\nHost: h\r\n\r\n", i)
		if got, err := readResponse(br); err != nil || got.status != 200 {
			t.Fatalf("request %d while another waits: %+v, %v; want 200", i, got, err)
		}
	}
	// A request pipelined behind the waiting one, sent while its handler waits, is kept
	// for after it.
	io.WriteString(waiting, "GET /pipelined HTTP/1.1\r\nHost: h\r\n\r\n")
	time.Sleep(20 * time.Millisecond)
	g.open()
	if got, err := readResponse(waitingR); err != nil || got.body != "GET /async/wait ?|" {
		t.Fatalf("the waiting request: %+v, %v; want its answer once its handler returned", got, err)
	}
	if got, err := readResponse(waitingR); err != nil || got.body != "GET /pipelined ?|" {
		t.Fatalf("the request behind it: %+v, %v", got, err)
	}
	// The connection goes on after the deferred request.
	io.WriteString(waiting, "GET /after HTTP/1.1\r\nHost: h\r\n\r\n")
	if got, err := readResponse(waitingR); err != nil || got.body != "GET /after ?|" {
		t.Fatalf("after the waiting request: %+v, %v", got, err)
	}
}

// TestHangUpWhileBlocked: a client that goes away while its request's handler waits does
// not upset the server; the handler's return is the end of that connection.
func TestHangUpWhileBlocked(t *testing.T) { forTransports(t, testHangUpWhileBlocked) }

func testHangUpWhileBlocked(t *testing.T, transport string) {
	g := newGate()
	t.Cleanup(g.open)
	s := &Server{Transport: transport, Handler: g}
	addr := startServer(t, s)
	c, _ := dial(t, addr)
	io.WriteString(c, "GET /async/wait HTTP/1.1\r\nHost: h\r\n\r\n")
	<-g.entered
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0) // a reset: the hang-up epoll reports even for a connection out of its interest
	}
	c.Close()
	time.Sleep(20 * time.Millisecond)
	g.open()
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Connections != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.Stats().Connections; n != 0 {
		t.Fatalf("%d connections open after the client left and its handler returned", n)
	}
	c2, br := dial(t, addr)
	io.WriteString(c2, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
	if got, err := readResponse(br); err != nil || got.status != 200 {
		t.Fatalf("next connection: %+v, %v", got, err)
	}
}

// TestLoopIdleCostsNothing: on the loop transport an idle keep-alive connection has no
// goroutine, and its share of the heap (with the test's own client side of it) is small;
// the goroutine transport is measured alongside for the record.
func TestLoopIdleCostsNothing(t *testing.T) { forTransports(t, testLoopIdleCostsNothing) }

func testLoopIdleCostsNothing(t *testing.T, transport string) {
	const n = 300
	addr := startServer(t, &Server{Transport: transport})
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	g0, h0 := runtime.NumGoroutine(), heap()
	conns := make([]net.Conn, 0, n)
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: h\r\n\r\n", i)
		if _, err := readResponse(bufio.NewReaderSize(c, 256)); err != nil {
			t.Fatal(err)
		}
	}
	g1, h1 := runtime.NumGoroutine(), heap()
	for _, c := range conns {
		c.Close()
	}
	perConn := (int64(h1) - int64(h0)) / n
	t.Logf("%s: %d idle connections: %+d goroutines, %d bytes of heap each (server and client sides)", transport, n, g1-g0, perConn)
	if transport != TransportLoop {
		return
	}
	if g1-g0 > 10 {
		t.Errorf("%d more goroutines with %d idle connections, want none per connection", g1-g0, n)
	}
	if perConn > 2048 {
		t.Errorf("%d bytes of heap per idle connection, want at most 2 KiB: no buffer, no exchange, no stack", perConn)
	}
}

// TestRoundTripAllocs is the loop's allocation budget: a request read from a socket,
// parsed, answered and written allocates nothing in steady state, on either transport
// (the client's side of the exchange allocates nothing either).
func TestRoundTripAllocs(t *testing.T) { forTransports(t, testRoundTripAllocs) }

func testRoundTripAllocs(t *testing.T, transport string) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	s := &Server{Transport: transport, Handler: HandlerFunc(func(w *Response, r *Request) {
		w.Body = append(w.Body, `{"status":"ok"}`...)
	})}
	addr := startServer(t, s)
	c, br := dial(t, addr)
	req := []byte("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	c.Write(req)
	first, err := readResponse(br)
	if err != nil || first.status != 200 {
		t.Fatalf("first request: %+v, %v", first, err)
	}
	// Every response has the same length (the Date header's is fixed).
	want := len("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n" +
		"Date: Mon, 02 Jan 2006 15:04:05 GMT\r\n\r\n{\"status\":\"ok\"}")
	buf := make([]byte, want)
	roundTrip := func() {
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		roundTrip()
	}
	if n := testing.AllocsPerRun(2000, roundTrip); n > 0.05 {
		t.Errorf("%v allocations per round trip, want 0", n)
	}
}

func TestUnknownTransport(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := &Server{Transport: "threads", Handler: echoHandler{}}
	if err := s.Serve(ln); err == nil || !strings.Contains(err.Error(), `transport "threads"`) {
		t.Fatalf("Serve = %v, want an error naming the transport", err)
	}
}
