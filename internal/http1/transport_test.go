package http1

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests in this file are the ones the loop transport most needs beside the goroutine
// transport: input split where a parser keeping state between reads can get it wrong,
// output the socket takes only in parts, clients that hang up or stop half-way, and the
// drain with work of every kind in flight. Each runs on both transports.

// writePieces writes s in pieces of n bytes, a short pause between them, so each piece is
// its own segment (TCP_NODELAY is the default on both sides).
func writePieces(c net.Conn, s string, n int, pause time.Duration) error {
	for len(s) > 0 {
		k := min(n, len(s))
		if _, err := io.WriteString(c, s[:k]); err != nil {
			return err
		}
		s = s[k:]
		if pause > 0 && len(s) > 0 {
			time.Sleep(pause)
		}
	}
	return nil
}

func TestSplitInput(t *testing.T) { forTransports(t, testSplitInput) }

func testSplitInput(t *testing.T, transport string) {
	body16k := strings.Repeat("b", DefaultMaxBodyBytes)
	chunked := "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1;e=x\r\n \r\n5\r\nworld\r\n0\r\nT: v\r\n\r\n"
	tests := []struct {
		name   string
		in     string
		piece  int
		pause  time.Duration
		status int
		body   string // the answer's body, when not empty
		bodyN  int    // or its length
		close  bool   // the server closes after the answer
		then   int    // the status of a second answer before the close, if any
	}{
		{name: "chunked body one byte at a time", in: chunked, piece: 1, pause: time.Millisecond, status: 200, body: "POST /c ?|hello world"},
		{name: "pipelined pair one byte at a time", in: "POST /1 HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nabGET /2 HTTP/1.1\r\nHost: h\r\n\r\n", piece: 1, pause: time.Millisecond, status: 200, body: "POST /1 ?|ab"},
		{name: "body at the limit in 1 KiB pieces", in: "POST /l HTTP/1.1\r\nHost: h\r\nContent-Length: 16384\r\n\r\n" + body16k, piece: 1 << 10, pause: 2 * time.Millisecond, status: 200, bodyN: len("POST /l ?|") + len(body16k)},
		{name: "head over the limit in 1 KiB pieces", in: "GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("h", 20<<10) + "\r\n\r\n", piece: 1 << 10, pause: 2 * time.Millisecond, status: 431, close: true},
		{name: "too many header fields", in: "GET / HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("X-A: 1\r\n", maxHeaders+1) + "\r\n", piece: 7, status: 431, close: true},
		{name: "chunked body over the limit in pieces", in: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + strings.Repeat("400\r\n"+strings.Repeat("c", 1<<10)+"\r\n", 17) + "0\r\n\r\n", piece: 1 << 10, status: 413, close: true},
		// 16 KiB in 1-byte chunks is 96 KiB of input, more than the buffer may grow to: the
		// framing already decoded is dropped to make room.
		{name: "chunked body at the limit in 1-byte chunks", in: "POST /l HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + strings.Repeat("1\r\nc\r\n", DefaultMaxBodyBytes) + "0\r\n\r\n", piece: 4 << 10, status: 200, bodyN: len("POST /l ?|") + DefaultMaxBodyBytes},
		{name: "binary garbage", in: "\x00\xff\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", piece: 3, status: 400, close: true},
		{name: "a request then garbage", in: "GET /ok HTTP/1.1\r\nHost: h\r\n\r\n\x16\x03\x01 nonsense\r\n\r\n", piece: 5, status: 200, body: "GET /ok ?|", then: 400, close: true},
		{name: "http/1.0 body one byte at a time", in: "POST /o HTTP/1.0\r\nContent-Length: 3\r\n\r\nxyz", piece: 1, pause: time.Millisecond, status: 200, body: "POST /o ?|xyz", close: true},
		{name: "bare newlines", in: "GET /n HTTP/1.1\nHost: h\nX-Test: nl\n\n", piece: 1, pause: time.Millisecond, status: 200, body: "GET /n ?| x-test=nl"},
	}
	addr := startServer(t, &Server{Transport: transport})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, br := dial(t, addr)
			errc := make(chan error, 1)
			go func() { errc <- writePieces(c, tt.in, tt.piece, tt.pause) }()
			got, err := readResponse(br)
			if err != nil || got.status != tt.status {
				t.Fatalf("answer: %+v, %v; want %d", got, err, tt.status)
			}
			if tt.body != "" && got.body != tt.body {
				t.Errorf("body %q, want %q", got.body, tt.body)
			}
			if tt.bodyN != 0 && len(got.body) != tt.bodyN {
				t.Errorf("body of %d bytes, want %d", len(got.body), tt.bodyN)
			}
			if !tt.close {
				if err := <-errc; err != nil {
					t.Fatalf("write: %v", err)
				}
				if strings.Contains(tt.name, "pipelined") {
					if got, err := readResponse(br); err != nil || got.body != "GET /2 ?|" {
						t.Fatalf("second answer: %+v, %v", got, err)
					}
				}
				io.WriteString(c, "GET /again HTTP/1.1\r\nHost: h\r\n\r\n")
				if got, err := readResponse(br); err != nil || got.body != "GET /again ?|" {
					t.Fatalf("follow-up: %+v, %v; want an answer on the same connection", got, err)
				}
				return
			}
			if tt.then != 0 {
				if got, err := readResponse(br); err != nil || got.status != tt.then {
					t.Fatalf("after the first answer: %+v, %v; want %d", got, err, tt.then)
				}
			}
			if !closed(c, br) {
				t.Error("connection still open, want closed")
			}
		})
	}
}

