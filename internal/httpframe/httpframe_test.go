package httpframe

import (
	"errors"
	"slices"
	"testing"
)

// framed is what parsing a whole stream yields.
type framed struct {
	statuses []int
	closes   []bool
	err      error
	pending  bool     // the stream ends inside a response
	bodies   []string // each response's coding and body, through Parser.Body
}

// frameAll parses stream delivered in pieces of at most step bytes, as a connection
// would: keeping unconsumed bytes and appending the next piece to them.
func frameAll(stream []byte, step int, noBody bool) framed {
	var out framed
	p := Parser{NoBody: noBody}
	var body []byte
	p.Body = func(b []byte) { body = append(body, b...) }
	end := func() {
		out.bodies = append(out.bodies, p.ContentEncoding()+"|"+string(body))
		body = body[:0]
	}
	var buf []byte
	for off := 0; off < len(stream); off += step {
		buf = append(buf, stream[off:min(off+step, len(stream))]...)
		for len(buf) > 0 {
			n, done, err := p.Parse(buf)
			buf = buf[n:]
			if err != nil {
				out.err = err
				return out
			}
			if !done {
				break
			}
			out.statuses = append(out.statuses, p.Status)
			out.closes = append(out.closes, p.Close)
			end()
			p.Reset()
		}
	}
	if p.EOF() {
		out.statuses = append(out.statuses, p.Status)
		out.closes = append(out.closes, true)
		end()
	} else if !p.Idle() || len(buf) > 0 {
		out.pending = true
	}
	return out
}

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		stream   string
		noBody   bool
		statuses []int
		closes   []bool
		err      error
		pending  bool
	}{
		{
			name:     "content-length",
			stream:   "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
			statuses: []int{200}, closes: []bool{false},
		},
		{
			name: "pipelined, different lengths",
			stream: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1" +
				"HTTP/1.1 201 Created\r\ncontent-length: 12\r\n\r\n123456789012" +
				"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
			statuses: []int{200, 201, 404}, closes: []bool{false, false, false},
		},
		{
			name: "chunked with extension and trailer",
			stream: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" +
				"5;ext=1\r\nhello\r\nA\r\n0123456789\r\n0\r\nX-Trailer: y\r\n\r\n" +
				"HTTP/1.1 204 No Content\r\n\r\n",
			statuses: []int{200, 204}, closes: []bool{false, false},
		},
		{
			name:     "bare LF line endings",
			stream:   "HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
			statuses: []int{200}, closes: []bool{false},
		},
		{
			name:     "HEAD response has no body",
			stream:   "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",
			noBody:   true,
			statuses: []int{200, 200}, closes: []bool{false, false},
		},
		{
			name:     "304 has no body",
			stream:   "HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\n\r\n",
			statuses: []int{304}, closes: []bool{false},
		},
		{
			name:     "interim 100 then final",
			stream:   "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
			statuses: []int{200}, closes: []bool{false},
		},
		{
			name:     "connection close",
			stream:   "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
			statuses: []int{200}, closes: []bool{true},
		},
		{
			name:     "HTTP/1.0 close-delimited body",
			stream:   "HTTP/1.0 200 OK\r\n\r\nbody until the end",
			statuses: []int{200}, closes: []bool{true},
		},
		{
			name:     "HTTP/1.0 keep-alive",
			stream:   "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n",
			statuses: []int{200}, closes: []bool{false},
		},
		{
			name:     "status without reason",
			stream:   "HTTP/1.1 500\r\nContent-Length: 0\r\n\r\n",
			statuses: []int{500}, closes: []bool{false},
		},
		{
			name:    "truncated body",
			stream:  "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
			pending: true,
		},
		{name: "not HTTP", stream: "SSH-2.0-OpenSSH\r\n\r\n", err: errStatusLine},
		{name: "letters in status", stream: "HTTP/1.1 2x0 OK\r\n\r\n", err: errStatusLine},
		{name: "header without colon", stream: "HTTP/1.1 200 OK\r\nbroken\r\n\r\n", err: errHeaderLine},
		{name: "negative length", stream: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", err: errLength},
		{
			name:   "conflicting lengths",
			stream: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
			err:    errLength,
		},
		{
			name:   "bad chunk size",
			stream: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
			err:    errChunkSize,
		},
		{
			name:   "chunk data overruns",
			stream: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
			err:    errChunkEnd,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, step := range []int{1, 2, 7, len(tt.stream)} {
				got := frameAll([]byte(tt.stream), step, tt.noBody)
				if !errors.Is(got.err, tt.err) {
					t.Fatalf("step %d: err %v, want %v", step, got.err, tt.err)
				}
				if tt.err != nil {
					continue
				}
				if !slices.Equal(got.statuses, tt.statuses) || !slices.Equal(got.closes, tt.closes) {
					t.Errorf("step %d: statuses %v closes %v, want %v %v",
						step, got.statuses, got.closes, tt.statuses, tt.closes)
				}
				if got.pending != tt.pending {
					t.Errorf("step %d: pending %v, want %v", step, got.pending, tt.pending)
				}
			}
		})
	}
}

