package http1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// echo answers "METHOD PATH ?QUERY |BODY" so tests see what the parser understood.
func echo(w *Response, r *Request) {
	switch string(r.Path) {
	case "/big":
		w.Body = append(w.Body, strings.Repeat("x", 32<<10)...)
		return
	case "/slow":
		time.Sleep(300 * time.Millisecond)
	case "/panic":
		panic("boom")
	case "/probe":
		w.Probe = true
	}
	w.ContentType = "text/plain"
	w.Body = fmt.Appendf(w.Body, "%s %s ?%s|%s", r.Method, r.Path, r.Query, r.Body)
	if v := r.Header("X-Test"); v != nil {
		w.Body = fmt.Appendf(w.Body, " x-test=%s", v)
	}
}

// echoHandler is echo, with the loop transport's Blocker: /slow and /async/... run on
// their own goroutines there.
type echoHandler struct{}

func (echoHandler) ServeHTTP1(w *Response, r *Request) { echo(w, r) }

func (echoHandler) MayBlock(r *Request) bool {
	return string(r.Path) == "/slow" || strings.HasPrefix(string(r.Path), "/async/")
}

// transports are the Server's transports; every test runs on each.
var transports = []string{TransportGoroutine, TransportLoop}

func forTransports(t *testing.T, test func(t *testing.T, transport string)) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) { test(t, tr) })
	}
}

func startServer(t *testing.T, s *Server) string {
	t.Helper()
	return startListener(t, s).Addr().String()
}

// startListener serves s on a new listener until the test ends, then checks that Shutdown
// drains within 5 s and Serve returns ErrServerClosed.
func startListener(t *testing.T, s *Server) net.Listener {
	t.Helper()
	if s.Handler == nil {
		s.Handler = echoHandler{}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve = %v, want ErrServerClosed", err)
		}
	})
	return ln
}

type response struct {
	head   bool // the request was HEAD: no body follows
	status int
	header map[string]string
	body   string
}

// readResponse reads one response framed by Content-Length.
func readResponse(br *bufio.Reader) (response, error) { return readResponseTo(br, false) }

func readResponseTo(br *bufio.Reader, head bool) (response, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return response{}, err
	}
	parts := strings.SplitN(strings.TrimRight(line, "\r\n"), " ", 3)
	if len(parts) < 2 {
		return response{}, fmt.Errorf("bad status line %q", line)
	}
	code, _ := strconv.Atoi(parts[1])
	r := response{status: code, header: map[string]string{}}
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return r, err
		}
		l = strings.TrimRight(l, "\r\n")
		if l == "" {
			break
		}
		k, v, _ := strings.Cut(l, ": ")
		r.header[strings.ToLower(k)] = v
	}
	if code == 100 || head {
		return r, nil
	}
	n, _ := strconv.Atoi(r.header["content-length"])
	b := make([]byte, n)
	if _, err := io.ReadFull(br, b); err != nil {
		return r, err
	}
	r.body = string(b)
	return r, nil
}