// TestRandomSplits: many clients at once, each sending a stream of pipelined requests cut
// at random places, all get every answer in order.
func TestRandomSplits(t *testing.T) { forTransports(t, testRandomSplits) }

func testRandomSplits(t *testing.T, transport string) {
	addr := startServer(t, &Server{Transport: transport})
	const clients, requests = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- randomClient(addr, uint64(i), requests)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func randomClient(addr string, seed uint64, requests int) error {
	rng := rand.New(rand.NewPCG(seed, 24))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	var stream strings.Builder
	want := make([]string, requests)
	for j := range requests {
		switch j % 4 {
		case 0:
			fmt.Fprintf(&stream, "GET /g/%d?q=%d HTTP/1.1\r\nHost: h\r\n\r\n", j, seed)
			want[j] = fmt.Sprintf("GET /g/%d ?q=%d|", j, seed)
		case 1:
			body := strings.Repeat(string(rune('a'+j%26)), rng.IntN(3000))
			fmt.Fprintf(&stream, "POST /p/%d HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n%s", j, len(body), body)
			want[j] = fmt.Sprintf("POST /p/%d ?|%s", j, body)
		case 2:
			fmt.Fprintf(&stream, "PATCH /c/%d HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n", j)
			want[j] = fmt.Sprintf("PATCH /c/%d ?|abcde", j)
		case 3:
			fmt.Fprintf(&stream, "GET /async/%d HTTP/1.1\r\nHost: h\r\n\r\n", j)
			want[j] = fmt.Sprintf("GET /async/%d ?|", j)
		}
	}
	in := stream.String()
	errc := make(chan error, 1)
	go func() {
		for len(in) > 0 {
			k := min(1+rng.IntN(700), len(in))
			if _, err := io.WriteString(c, in[:k]); err != nil {
				errc <- err
				return
			}
			in = in[k:]
			if rng.IntN(4) == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		errc <- nil
	}()
	br := bufio.NewReader(c)
	for j, w := range want {
		got, err := readResponse(br)
		if err != nil || got.status != 200 || got.body != w {
			return fmt.Errorf("client %d, answer %d: %d %.60q, %v; want %.60q", seed, j, got.status, got.body, err, w)
		}
	}
	return <-errc
}

// TestSlowReader: pipelined 32 KiB answers to a client that reads a little at a time reach
// it whole and in order, whatever the socket takes per write.
func TestSlowReader(t *testing.T) { forTransports(t, testSlowReader) }

func testSlowReader(t *testing.T, transport string) {
	addr := startServer(t, &Server{Transport: transport})
	c, _ := dial(t, addr)
	// 6.5 MB of answers, more than the sockets hold: the server's writes are partial.
	// (The client's receive buffer is left alone: a tiny one stalls loopback TCP on its
	// window updates, on either transport.)
	const n = 400
	go io.WriteString(c, strings.Repeat("GET /big HTTP/1.1\r\nHost: h\r\n\r\nGET /small HTTP/1.1\r\nHost: h\r\n\r\n", n/2))
	br := bufio.NewReaderSize(&slowReader{c: c}, 512)
	for i := range n {
		got, err := readResponse(br)
		if err != nil || got.status != 200 {
			t.Fatalf("answer %d: %d, %v", i, got.status, err)
		}
		if i%2 == 0 && got.body != strings.Repeat("x", 32<<10) {
			t.Fatalf("answer %d: a body of %d bytes, want 32 KiB of x", i, len(got.body))
		}
		if i%2 == 1 && got.body != "GET /small ?|" {
			t.Fatalf("answer %d: %q", i, got.body)
		}
	}
}

// slowReader reads at most 1 KiB at a time, pausing now and then, so the server's socket
// fills and its writes are partial.
type slowReader struct {
	c net.Conn
	n int
}

func (r *slowReader) Read(b []byte) (int, error) {
	if r.n++; r.n%32 == 0 {
		time.Sleep(time.Millisecond)
	}
	return r.c.Read(b[:min(len(b), 1<<10)])
}

// TestSlowloris: a head trickled one byte at a time, each well within the read timeout,
// is still cut off at the read timeout: the deadline is the request's, not each read's.
func TestSlowloris(t *testing.T) { forTransports(t, testSlowloris) }

func testSlowloris(t *testing.T, transport string) {
	s := &Server{Transport: transport, ReadTimeout: 300 * time.Millisecond}
	addr := startServer(t, s)
	c, br := dial(t, addr)
	// 60 s of trickle if nobody stopped it.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		io.WriteString(c, "GET /loris HTTP/1.1\r\nHost: h\r\n")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := io.WriteString(c, "X"); err != nil || i > 3000 {
				return
			}
		}
	}()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := readResponse(br)
	if err != nil || got.status != 408 {
		t.Fatalf("trickled request: %+v, %v; want 408", got, err)
	}
	if !closed(c, br) {
		t.Error("slowloris connection still open after its 408")
	}
}

