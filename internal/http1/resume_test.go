package http1

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// trickle delivers in to c's parser step bytes per read, as serve does: room is made in
// the buffer when it is full, and what is buffered is parsed after every read. It returns
// the statuses written.
func trickle(t *testing.T, c *conn, nc *sink, in []byte, step int) []int {
	t.Helper()
	for len(in) > 0 {
		if c.w == len(c.buf) && !c.makeRoom() {
			t.Fatalf("no room for the input at %d", c.w)
		}
		n := copy(c.buf[c.w:min(c.w+step, len(c.buf))], in)
		c.w += n
		in = in[n:]
		for c.r < c.w {
			res, perr := c.parse()
			if perr != nil {
				c.fail(perr)
				return statuses(nc.out.Bytes())
			}
			if res != served {
				break
			}
		}
	}
	c.flush()
	return statuses(nc.out.Bytes())
}

func statuses(out []byte) []int {
	var codes []int
	for _, line := range bytes.Split(out, []byte("\r\n")) {
		var code int
		if _, err := fmt.Sscanf(string(line), "HTTP/1.1 %d", &code); err == nil {
			codes = append(codes, code)
		}
	}
	return codes
}

// chunkedBody encodes body in chunks of size n.
func chunkedBody(body string, n int) string {
	var b strings.Builder
	for len(body) > 0 {
		k := min(n, len(body))
		fmt.Fprintf(&b, "%x;n=%d\r\n%s\r\n", k, k, body[:k])
		body = body[k:]
	}
	b.WriteString("0\r\nT: x\r\n\r\n")
	return b.String()
}

// TestTrickledBodyWork is the attack of a body sent in thousands of small packets: however
// the input is split, the parser passes over each byte a bounded number of times. Before
// the parser resumed where the last read stopped, it decoded a chunked body (and parsed
// the head) from the start on every read: quadratic work, ~0.5 s of CPU for 30 KB.
func TestTrickledBodyWork(t *testing.T) {
	body := strings.Repeat("0123456789abcdef", 1000) // 16,000 bytes: under MaxBodyBytes
	head := "POST /up HTTP/1.1\r\nHost: h\r\nUser-Agent: trickle\r\n"
	tests := []struct {
		name string
		in   string
		step int
		body string // the body the handler gets
	}{
		{name: "chunked one byte per read", in: head + "Transfer-Encoding: chunked\r\n\r\n" + chunkedBody(body, 100), step: 1, body: body},
		{name: "chunked in 1-byte chunks, 7 bytes per read", in: head + "Transfer-Encoding: chunked\r\n\r\n" + chunkedBody(body[:2000], 1), step: 7, body: body[:2000]},
		{name: "content-length one byte per read", in: head + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + body, step: 1, body: body},
		{name: "head one byte per read", in: head + strings.Repeat("X-Pad: 0123456789\r\n", 50) + "\r\n", step: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []byte
			s := &Server{MaxBodyBytes: 64 << 10, Handler: HandlerFunc(func(w *Response, r *Request) {
				got = append(got[:0], r.Body...)
			})}
			nc := &sink{}
			c := &conn{srv: s, nc: nc, buf: make([]byte, initialBuf)}
			if codes := trickle(t, c, nc, []byte(tt.in), tt.step); len(codes) != 1 || codes[0] != 200 {
				t.Fatalf("statuses %v, want [200]", codes)
			}
			if string(got) != tt.body {
				t.Errorf("body of %d bytes, want %d", len(got), len(tt.body))
			}
			// Each byte is passed over by the head scan, the head parse (twice for a
			// request whose body comes later) and the body decoder (the line search and the
			// copy): a few times, not once per read.
			t.Logf("passed over %d bytes for %d of input", c.scanned, len(tt.in))
			if limit := 6 * len(tt.in); c.scanned > limit {
				t.Errorf("parser passed over %d bytes for %d of input (limit %d)", c.scanned, len(tt.in), limit)
			}
		})
	}
}

// FuzzParseSplit checks that the parser's state between reads changes nothing: the input
// delivered in pieces (their sizes drawn from seed) gets the answers it gets in one read,
// and the handler sees the same requests. Answers that depend on the split by design are
// left out: 100 Continue (sent only while the body is missing) and 413 or 431 (the buffer's
// limits, which one read sized to the input does not meet the same way).
func FuzzParseSplit(f *testing.F) {
	for _, s := range []string{
		"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;x=\"y\"\r\nabc\r\n0\r\nT: 1\r\n\r\nGET /n HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /2 HTTP/1.0\r\n\r\n",
		"\r\n\nGET /x HTTP/1.1\nHost: h\nX: 1\n\n",
		"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5 ;a\r\nhello\r\n1\r\nx\n0\r\n\r\n",
		"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkedBody(strings.Repeat("z", 300), 7),
	} {
		f.Add(uint64(len(s)), []byte(s))
	}
	run := func(in []byte, piece func() int) (codes []int, seen []string) {
		s := &Server{Handler: HandlerFunc(func(w *Response, r *Request) {
			seen = append(seen, fmt.Sprintf("%s %s ?%s %q %q", r.Method, r.Path, r.Query, r.Header("X"), r.Body))
		})}
		nc := &sink{}
		c := &conn{srv: s, nc: nc, buf: make([]byte, max(len(in), initialBuf))}
	feed:
		for rest := in; len(rest) > 0; {
			if c.w == len(c.buf) && !c.makeRoom() {
				c.fail(errBodyTooLarge)
				break
			}
			n := copy(c.buf[c.w:min(c.w+piece(), len(c.buf))], rest)
			c.w += n
			rest = rest[n:]
			for c.r < c.w {
				res, perr := c.parse()
				if perr != nil {
					c.fail(perr)
					break feed
				}
				if res == needMore {
					break
				}
				if res == closeNow {
					break feed
				}
			}
		}
		c.flush()
		return statuses(nc.out.Bytes()), seen
	}
	f.Fuzz(func(t *testing.T, seed uint64, in []byte) {
		if len(in) > 64<<10 {
			return
		}
		wholeCodes, wholeSeen := run(in, func() int { return len(in) })
		rng := rand.New(rand.NewPCG(seed, 0))
		splitCodes, splitSeen := run(in, func() int { return 1 + rng.IntN(16) })
		for _, codes := range [][]int{wholeCodes, splitCodes} {
			for _, code := range codes {
				if code == 100 || code == 413 || code == 431 {
					return
				}
			}
		}
		if fmt.Sprint(wholeCodes) != fmt.Sprint(splitCodes) || fmt.Sprint(wholeSeen) != fmt.Sprint(splitSeen) {
			t.Fatalf("in one read: %v %q\nin pieces:   %v %q", wholeCodes, wholeSeen, splitCodes, splitSeen)
		}
	})
}
