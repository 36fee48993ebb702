package http1

import (
	"bytes"
	"net"
	"testing"
	"time"
)

// sink is a net.Conn that records what the server writes and has nothing more to read.
type sink struct{ out bytes.Buffer }

func (s *sink) Read([]byte) (int, error)         { return 0, net.ErrClosed }
func (s *sink) Write(b []byte) (int, error)      { return s.out.Write(b) }
func (s *sink) Close() error                     { return nil }
func (s *sink) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (s *sink) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (s *sink) SetDeadline(time.Time) error      { return nil }
func (s *sink) SetReadDeadline(time.Time) error  { return nil }
func (s *sink) SetWriteDeadline(time.Time) error { return nil }

// FuzzParse feeds arbitrary bytes to the request parser as if they had arrived in one read.
// It must never panic or loop, must always make progress when it answers, and everything it
// writes must be responses.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /2 HTTP/1.0\r\n\r\n",
		"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;x\r\nabc\r\n0\r\nT: 1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
		"\r\n\nGET http://h/x?y HTTP/1.1\nConnection: close\n\n",
		"GET / HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nX: a\x00b\r\nX: a\rb\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\nx:\r\nX: b, c\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\nGET / HTTP/1.1\r\n\r\n",
		"GET /0 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n",
		"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5 ; a=b ;c;d=\"q \\\" ;x\"\r\nhello\r\n0;e\r\nT: v\r\n\r\n",
		"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n 5 \r\nhello\n0\n\n",
		"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n1\r\nb\r\n0\r\nbad\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		s := &Server{Handler: HandlerFunc(func(w *Response, r *Request) {
			w.Body = append(w.Body, r.Body...) // no sleeps or panics: those are echo's test paths
			var buf [16]byte
			if v := r.HeaderList(buf[:0], "X"); (v == nil) != (r.Header("X") == nil) {
				t.Fatalf("HeaderList and Header disagree on whether X is there")
			}
		})}
		nc := &sink{}
		c := &conn{srv: s, nc: nc}
		c.buf = make([]byte, max(len(in), initialBuf))
		c.w = copy(c.buf, in)
		for range 10000 {
			if c.r >= c.w {
				break
			}
			r0 := c.r
			res, perr := c.parse()
			if perr != nil {
				c.fail(perr)
				break
			}
			if res == needMore || res == closeNow {
				break
			}
			if c.r <= r0 {
				t.Fatalf("served a request without consuming input at %d", r0)
			}
		}
		c.flush()
		if out := nc.out.Bytes(); len(out) > 0 && !bytes.HasPrefix(out, []byte("HTTP/1.1 ")) {
			t.Fatalf("output does not start with a status line: %q", out)
		}
	})
}

// parseOnce answers one request held in c's buffer, as serve does, and discards the output.
func parseOnce(c *conn, nc *sink, req []byte) {
	c.r, c.scan = 0, 0
	c.w = copy(c.buf, req)
	if res, perr := c.parse(); perr != nil || res != served {
		panic("request not served")
	}
	c.flush()
	nc.out.Reset()
}

func newBenchConn() (*conn, *sink) {
	s := &Server{Handler: HandlerFunc(func(w *Response, r *Request) {
		w.Body = append(w.Body, `{"status":"ok"}`...)
		_ = r.Header("Authorization")
	})}
	nc := &sink{}
	c := &conn{srv: s, nc: nc, buf: make([]byte, initialBuf)}
	return c, nc
}

var benchRequest = []byte("POST /posts/42/like HTTP/1.1\r\nHost: localhost:3000\r\nUser-Agent: k6/0.50\r\n" +
	"Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl\r\n" +
	"Content-Type: application/json\r\nContent-Length: 0\r\nAccept-Encoding: gzip\r\n\r\n")

// TestParseAllocs is the hot path's allocation budget: parsing a request, running the
// handler and queueing its response allocate nothing once a connection's buffers exist.
func TestParseAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	c, nc := newBenchConn()
	parseOnce(c, nc, benchRequest) // buffers warm up
	if n := testing.AllocsPerRun(1000, func() { parseOnce(c, nc, benchRequest) }); n != 0 {
		t.Errorf("%v allocations per request, want 0", n)
	}
}

func BenchmarkParse(b *testing.B) {
	c, nc := newBenchConn()
	b.SetBytes(int64(len(benchRequest)))
	b.ReportAllocs()
	for b.Loop() {
		parseOnce(c, nc, benchRequest)
	}
}
