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
		"GET / HTTP/1.1\r\n\r\n",
		"POST /p HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /2 HTTP/1.0\r\n\r\n",
		"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x\r\nabc\r\n0\r\nT: 1\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
		"\r\n\nGET http://h/x?y HTTP/1.1\nConnection: close\n\n",
		"GET / HTTP/1.1\r\n folded\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		s := &Server{Handler: HandlerFunc(func(w *Response, r *Request) {
			w.Body = append(w.Body, r.Body...) // no sleeps or panics: those are echo's test paths
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