// FuzzParse checks that the Parser never panics and frames a stream the same way
// whatever pieces it arrives in.
func FuzzParse(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 204 No Content\r\n\r\n"), uint8(3))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x\r\nhello\r\n0\r\nT: 1\r\n\r\n"), uint8(1))
	f.Add([]byte("HTTP/1.0 200 OK\r\n\r\nuntil close"), uint8(4))
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\n\r\n"), uint8(2))
	f.Add([]byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\nContent-Length: 0\n\n"), uint8(2))
	f.Fuzz(func(t *testing.T, stream []byte, step uint8) {
		whole := frameAll(stream, max(len(stream), 1), false)
		pieces := frameAll(stream, int(step%16)+1, false)
		if (whole.err == nil) != (pieces.err == nil) {
			t.Fatalf("err %v in pieces, %v whole", pieces.err, whole.err)
		}
		if whole.err != nil {
			return
		}
		if !slices.Equal(whole.statuses, pieces.statuses) || !slices.Equal(whole.closes, pieces.closes) {
			t.Fatalf("pieces framed %v %v, whole %v %v", pieces.statuses, pieces.closes, whole.statuses, whole.closes)
		}
		if !slices.Equal(whole.bodies, pieces.bodies) {
			t.Fatalf("pieces gave bodies %q, whole %q", pieces.bodies, whole.bodies)
		}
	})
}

// TestBody: with Body set, each response's body reaches it whole and unchunked, in any
// split of the stream, with the response's Content-Encoding; HEAD's and 304's nothing.
func TestBody(t *testing.T) {
	type got struct{ coding, body string }
	tests := []struct {
		name   string
		stream string
		noBody bool
		want   []got
	}{
		{"content-length, coded", "HTTP/1.1 200 OK\r\nContent-Encoding:  gzip \r\nContent-Length: 5\r\n\r\nhello",
			false, []got{{"gzip", "hello"}}},
		{"chunked, then plain", "HTTP/1.1 200 OK\r\ncontent-encoding: br\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n" +
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
			false, []got{{"br", "hello world"}, {"", "ok"}}},
		{"304 keeps its coding, no body", "HTTP/1.1 304 Not Modified\r\nContent-Encoding: zstd\r\nContent-Length: 99\r\n\r\n",
			false, []got{{"zstd", ""}}},
		{"head", "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 20\r\n\r\n", true, []got{{"gzip", ""}}},
		{"until close", "HTTP/1.0 200 OK\r\nContent-Encoding: gzip\r\n\r\nto the end", false, []got{{"gzip", "to the end"}}},
		{"coding too long", "HTTP/1.1 200 OK\r\nContent-Encoding: gzip, gzip, gzip, gzip, gzip, gzip, gzip\r\nContent-Length: 1\r\n\r\nx",
			false, []got{{"(too long)", "x"}}},
	}
	for _, tc := range tests {
		for _, step := range []int{1, 3, len(tc.stream)} {
			var out []got
			var body []byte
			p := Parser{NoBody: tc.noBody}
			p.Body = func(b []byte) { body = append(body, b...) }
			end := func() {
				out = append(out, got{p.ContentEncoding(), string(body)})
				body = body[:0]
				p.Reset()
			}
			var buf []byte
			for off := 0; off < len(tc.stream); off += step {
				buf = append(buf, tc.stream[off:min(off+step, len(tc.stream))]...)
				for len(buf) > 0 {
					n, done, err := p.Parse(buf)
					buf = buf[n:]
					if err != nil {
						t.Fatalf("%s, step %d: %v", tc.name, step, err)
					}
					if !done {
						break
					}
					end()
				}
			}
			if p.EOF() {
				end()
			}
			if !slices.Equal(out, tc.want) {
				t.Errorf("%s, step %d: got %q, want %q", tc.name, step, out, tc.want)
			}
		}
	}
}