// TestHalfClose: a client that shuts its write side after its requests still gets every
// answer, and the server closes after them.
func TestHalfClose(t *testing.T) { forTransports(t, testHalfClose) }

func testHalfClose(t *testing.T, transport string) {
	addr := startServer(t, &Server{Transport: transport})
	c, br := dial(t, addr)
	io.WriteString(c, "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /async/2 HTTP/1.1\r\nHost: h\r\n\r\nGET /3 HTTP/1.1\r\nHost: h\r\n\r\n")
	c.(*net.TCPConn).CloseWrite()
	for _, want := range []string{"GET /1 ?|", "GET /async/2 ?|", "GET /3 ?|"} {
		if got, err := readResponse(br); err != nil || got.body != want {
			t.Fatalf("answer: %+v, %v; want %q", got, err, want)
		}
	}
	if !closed(c, br) {
		t.Error("connection still open after the client's FIN and the answers")
	}
}

// TestHangUpWithOutputPending: a client that resets while the server still has its answers
// to write is closed and forgotten.
func TestHangUpWithOutputPending(t *testing.T) { forTransports(t, testHangUpWithOutputPending) }

func testHangUpWithOutputPending(t *testing.T, transport string) {
	s := &Server{Transport: transport}
	addr := startServer(t, s)
	c, br := dial(t, addr)
	c.(*net.TCPConn).SetReadBuffer(4096)
	io.WriteString(c, strings.Repeat("GET /big HTTP/1.1\r\nHost: h\r\n\r\n", 100))
	if got, err := readResponse(br); err != nil || got.status != 200 {
		t.Fatalf("first answer: %+v, %v", got, err)
	}
	c.(*net.TCPConn).SetLinger(0)
	c.Close()
	waitConnections(t, s, 0)
	c2, br2 := dial(t, addr)
	io.WriteString(c2, "GET /next HTTP/1.1\r\nHost: h\r\n\r\n")
	if got, err := readResponse(br2); err != nil || got.body != "GET /next ?|" {
		t.Fatalf("next connection: %+v, %v", got, err)
	}
}

