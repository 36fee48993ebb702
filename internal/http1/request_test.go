package http1

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestReasonPhrases: every status RFC 9110 defines, and 429, 431, 451, goes out with its
// reason phrase (406 went out as "406 Status"); a code with none ends its status line
// after the space, as RFC 9112 allows, and never with a made-up word.
func TestReasonPhrases(t *testing.T) {
	// RFC 9110 renamed four of net/http's (older) phrases.
	renamed := map[int]string{413: "Content Too Large", 414: "URI Too Long", 416: "Range Not Satisfiable", 422: "Unprocessable Content"}
	for _, tc := range []struct {
		code int
		want string
	}{
		{200, "OK"}, {304, "Not Modified"}, {406, "Not Acceptable"}, {408, "Request Timeout"},
		{413, "Content Too Large"}, {421, "Misdirected Request"}, {503, "Service Unavailable"},
		{599, ""}, {299, ""}, {0, ""}, {-1, ""}, {1000, ""},
	} {
		if got := reason(tc.code); got != tc.want {
			t.Errorf("reason(%d) = %q, want %q", tc.code, got, tc.want)
		}
	}
	for code := 100; code < 600; code++ {
		got := reason(code)
		if got != "" {
			want := http.StatusText(code)
			if r, ok := renamed[code]; ok {
				want = r
			}
			if got != want {
				t.Errorf("reason(%d) = %q, want %q", code, got, want)
			}
		}
		line := string(statusLine(nil, code))
		if want := "HTTP/1.1 " + strconv.Itoa(code) + " " + got + "\r\n"; line != want {
			t.Errorf("statusLine(%d) = %q, want %q", code, line, want)
		}
		if strings.Contains(line, "Status") {
			t.Errorf("statusLine(%d) = %q", code, line)
		}
	}
	// Every status RFC 9110 section 15 defines has its phrase (418 is unused there; 102,
	// 103 and the WebDAV codes are not this server's).
	for _, code := range []int{100, 101, 200, 201, 202, 203, 204, 205, 206, 300, 301, 302, 303, 304, 305, 307, 308,
		400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414, 415, 416, 417, 421, 422, 426,
		500, 501, 502, 503, 504, 505} {
		if reason(code) == "" {
			t.Errorf("reason(%d) is empty", code)
		}
	}
}

// TestHeaderList: a list-based field sent on several lines reads as one value, the lines
// joined by ", " in order (RFC 9110 5.3); one line is Header's value; absent is nil; an
// empty line still counts as present.
func TestHeaderList(t *testing.T) {
	for _, tc := range []struct {
		name, head string
		want       []byte
	}{
		{"one line", "Accept-Encoding: gzip, br\r\n", []byte("gzip, br")},
		{"two lines", "Accept-Encoding: identity;q=0\r\nX: y\r\naccept-encoding: br\r\n", []byte("identity;q=0, br")},
		{"three lines", "Accept-Encoding: a\r\nAccept-Encoding: b\r\nACCEPT-ENCODING: c\r\n", []byte("a, b, c")},
		{"empty line present", "Accept-Encoding:\r\n", []byte{}},
		{"absent", "X: y\r\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []byte
			seen := false
			s := &Server{Handler: HandlerFunc(func(w *Response, r *Request) {
				var buf [8]byte // shorter than "a, b, c": the join outgrows it
				got, seen = bytes.Clone(r.HeaderList(buf[:0], "Accept-Encoding")), true
				if r.HeaderList(nil, "Accept-Encoding") == nil != (tc.want == nil) {
					t.Errorf("with a nil dst: absent and present read alike")
				}
			})}
			nc := &sink{}
			c := &conn{srv: s, nc: nc, buf: make([]byte, initialBuf)}
			c.w = copy(c.buf, "GET / HTTP/1.1\r\nHost: h\r\n"+tc.head+"\r\n")
			if res, perr := c.parse(); perr != nil || res != served || !seen {
				t.Fatalf("not served: %v %v", res, perr)
			}
			if (got == nil) != (tc.want == nil) || !bytes.Equal(got, tc.want) {
				t.Errorf("HeaderList = %q (nil %v), want %q (nil %v)", got, got == nil, tc.want, tc.want == nil)
			}
		})
	}
}

// TestHeaderListAllocs: joining a field's lines into the caller's stack buffer allocates
// nothing (the handlers on the hot path give one).
func TestHeaderListAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	var n int
	s := &Server{Handler: HandlerFunc(func(w *Response, r *Request) {
		var buf [256]byte
		n += len(r.HeaderList(buf[:0], "Accept-Encoding"))
	})}
	nc := &sink{}
	c := &conn{srv: s, nc: nc, buf: make([]byte, initialBuf)}
	req := []byte("GET / HTTP/1.1\r\nHost: h\r\nAccept-Encoding: gzip;q=0.5\r\nAccept-Encoding: br\r\n\r\n")
	parseOnce(c, nc, req)
	if a := testing.AllocsPerRun(1000, func() { parseOnce(c, nc, req) }); a != 0 {
		t.Errorf("%v allocations per request, want 0", a)
	}
	if n == 0 {
		t.Fatal("no Accept-Encoding read")
	}
}