// closed reports whether the server closed the connection (EOF or reset) within a second.
func closed(c net.Conn, br *bufio.Reader) bool {
	c.SetReadDeadline(time.Now().Add(time.Second))
	_, err := br.ReadByte()
	return err != nil && !isNetTimeout(err)
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

func TestExchanges(t *testing.T) { forTransports(t, testExchanges) }

func testExchanges(t *testing.T, transport string) {
	big := strings.Repeat("a", 17<<10)
	tests := []struct {
		name   string
		writes []string // sent in separate writes, a short pause between them
		want   []response
		// wantClose: the server closes after the responses.
		wantClose bool
	}{
		{
			name:   "get keep-alive",
			writes: []string{"GET /a?x=1 HTTP/1.1\r\nHost: h\r\n\r\n"},
			want:   []response{{status: 200, body: "GET /a ?x=1|"}},
		},
		{
			name:   "pipelined requests answered in order",
			writes: []string{"GET /1 HTTP/1.1\r\nHost: h\r\n\r\nPOST /2 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /3 HTTP/1.1\r\nHost: h\r\n\r\n"},
			want:   []response{{status: 200, body: "GET /1 ?|"}, {status: 200, body: "POST /2 ?|abc"}, {status: 200, body: "GET /3 ?|"}},
		},
		{
			name: "pipelined requests that may block answered in order",
			writes: []string{"GET /1 HTTP/1.1\r\nHost: h\r\n\r\nPOST /async/2 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc" +
				"GET /3 HTTP/1.1\r\nHost: h\r\n\r\nGET /async/4 HTTP/1.1\r\nHost: h\r\n\r\nGET /5 HTTP/1.1\r\nHost: h\r\n\r\n"},
			want: []response{{status: 200, body: "GET /1 ?|"}, {status: 200, body: "POST /async/2 ?|abc"},
				{status: 200, body: "GET /3 ?|"}, {status: 200, body: "GET /async/4 ?|"}, {status: 200, body: "GET /5 ?|"}},
		},
		{
			name:   "one byte at a time",
			writes: strings.Split("POST /b HTTP/1.1\r\nHost: h\r\ncontent-LENGTH: 2\r\nX-Test: yes\r\n\r\nhi", ""),
			want:   []response{{status: 200, body: "POST /b ?|hi x-test=yes"}},
		},
		{
			name:   "body split across writes",
			writes: []string{"POST /s HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n01234", "56789"},
			want:   []response{{status: 200, body: "POST /s ?|0123456789"}},
		},
		{
			name:   "chunked body",
			writes: []string{"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: x\r\n\r\n"},
			want:   []response{{status: 200, body: "POST /c ?|abcde"}},
		},
		{
			name:   "leading empty lines are ignored",
			writes: []string{"\r\n\r\nGET /e HTTP/1.1\r\nHost: h\r\n\r\n"},
			want:   []response{{status: 200, body: "GET /e ?|"}},
		},
		{
			name:   "absolute-form target",
			writes: []string{"GET http://example.com/abs?q HTTP/1.1\r\nHost: h\r\n\r\n"},
			want:   []response{{status: 200, body: "GET /abs ?q|"}},
		},
		{
			name:      "http/1.0 closes",
			writes:    []string{"GET /old HTTP/1.0\r\n\r\n"},
			want:      []response{{status: 200, body: "GET /old ?|", header: map[string]string{"connection": "close"}}},
			wantClose: true,
		},
		{
			name:   "http/1.0 keep-alive",
			writes: []string{"GET /old HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"},
			want:   []response{{status: 200, body: "GET /old ?|", header: map[string]string{"connection": "keep-alive"}}},
		},
		{
			name:      "connection close honoured",
			writes:    []string{"GET /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGET /never HTTP/1.1\r\nHost: h\r\n\r\n"},
			want:      []response{{status: 200, body: "GET /x ?|", header: map[string]string{"connection": "close"}}},
			wantClose: true,
		},
		{
			name:   "head has no body",
			writes: []string{"HEAD /h HTTP/1.1\r\nHost: h\r\n\r\nGET /after HTTP/1.1\r\nHost: h\r\n\r\n"},
			want:   []response{{head: true, status: 200, header: map[string]string{"content-length": "10"}}, {status: 200, body: "GET /after ?|"}},
		},
		{name: "two different content-lengths", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"}, want: []response{{status: 400}}, wantClose: true},
		{name: "equal content-lengths are fine", writes: []string{"POST /d HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab"}, want: []response{{status: 200, body: "POST /d ?|ab"}}},
		{name: "content-length with chunked", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "transfer-encoding gzip", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "transfer-encoding twice", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "negative content-length", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "signed content-length", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\na"}, want: []response{{status: 400}}, wantClose: true},
		{name: "content-length list", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1, 1\r\n\r\na"}, want: []response{{status: 400}}, wantClose: true},
		{name: "space before colon", writes: []string{"GET / HTTP/1.1\r\nHost: h\r\nContent-Length : 0\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "obsolete line folding", writes: []string{"GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n 2\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "malformed request line", writes: []string{"GARBAGE\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "bad chunk size", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "unknown version", writes: []string{"GET / HTTP/2.0\r\n\r\n"}, want: []response{{status: 505}}, wantClose: true},
		{name: "http/1.0 with chunked", writes: []string{"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "head over 16 KiB", writes: []string{"GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + big + "\r\n\r\n"}, want: []response{{status: 431}}, wantClose: true},
		{name: "body over 16 KiB by length", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 16385\r\n\r\n"}, want: []response{{status: 413, body: `{"error":"request body too large"}`}}, wantClose: true},
		{name: "body over 16 KiB chunked", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n4400\r\n" + big[:0x4400] + "\r\n0\r\n\r\n"}, want: []response{{status: 413}}, wantClose: true},
		{name: "unknown expectation", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nExpect: teapot\r\nContent-Length: 1\r\n\r\na"}, want: []response{{status: 417}}, wantClose: true},
		// Lenient parsing a proxy in front may read otherwise (RFC 9112 2.2, 3.2, 7.1).
		{name: "nul in a field value", writes: []string{"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x00b\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "bare cr in a field value", writes: []string{"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\rContent-Length: 5\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "bare cr ending a field line", writes: []string{"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\r\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "lf inside a field value", writes: []string{"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\nb\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "control byte in a field value", writes: []string{"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x01b\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "http/1.1 without host", writes: []string{"GET / HTTP/1.1\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "two host fields", writes: []string{"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "two host fields in http/1.0", writes: []string{"GET / HTTP/1.0\r\nHost: a\r\nhost: a\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "space before a chunk size", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "space after a chunk size", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "chunk size ended by a bare lf", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "bare lf after chunk data", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\n0\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "chunk data longer than its size", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "chunk size of nine digits", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n000000005\r\nhello\r\n0\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "empty chunk extension", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;\r\nhello\r\n0\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "chunk extension with a bare cr", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;a\rb\r\nhello\r\n0\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "unterminated quoted chunk extension", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\"b\r\nhello\r\n0\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "last chunk ended by a bare lf", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "trailer ended by a bare lf", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nT: v\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "trailer line without a colon", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nnot a field\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{name: "trailer with a nul", writes: []string{"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nT: a\x00\r\n\r\n"}, want: []response{{status: 400}}, wantClose: true},
		{
			name:   "chunk extensions as RFC 9112 allows them",
			writes: []string{"POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5 ; a=b ;c;d=\"q \\\" ;x\"\r\nhello\r\n0;e\r\nT: v\r\n\r\n"},
			want:   []response{{status: 200, body: "POST /x ?|hello"}},
		},
		{
			name:   "empty host is fine",
			writes: []string{"GET /h HTTP/1.1\r\nHost:\r\n\r\n"},
			want:   []response{{status: 200, body: "GET /h ?|"}},
		},
		{
			name:   "http/1.0 without host is fine",
			writes: []string{"GET /h HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"},
			want:   []response{{status: 200, body: "GET /h ?|"}},
		},
		{name: "handler panic is 500", writes: []string{"GET /panic HTTP/1.1\r\nHost: h\r\n\r\n"}, want: []response{{status: 500, body: `{"error":"internal server error"}`}}, wantClose: true},
	}
	addr := startServer(t, &Server{Transport: transport})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, br := dial(t, addr)
			for i, w := range tt.writes {
				if i > 0 && len(tt.writes) < 100 {
					time.Sleep(20 * time.Millisecond)
				}
				if _, err := io.WriteString(c, w); err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
			}
			for i, want := range tt.want {
				got, err := readResponseTo(br, want.head)
				if err != nil {
					t.Fatalf("response %d: %v", i, err)
				}
				if got.status != want.status {
					t.Errorf("response %d: status %d, want %d (body %q)", i, got.status, want.status, got.body)
				}
				if want.body != "" && got.body != want.body {
					t.Errorf("response %d: body %q, want %q", i, got.body, want.body)
				}
				for k, v := range want.header {
					if got.header[k] != v {
						t.Errorf("response %d: header %s = %q, want %q", i, k, got.header[k], v)
					}
				}
				if got.header["date"] == "" {
					t.Errorf("response %d: no Date header", i)
				}
			}
			if tt.wantClose {
				if !closed(c, br) {
					t.Error("connection still open, want closed")
				}
			} else {
				// Still usable: one more request gets an answer.
				io.WriteString(c, "GET /again HTTP/1.1\r\nHost: h\r\n\r\n")
				got, err := readResponse(br)
				if err != nil || got.body != "GET /again ?|" {
					t.Errorf("follow-up request: %+v, %v; want an answer on the same connection", got, err)
				}
			}
		})
	}
}

func TestExpectContinue(t *testing.T) { forTransports(t, testExpectContinue) }

func testExpectContinue(t *testing.T, transport string) {
	addr := startServer(t, &Server{Transport: transport})
	c, br := dial(t, addr)
	io.WriteString(c, "POST /e HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
	got, err := readResponse(br)
	if err != nil || got.status != 100 {
		t.Fatalf("first answer: %+v, %v; want 100 Continue", got, err)
	}
	io.WriteString(c, "ab")
	time.Sleep(20 * time.Millisecond)
	io.WriteString(c, "cd")
	got, err = readResponse(br)
	if err != nil || got.status != 200 || got.body != "POST /e ?|abcd" {
		t.Fatalf("final answer: %+v, %v; want 200 with the body (and no second 100)", got, err)
	}

	// A body sent with the head needs no interim response.
	io.WriteString(c, "POST /f HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nxy")
	got, err = readResponse(br)
	if err != nil || got.status != 200 || got.body != "POST /f ?|xy" {
		t.Fatalf("body with head: %+v, %v; want 200 directly", got, err)
	}

	// A body that will be refused gets 413, never a 100.
	io.WriteString(c, "POST /g HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 999999\r\n\r\n")
	got, err = readResponse(br)
	if err != nil || got.status != 413 {
		t.Fatalf("oversized: %+v, %v; want 413", got, err)
	}
}

func TestStalledRequestIsDropped(t *testing.T) { forTransports(t, testStalledRequestIsDropped) }

func testStalledRequestIsDropped(t *testing.T, transport string) {
	addr := startServer(t, &Server{Transport: transport, ReadTimeout: 200 * time.Millisecond})
	c, br := dial(t, addr)
	io.WriteString(c, "GET /stall HTTP/1.1\r\nHost: h\r\nX-Half: ")
	got, err := readResponse(br)
	if err != nil || got.status != 408 {
		t.Fatalf("stalled request: %+v, %v; want 408 then close", got, err)
	}
	if !closed(c, br) {
		t.Error("stalled connection still open")
	}
}

func TestIdleKeepAliveOutlivesReadTimeout(t *testing.T) {
	forTransports(t, testIdleKeepAliveOutlivesReadTimeout)
}

func testIdleKeepAliveOutlivesReadTimeout(t *testing.T, transport string) {
	addr := startServer(t, &Server{Transport: transport, ReadTimeout: 100 * time.Millisecond, IdleTimeout: 2 * time.Second})
	c, br := dial(t, addr)
	io.WriteString(c, "GET /1 HTTP/1.1\r\nHost: h\r\n\r\n")
	if _, err := readResponse(br); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // idle, 5× the read timeout
	io.WriteString(c, "GET /2 HTTP/1.1\r\nHost: h\r\n\r\n")
	if got, err := readResponse(br); err != nil || got.status != 200 {
		t.Fatalf("after idling: %+v, %v; want 200", got, err)
	}
}

func TestIdleTimeoutCloses(t *testing.T) { forTransports(t, testIdleTimeoutCloses) }

func testIdleTimeoutCloses(t *testing.T, transport string) {
	addr := startServer(t, &Server{Transport: transport, IdleTimeout: 300 * time.Millisecond})
	c, br := dial(t, addr)
	io.WriteString(c, "GET /1 HTTP/1.1\r\nHost: h\r\n\r\n")
	if _, err := readResponse(br); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := br.ReadByte(); err == nil || isNetTimeout(err) {
		t.Fatalf("idle connection: read %v; want EOF after the idle timeout", err)
	}
}

func TestNonReadingClientIsDropped(t *testing.T) { forTransports(t, testNonReadingClientIsDropped) }

func testNonReadingClientIsDropped(t *testing.T, transport string) {
	s := &Server{Transport: transport, WriteTimeout: 300 * time.Millisecond}
	addr := startServer(t, s)
	c, _ := dial(t, addr)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4096)
	}
	// 400 pipelined requests for 32 KiB each, never reading: ~13 MB the server cannot send.
	req := strings.Repeat("GET /big HTTP/1.1\r\nHost: h\r\n\r\n", 400)
	go io.WriteString(c, req)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if s.Stats().Connections == 0 && s.Stats().Requests > 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("non-reading client still connected: %+v", s.Stats())
}

func TestShutdownDrains(t *testing.T) { forTransports(t, testShutdownDrains) }

func testShutdownDrains(t *testing.T, transport string) {
	s := &Server{Transport: transport, Handler: echoHandler{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	addr := ln.Addr().String()

	idle, idleR := dial(t, addr)
	io.WriteString(idle, "GET /1 HTTP/1.1\r\nHost: h\r\n\r\n")
	if _, err := readResponse(idleR); err != nil {
		t.Fatal(err)
	}
	busy, busyR := dial(t, addr)
	io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	time.Sleep(50 * time.Millisecond) // the slow request is in flight

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(ctx) }()

	got, err := readResponse(busyR)
	if err != nil || got.status != 200 || got.header["connection"] != "close" {
		t.Errorf("in-flight request: %+v, %v; want 200 with Connection: close", got, err)
	}
	if !closed(idle, idleR) {
		t.Error("idle keep-alive connection was not closed by Shutdown")
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown = %v", err)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Error("listener still accepting after Shutdown")
	}
}

func TestShutdownDeadlineForces(t *testing.T) { forTransports(t, testShutdownDeadlineForces) }

func testShutdownDeadlineForces(t *testing.T, transport string) {
	s := &Server{Transport: transport, Handler: echoHandler{}}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(ln)
	c, _ := dial(t, ln.Addr().String())
	io.WriteString(c, "GET /half HTTP/1.1\r\nHost: h\r\n") // a request that never completes
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want deadline exceeded", err)
	}
}

func TestShutdownIdleGrace(t *testing.T) { forTransports(t, testShutdownIdleGrace) }

func testShutdownIdleGrace(t *testing.T, transport string) {
	s := &Server{Transport: transport, Handler: echoHandler{}, IdleGrace: 500 * time.Millisecond}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	addr := ln.Addr().String()
	active, activeR := dial(t, addr)
	silent, silentR := dial(t, addr)
	for _, p := range []struct {
		c  net.Conn
		br *bufio.Reader
	}{{active, activeR}, {silent, silentR}} {
		io.WriteString(p.c, "GET /1 HTTP/1.1\r\nHost: h\r\n\r\n")
		if _, err := readResponse(p.br); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	time.Sleep(100 * time.Millisecond) // shutting down; both connections idle

	// A request sent during the grace is answered, with Connection: close.
	io.WriteString(active, "POST /late HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nok")
	got, err := readResponse(activeR)
	if err != nil || got.status != 200 || got.header["connection"] != "close" {
		t.Fatalf("request during the grace: %+v, %v; want 200 with Connection: close", got, err)
	}
	if !closed(active, activeR) {
		t.Error("connection still open after its Connection: close response")
	}
	// The silent one is closed when the grace ends, and Shutdown returns.
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Shutdown = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return after the grace")
	}
	if !closed(silent, silentR) {
		t.Error("silent idle connection not closed after the grace")
	}
}

// TestSetKeepAlive: with keep-alive off (a host drained from its balancer) a kept-alive
// connection is closed after its next response, which says so, while new connections are
// still served; back on, connections are kept alive again.
func TestSetKeepAlive(t *testing.T) { forTransports(t, testSetKeepAlive) }

func testSetKeepAlive(t *testing.T, transport string) {
	s := &Server{Transport: transport}
	addr := startServer(t, s)
	c, r := dial(t, addr)
	get := func(c net.Conn, r *bufio.Reader) response {
		t.Helper()
		io.WriteString(c, "GET /1 HTTP/1.1\r\nHost: h\r\n\r\n")
		got, err := readResponse(r)
		if err != nil || got.status != 200 {
			t.Fatalf("GET: %+v, %v", got, err)
		}
		return got
	}
	if got := get(c, r); got.header["connection"] == "close" {
		t.Fatalf("before: %+v, want keep-alive", got)
	}
	s.SetKeepAlive(false)
	if got := get(c, r); got.header["connection"] != "close" {
		t.Errorf("keep-alive off: %+v, want Connection: close", got)
	}
	if !closed(c, r) {
		t.Error("keep-alive off: the connection stayed open after its response")
	}
	c2, r2 := dial(t, addr) // still accepting
	if got := get(c2, r2); got.header["connection"] != "close" {
		t.Errorf("keep-alive off, new connection: %+v, want Connection: close", got)
	}
	s.SetKeepAlive(true)
	c3, r3 := dial(t, addr)
	for i := range 2 {
		if got := get(c3, r3); got.header["connection"] == "close" {
			t.Errorf("keep-alive on again, request %d: %+v, want keep-alive", i, got)
		}
	}
}

func TestProbeNotCounted(t *testing.T) { forTransports(t, testProbeNotCounted) }

// testProbeNotCounted: health checks (Response.Probe) are answered but not counted, so a
// balancer's checks of a drained host do not keep `supervisor drain` waiting; the next
// request on the same connection is counted again (the mark is reset per request).
func testProbeNotCounted(t *testing.T, transport string) {
	s := &Server{Transport: transport}
	c, r := dial(t, startServer(t, s))
	for i, path := range []string{"/probe", "/probe", "/1", "/probe"} {
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: h\r\n\r\n")
		if got, err := readResponse(r); err != nil || got.status != 200 {
			t.Fatalf("request %d, GET %s: %+v, %v", i, path, got, err)
		}
	}
	if n := s.Stats().Requests; n != 1 {
		t.Errorf("Stats().Requests = %d after three probes and one request, want 1", n)
	}
}
