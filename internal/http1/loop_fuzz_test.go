package http1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fuzzHandler echoes the body, runs /async/... off the loop and panics on /panic (both
// paths the loop treats apart), and answers HEAD with an empty body so the client can
// frame every answer by Content-Length alone.
type fuzzHandler struct{}

func (fuzzHandler) ServeHTTP1(w *Response, r *Request) {
	if string(r.Path) == "/panic" {
		panic("fuzz")
	}
	if string(r.Method) == "HEAD" {
		return
	}
	w.Body = append(w.Body, r.Body...)
}

func (fuzzHandler) MayBlock(r *Request) bool { return bytes.HasPrefix(r.Path, []byte("/async/")) }

// FuzzLoop sends arbitrary bytes, cut into chunks chosen by seed, through a real connection
// served by the loop transport, then shuts its write side. Whatever the input: the server
// does not panic (a loop's panic fails Serve and the test), what comes back is a sequence
// of well-framed HTTP/1.1 responses ended by the server's close, and the loop goes on
// serving a second, well-formed client.
func FuzzLoop(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /2 HTTP/1.0\r\n\r\n",
		"POST /async/c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;x\r\nabc\r\n0\r\nT: 1\r\n\r\nHEAD /h HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok",
		"GET /panic HTTP/1.1\r\nHost: h\r\n\r\nGET /never HTTP/1.1\r\nHost: h\r\n\r\n",
		"\r\n\nGET http://h/x?y HTTP/1.1\nConnection: close\n\n",
		"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",
		"GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"POST /async/c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5 ; a=\"q \\\"\"\r\nhello\r\n" + strings.Repeat("1\r\nx\r\n", 100) + "0\r\nT: v\r\n\r\nGET /h HTTP/1.0\r\n\r\n",
		"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\n0\r\n\r\n",
	} {
		f.Add(uint64(len(s)), []byte(s))
	}
	s := &Server{Transport: TransportLoop, Handler: fuzzHandler{}, ReadTimeout: 2 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			f.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			f.Errorf("Serve = %v, want ErrServerClosed", err)
		}
	})
	addr := ln.Addr().String()
	f.Fuzz(func(t *testing.T, seed uint64, in []byte) {
		if len(in) > 64<<10 {
			return
		}
		select {
		case err := <-served:
			t.Fatalf("Serve returned %v: the loop died on an earlier input", err)
		default:
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		rng := rand.New(rand.NewPCG(seed, 0))
		go func() {
			for rest := in; len(rest) > 0; {
				k := min(1+rng.IntN(64), len(rest))
				if _, err := c.Write(rest[:k]); err != nil {
					return // the server closed: fine, its answers are checked below
				}
				rest = rest[k:]
			}
			c.(*net.TCPConn).CloseWrite()
		}()
		out, err := io.ReadAll(c)
		if err != nil && !isReset(err) {
			t.Fatalf("reading the answers: %v (after %d bytes)", err, len(out))
		}
		if err := checkFraming(out, err != nil); err != nil {
			t.Fatalf("%v in %q", err, out)
		}

		c2, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		c2.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c2, "POST /async/next HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nokGET /next HTTP/1.1\r\nHost: h\r\n\r\n")
		br := bufio.NewReader(c2)
		for _, want := range []string{"ok", ""} {
			if got, err := readResponse(br); err != nil || got.status != 200 || got.body != want {
				t.Fatalf("a well-formed client after the input: %+v, %v", got, err)
			}
		}
	})
}

// isReset: the server may reset a connection whose unread input it closes on (a close
// after "Connection: close" does not linger); what it wrote before is still checked.
func isReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset")
}

// checkFraming checks that out is a sequence of HTTP/1.1 responses, each with a status
// line, header fields, and a body of its Content-Length (none for 100 Continue); a reset
// (reset) may cut the last one short.
func checkFraming(out []byte, reset bool) error {
	for len(out) > 0 {
		head, rest, ok := bytes.Cut(out, []byte("\r\n\r\n"))
		if !ok {
			if reset && bytes.HasPrefix(out, []byte("HTTP/1.1 ")) {
				return nil // cut short by the reset
			}
			return fmt.Errorf("output that is no response: %.80q", out)
		}
		lines := strings.Split(string(head), "\r\n")
		status, ok := strings.CutPrefix(lines[0], "HTTP/1.1 ")
		if !ok || len(status) < 4 || status[3] != ' ' {
			return fmt.Errorf("bad status line %q", lines[0])
		}
		code, err := strconv.Atoi(status[:3])
		if err != nil || code < 100 || code > 599 {
			return fmt.Errorf("bad status %q", status)
		}
		if code == 100 {
			out = rest
			continue
		}
		n := -1
		for _, l := range lines[1:] {
			k, v, ok := strings.Cut(l, ": ")
			if !ok {
				return fmt.Errorf("bad header line %q", l)
			}
			if strings.EqualFold(k, "Content-Length") {
				if n, err = strconv.Atoi(v); err != nil || n < 0 {
					return fmt.Errorf("bad Content-Length %q", v)
				}
			}
		}
		if n < 0 {
			return fmt.Errorf("a %d response without Content-Length", code)
		}
		if n > len(rest) {
			if reset {
				return nil // cut short by the reset
			}
			return fmt.Errorf("a body of %d bytes, %d there before the close", n, len(rest))
		}
		out = rest[n:]
	}
	return nil
}
