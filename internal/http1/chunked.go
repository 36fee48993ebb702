package http1

import "bytes"

// maxChunkLine bounds a chunk-size line (with its extensions); trailer lines are bounded
// like header lines, by MaxHeaderBytes.
const maxChunkLine = 1024

// Where a chunkDecoder is in the body.
const (
	ckSize    uint8 = iota // at a chunk-size line
	ckData                 // in a chunk's data
	ckDataEnd              // at the CRLF after a chunk's data
	ckTrailer              // in the trailer section, up to its empty line
)

// chunkDecoder decodes a chunked body (RFC 9112 7.1) in place and resumably: each chunk's
// data is moved down over the framing before it, so the decoded body is b[:dec] and the
// input still to decode starts at b[enc:], where b is the buffer from the body's start on.
// Its state survives between reads, so each input byte is looked at a bounded number of
// times however the body is split.
type chunkDecoder struct {
	dec, enc int
	line     int // where the search for the end of the current line resumes
	left     int // data still to come in the current chunk
	phase    uint8
}

// decode goes on decoding b, the body's input so far, adding what it passes over to work.
// It reports whether the body (with its trailer section) is complete.
func (d *chunkDecoder) decode(b []byte, limit, lineLimit int, work *int) (bool, *protoError) {
	for {
		switch d.phase {
		case ckData:
			k := min(d.left, len(b)-d.enc)
			if d.dec != d.enc {
				copy(b[d.dec:], b[d.enc:d.enc+k])
			}
			*work += k
			d.dec, d.enc, d.left = d.dec+k, d.enc+k, d.left-k
			if d.left > 0 {
				return false, nil
			}
			d.phase = ckDataEnd
		case ckDataEnd:
			if len(b)-d.enc < 2 {
				return false, nil
			}
			if b[d.enc] != '\r' || b[d.enc+1] != '\n' {
				return false, errBadRequest // a bare LF, or data longer than its size
			}
			d.enc += 2
			d.line = d.enc
			d.phase = ckSize
		default: // a line: ckSize or ckTrailer
			maxLine := lineLimit
			if d.phase == ckSize {
				maxLine = maxChunkLine
			}
			d.line = max(d.line, d.enc)
			i := bytes.IndexByte(b[d.line:], '\n')
			if i < 0 {
				*work += len(b) - d.line
				d.line = len(b)
				if len(b)-d.enc > maxLine {
					return false, errBadRequest
				}
				return false, nil
			}
			*work += i + 1
			end := d.line + i
			if end-d.enc > maxLine {
				return false, errBadRequest // as it is when the line comes in parts
			}
			line := b[d.enc:end]
			d.enc, d.line = end+1, end+1
			if len(line) == 0 || line[len(line)-1] != '\r' {
				return false, errBadRequest // a line ended by a bare LF
			}
			line = line[:len(line)-1]
			*work += len(line)
			if d.phase == ckTrailer {
				if len(line) == 0 {
					return true, nil
				}
				if !isTrailerField(line) {
					return false, errBadRequest
				}
				continue
			}
			size, ok := parseChunkSize(line)
			if !ok {
				return false, errBadRequest
			}
			if size == 0 {
				d.phase = ckTrailer
				continue
			}
			if size > int64(limit-d.dec) {
				return false, errBodyTooLarge
			}
			d.left, d.phase = int(size), ckData
		}
	}
}

// parseChunkSize parses a chunk-size line without its CRLF: 1*HEXDIG (at most 8), then
// nothing but chunk extensions, which are checked and ignored.
func parseChunkSize(line []byte) (int64, bool) {
	var n int64
	i := 0
	for ; i < len(line); i++ {
		c := line[i]
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return n, i > 0 && isChunkExt(line[i:])
		}
		if i == 8 {
			return 0, false
		}
		n = n<<4 | int64(c)
	}
	return n, i > 0
}

// isChunkExt reports whether b is chunk extensions (RFC 9112 7.1.1):
// *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] ). Whitespace is allowed
// only where BWS is: "5 " is not a chunk size.
func isChunkExt(b []byte) bool {
	for len(b) > 0 {
		b = skipWS(b)
		if len(b) == 0 || b[0] != ';' {
			return false
		}
		b = skipWS(b[1:])
		n := tokenLen(b)
		if n == 0 {
			return false
		}
		b = b[n:]
		if r := skipWS(b); len(r) > 0 && r[0] == '=' {
			b = skipWS(r[1:])
			if len(b) > 0 && b[0] == '"' {
				n = quotedLen(b)
			} else {
				n = tokenLen(b)
			}
			if n == 0 {
				return false
			}
			b = b[n:]
		}
	}
	return true
}

// isTrailerField reports whether line is a well-formed field line; trailer fields are
// checked as header fields are, then ignored.
func isTrailerField(line []byte) bool {
	colon := bytes.IndexByte(line, ':')
	return colon > 0 && isToken(line[:colon]) && isFieldValue(line[colon+1:])
}

func skipWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// tokenLen is the length of the token b starts with.
func tokenLen(b []byte) int {
	n := 0
	for n < len(b) && tokenChars[b[n]] {
		n++
	}
	return n
}

// quotedLen is the length of the quoted-string (RFC 9110 5.6.4) b starts with, 0 if it
// is none.
func quotedLen(b []byte) int {
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i++; i == len(b) || b[i] < ' ' && b[i] != '\t' || b[i] == 0x7f {
				return 0
			}
		case c < ' ' && c != '\t' || c == 0x7f:
			return 0
		}
	}
	return 0
}
