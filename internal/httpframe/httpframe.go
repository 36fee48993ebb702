// Package httpframe frames HTTP/1.x responses in a byte stream for clients that read
// raw sockets (the load generator's event loops): where each response ends, its status
// and whether the connection closes after it, without copying bodies.
package httpframe

import (
	"bytes"
	"errors"
)

// Parse errors. Each one ends the connection: after a framing error nothing later on the
// stream can be trusted to line up with the requests sent.
var (
	errStatusLine = errors.New("malformed status line")
	errHeaderLine = errors.New("malformed header line")
	errLength     = errors.New("bad Content-Length")
	errChunkSize  = errors.New("bad chunk size")
	errChunkEnd   = errors.New("missing CRLF after chunk data")
)

// maxChunkLine bounds a chunk-size line (size plus extensions); a longer one is an error,
// not a reason to buffer without limit.
const maxChunkLine = 4096

// Parser states.
const (
	stHead       = iota // reading the status line and headers
	stBody              // skipping remain bytes of a Content-Length body
	stChunkSize         // reading a chunk-size line
	stChunkData         // skipping remain bytes of chunk data
	stChunkCRLF         // expecting the CRLF after chunk data
	stTrailer           // reading trailer lines after the last chunk
	stUntilClose        // the body runs to the end of the connection
)

// Parser frames HTTP/1.x responses in a byte stream, one response at a time, keeping no
// bytes of its own: bodies are skipped, never copied, so a response of any size passes
// through a small read buffer. It reads only what framing needs (status, Content-Length,
// Transfer-Encoding, Connection), and, for a caller that checks bodies (Body set),
// Content-Encoding.
type Parser struct {
	state  uint8
	remain int64 // bytes left in the current body or chunk
	Status int   // status code of the response being parsed
	Close  bool  // the connection ends after this response
	// NoBody is set by the caller for responses to HEAD requests, which carry no body
	// whatever their headers say.
	NoBody bool
	// Body, when set, is given the body's bytes as they pass, in order, without the
	// chunked framing; the slices are the caller's buffer, valid only during the call.
	// Nil (the load generator's usual run): bodies are skipped unseen.
	Body func(b []byte)

	// The Content-Encoding value of the response, kept only when Body is set: a copy,
	// since the head's bytes are gone by the time the body ends.
	coding    [maxCoding]byte
	codingLen uint8
}

// maxCoding bounds the Content-Encoding value kept for Body's caller: "gzip", "br",
// "zstd", or a short list of them.
const maxCoding = 32

// Reset prepares the Parser for the next response on the same connection.
func (p *Parser) Reset() {
	p.state, p.remain, p.Status, p.Close = stHead, 0, 0, false
	p.codingLen = 0
}

// ContentEncoding is the Content-Encoding of the response being parsed, as sent (spaces
// trimmed), "" for none; kept only when Body is set. A value longer than 32 bytes comes
// back as "(too long)", which no decoder takes.
func (p *Parser) ContentEncoding() string {
	return string(p.coding[:p.codingLen])
}

// Parse consumes bytes of the current response from b. It returns how many bytes it used
// and whether the response is now complete. When it is not complete, the bytes of b past
// n are an incomplete line the Parser needs again, with more data after them. When it
// is, the caller takes the Status and Close fields, calls Reset and parses the rest of b
// as the next response.
func (p *Parser) Parse(b []byte) (n int, done bool, err error) {
	for {
		switch p.state {
		case stHead:
			end := headEnd(b[n:])
			if end < 0 {
				return n, false, nil
			}
			if err := p.head(b[n : n+end]); err != nil {
				return n, false, err
			}
			n += end
			if p.Status >= 100 && p.Status < 200 && p.Status != 101 {
				// An interim response (100 Continue, 103 Early Hints): the final one follows.
				p.Reset()
				continue
			}
			if p.state == stHead { // no body
				return n, true, nil
			}
		case stBody, stChunkData:
			avail := int64(len(b) - n)
			if avail == 0 {
				return n, false, nil
			}
			take := min(p.remain, avail)
			if p.Body != nil {
				p.Body(b[n : n+int(take)])
			}
			p.remain -= take
			n += int(take)
			if p.remain > 0 {
				return n, false, nil
			}
			if p.state == stBody {
				p.state = stHead
				return n, true, nil
			}
			p.state = stChunkCRLF
		case stChunkCRLF:
			rest := b[n:]
			switch {
			case len(rest) == 0:
				return n, false, nil
			case rest[0] == '\n':
				n++
			case rest[0] != '\r':
				return n, false, errChunkEnd
			case len(rest) == 1:
				return n, false, nil
			case rest[1] != '\n':
				return n, false, errChunkEnd
			default:
				n += 2
			}
			p.state = stChunkSize
		case stChunkSize:
			i := bytes.IndexByte(b[n:], '\n')
			if i < 0 {
				if len(b)-n > maxChunkLine {
					return n, false, errChunkSize
				}
				return n, false, nil
			}
			size, ok := parseHex(b[n : n+i])
			if !ok {
				return n, false, errChunkSize
			}
			n += i + 1
			if size == 0 {
				p.state = stTrailer
			} else {
				p.state, p.remain = stChunkData, size
			}
		case stTrailer:
			i := bytes.IndexByte(b[n:], '\n')
			if i < 0 {
				if len(b)-n > maxChunkLine {
					return n, false, errHeaderLine
				}
				return n, false, nil
			}
			line := b[n : n+i]
			n += i + 1
			if len(line) == 0 || (len(line) == 1 && line[0] == '\r') {
				p.state = stHead
				return n, true, nil
			}
		case stUntilClose:
			if p.Body != nil && n < len(b) {
				p.Body(b[n:])
			}
			return len(b), false, nil
		}
	}
}

