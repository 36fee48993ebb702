package loadgen

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
)

// reply is a test server's answer to one request: the bytes to write, and whether to
// close the connection after them, or to never answer at all.
type reply struct {
	bytes []byte
	close bool
	hang  bool
}

// testServer is a raw HTTP/1.1 server on 127.0.0.1:0 whose answers a test chooses. It
// reads pipelined requests and flushes its answers when no more requests are buffered.
type testServer struct {
	URL      string
	answer   func(seq, total int64) reply // seq: request number on its connection; total: on the server
	requests atomic.Int64
	accepted atomic.Int64

	ln    net.Listener
	done  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	byIP  map[string]int // connections accepted, by the client's address
}

func newTestServer(t testing.TB, answer func(seq, total int64) reply) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{
		URL: "http://" + ln.Addr().String() + "/path?q=1", answer: answer,
		ln: ln, done: make(chan struct{}), conns: map[net.Conn]struct{}{}, byIP: map[string]int{},
	}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.close)
	return s
}

func (s *testServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		ip, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.byIP[ip]++
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *testServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	br, bw := bufio.NewReader(c), bufio.NewWriter(c)
	for seq := int64(0); ; seq++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return
		}
		r := s.answer(seq, s.requests.Add(1)-1)
		if r.hang {
			bw.Flush()
			<-s.done
			return
		}
		bw.Write(r.bytes)
		if r.close {
			bw.Flush()
			return
		}
		if br.Buffered() == 0 {
			if bw.Flush() != nil {
				return
			}
		}
	}
}

func (s *testServer) close() {
	close(s.done)
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// ok is a small keep-alive response.
var ok = reply{bytes: []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")}

// cannedServer answers every request with the same response as fast as it can, with no
// allocations per request: the benchmark's server, so that the client's cost shows.
func cannedServer(tb testing.TB, resp []byte) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serveCanned(c, resp)
			}()
		}
	}()
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String() + "/"
}

// serveCanned answers each request head (bodiless requests only) with resp, counting
// "\r\n\r\n" across reads.
func serveCanned(c net.Conn, resp []byte) {
	in := make([]byte, 16<<10)
	out := make([]byte, 0, 64<<10)
	matched := 0 // bytes of "\r\n\r\n" matched so far
	const end = "\r\n\r\n"
	for {
		n, err := c.Read(in)
		if err != nil {
			return
		}
		for _, b := range in[:n] {
			switch {
			case b == end[matched]:
				matched++
			case b == '\r':
				matched = 1
			default:
				matched = 0
			}
			if matched == len(end) {
				matched = 0
				out = append(out, resp...)
			}
		}
		if len(out) > 0 {
			if _, err := c.Write(out); err != nil {
				return
			}
			out = out[:0]
		}
	}
}