func waitConnections(t *testing.T, s *Server, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Connections != want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.Stats().Connections; n != want {
		t.Fatalf("%d connections open, want %d", n, want)
	}
}

// TestExpectContinueSplit: 100-continue with the body in pieces, on a request that runs
// off the loop, and with a request pipelined behind it.
func TestExpectContinueSplit(t *testing.T) { forTransports(t, testExpectContinueSplit) }

func testExpectContinueSplit(t *testing.T, transport string) {
	addr := startServer(t, &Server{Transport: transport})
	c, br := dial(t, addr)
	for _, path := range []string{"/e", "/async/e"} {
		fmt.Fprintf(c, "PUT %s HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 6\r\n\r\n", path)
		if got, err := readResponse(br); err != nil || got.status != 100 {
			t.Fatalf("%s: first answer %+v, %v; want 100", path, got, err)
		}
		writePieces(c, "abcdef", 1, time.Millisecond)
		io.WriteString(c, "GET /behind HTTP/1.1\r\nHost: h\r\n\r\n")
		if got, err := readResponse(br); err != nil || got.body != "PUT "+path+" ?|abcdef" {
			t.Fatalf("%s: final answer %+v, %v", path, got, err)
		}
		if got, err := readResponse(br); err != nil || got.body != "GET /behind ?|" {
			t.Fatalf("%s: the request behind: %+v, %v", path, got, err)
		}
	}
}

// TestShutdownWithWorkInFlight: the drain answers what is under way, each answer with
// "Connection: close", and closes: a request pipelined behind one in flight (not
// answered), a request half-sent when Shutdown began (answered once complete), and
// answers the client had not read yet (delivered whole).
func TestShutdownWithWorkInFlight(t *testing.T) { forTransports(t, testShutdownWithWorkInFlight) }

func testShutdownWithWorkInFlight(t *testing.T, transport string) {
	s := &Server{Transport: transport, Handler: echoHandler{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	addr := ln.Addr().String()

	pipelined, pipelinedR := dial(t, addr)
	io.WriteString(pipelined, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\nGET /behind HTTP/1.1\r\nHost: h\r\n\r\n")
	half, halfR := dial(t, addr)
	io.WriteString(half, "POST /half HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nab")
	unread, unreadR := dial(t, addr)
	// 4.3 MB of answers, more than the sockets hold; the 3.8 KB of requests fit one read, so
	// none is left in the kernel at the close (unread input there makes the close a reset
	// that can destroy the last answers, on either transport: the close after
	// "Connection: close" does not linger as the one after an error does).
	io.WriteString(unread, strings.Repeat("GET /big HTTP/1.1\r\nHost: h\r\n\r\n", 130))
	time.Sleep(100 * time.Millisecond) // all three under way

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(ctx) }()
	time.Sleep(50 * time.Millisecond)

	got, err := readResponse(pipelinedR)
	if err != nil || got.body != "GET /slow ?|" || got.header["connection"] != "close" {
		t.Errorf("in flight: %+v, %v; want its answer with Connection: close", got, err)
	}
	if !closed(pipelined, pipelinedR) {
		t.Error("pipelined: the request behind the one in flight was answered, or the connection left open")
	}
	io.WriteString(half, "cd")
	got, err = readResponse(halfR)
	if err != nil || got.body != "POST /half ?|abcd" || got.header["connection"] != "close" {
		t.Errorf("half-sent: %+v, %v; want its answer with Connection: close", got, err)
	}
	if !closed(half, halfR) {
		t.Error("half-sent: still open after its answer")
	}
	// The answers written or parsed before Shutdown are delivered whole; the first one
	// after it says Connection: close and is the last.
	for i := 0; ; i++ {
		got, err := readResponse(unreadR)
		if err != nil || len(got.body) != 32<<10 {
			t.Fatalf("unread answer %d: %d bytes, %v; want every answer delivered whole", i, len(got.body), err)
		}
		if got.header["connection"] == "close" {
			break
		}
		if i == 129 {
			t.Fatal("unread: 130 answers and none with Connection: close")
		}
	}
	if !closed(unread, unreadR) {
		t.Error("unread: still open after its answers")
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown = %v", err)
	}
}