// EOF tells the Parser the connection ended. It reports whether that completed the
// response (a body delimited by the close).
func (p *Parser) EOF() bool {
	if p.state == stUntilClose {
		p.state = stHead
		return true
	}
	return false
}

// Idle reports whether the Parser is between responses.
func (p *Parser) Idle() bool { return p.state == stHead }

// headEnd returns the length of the response head at the start of b, through the empty
// line that ends it, or -1 when b does not hold all of it. Lines may end in CRLF or LF.
// Blank lines before the status line (a stray CRLF after a body) belong to the head.
func headEnd(b []byte) int {
	i := blankPrefix(b)
	for {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		if j == 0 || (j == 1 && b[i] == '\r') {
			return i + j + 1
		}
		i += j + 1
	}
}

// blankPrefix returns the length of the complete blank lines at the start of b.
func blankPrefix(b []byte) int {
	i := 0
	for {
		switch {
		case i < len(b) && b[i] == '\n':
			i++
		case i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n':
			i += 2
		default:
			return i
		}
	}
}

// head parses a complete response head and sets the state for its body.
func (p *Parser) head(h []byte) error {
	h = h[blankPrefix(h):] // see headEnd
	i := bytes.IndexByte(h, '\n')
	line := trimCR(h[:i])
	h = h[i+1:]
	// "HTTP/1.x SSS[ reason]"
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || line[8] != ' ' ||
		!isDigit(line[9]) || !isDigit(line[10]) || !isDigit(line[11]) ||
		(len(line) > 12 && line[12] != ' ') {
		return errStatusLine
	}
	http10 := line[7] == '0'
	p.Status = int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	length := int64(-1)
	chunked, closeTok, keepAlive := false, false, false
	for len(h) > 0 {
		i := bytes.IndexByte(h, '\n')
		line := trimCR(h[:i])
		h = h[i+1:]
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return errHeaderLine
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		switch {
		case equalFold(name, "content-length"):
			v, ok := parseDecimal(value)
			if !ok || (length >= 0 && v != length) {
				return errLength
			}
			length = v
		case equalFold(name, "transfer-encoding"):
			// chunked must be the last coding; anything else is delimited by the close.
			chunked = hasSuffixFold(value, "chunked")
			if !chunked {
				closeTok = true
			}
		case p.Body != nil && equalFold(name, "content-encoding"):
			if len(value) > maxCoding {
				value = []byte("(too long)")
			}
			p.codingLen = uint8(copy(p.coding[:], value))
		case equalFold(name, "connection"):
			closeTok = closeTok || containsFold(value, "close")
			keepAlive = keepAlive || containsFold(value, "keep-alive")
		}
	}
	p.Close = closeTok || (http10 && !keepAlive)
	switch {
	case p.NoBody || p.Status == 204 || p.Status == 304 || (p.Status >= 100 && p.Status < 200):
		p.state = stHead
		if p.Status == 101 {
			p.Close = true // the connection now speaks another protocol
		}
	case chunked:
		p.state = stChunkSize
	case length == 0:
		p.state = stHead
	case length > 0:
		p.state, p.remain = stBody, length
	default:
		p.state, p.Close = stUntilClose, true
	}
	return nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func trimCR(b []byte) []byte {
	if len(b) > 0 && b[len(b)-1] == '\r' {
		return b[:len(b)-1]
	}
	return b
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// parseDecimal parses a non-negative decimal of at most 18 digits (no sign, no spaces).
func parseDecimal(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// parseHex parses a chunk-size line: hex digits, optional whitespace and ";extensions".
func parseHex(line []byte) (int64, bool) {
	line = trimCR(line)
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = trimOWS(line)
	if len(line) == 0 || len(line) > 15 {
		return 0, false
	}
	var v int64
	for _, c := range line {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | int64(d)
	}
	return v, true
}

// equalFold reports whether b equals the lower-case ASCII s, ignoring case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		if lower(b[i]) != s[i] {
			return false
		}
	}
	return true
}

func hasSuffixFold(b []byte, s string) bool {
	return len(b) >= len(s) && equalFold(b[len(b)-len(s):], s)
}

func containsFold(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		if equalFold(b[i:i+len(s)], s) {
			return true
		}
	}
	return false
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
