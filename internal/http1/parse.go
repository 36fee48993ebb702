package http1

import "bytes"

// parse answers the first request in buf[r:w] if it is complete.
func (c *conn) parse() (outcome, *protoError) {
	s := c.srv
	if c.x == nil {
		c.x = new(exchange)
	}
	req := &c.x.req
	resumed := c.body.at > 0
	var headEnd int
	if resumed {
		headEnd = c.r + c.body.at
	} else {
		var res outcome
		var perr *protoError
		if headEnd, res, perr = c.findHead(); headEnd < 0 {
			return res, perr
		}
		h, perr := c.parseHead(req, c.buf[c.r:headEnd])
		if perr != nil {
			return 0, perr
		}
		if h.cl > int64(s.maxBody()) {
			return 0, errBodyTooLarge
		}
		if h.expect != nil {
			if !equalFold(h.expect, "100-continue") {
				return 0, errExpectation
			}
			hasBody := h.cl > 0 || h.chunked
			if hasBody && req.Minor == 1 && !c.sentContinue && c.w-headEnd < max(int(h.cl), 1) {
				// Responses to earlier pipelined requests go first, then exactly one 100.
				c.out = append(c.out, "HTTP/1.1 100 Continue\r\n\r\n"...)
				if !c.flush() {
					return 0, &protoError{} // the write failed: just close
				}
				c.sentContinue = true
			}
		}
		c.body = pending{at: headEnd - c.r, cl: h.cl, chunked: h.chunked, keep: h.keep}
	}

	// The body.
	var body []byte
	end := headEnd
	switch cl := c.body.cl; {
	case c.body.chunked:
		d := &c.body.ck
		done, perr := d.decode(c.buf[headEnd:c.w], s.maxBody(), s.maxHeader(), &c.scanned)
		if perr != nil {
			return 0, perr
		}
		if !done {
			return needMore, nil
		}
		body = c.buf[headEnd : headEnd+d.dec]
		end = headEnd + d.enc
	case cl > 0:
		if int64(c.w-headEnd) < cl {
			if need := headEnd - c.r + int(cl); need > len(c.buf) {
				// Grow now so the whole body fits; the limits above bound need.
				nb := make([]byte, need)
				n := copy(nb, c.buf[c.r:c.w])
				c.scan -= c.r
				c.buf, c.r, c.w = nb, 0, n
			}
			return needMore, nil
		}
		body = c.buf[headEnd : headEnd+int(cl)]
		end = headEnd + int(cl)
	}
	if resumed {
		// The body came in later reads: point the request into the buffer as it is now
		// (and, on the loop transport, into the exchange lent now). The head is the same
		// bytes, so it parses as it did.
		c.parseHead(req, c.buf[c.r:headEnd])
	}
	req.Body = body

	c.next, c.keep = end, c.body.keep
	c.body = pending{}
	if c.lp != nil && c.lp.mayBlock(req) {
		return deferred, nil
	}
	c.runHandler()
	return c.finish(), nil
}

// findHead finds the end of the head in buf[r:w]: the end of its empty line. Leading empty
// lines are skipped (RFC 9112 2.2). The search resumes where the last one stopped, so a
// head trickled one byte at a time is scanned once. It returns -1 (and what to do) when
// the head is not complete.
func (c *conn) findHead() (int, outcome, *protoError) {
	buf := c.buf[:c.w]
	i := max(c.scan, c.r)
	for {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 0 {
			c.scanned += len(buf) - i
			// Resume at the partial line's last two bytes: enough to tell an empty line
			// ("\r\n") from the end of a longer one.
			c.scan = max(i, len(buf)-2)
			if c.w-c.r > c.srv.maxHeader() {
				return -1, 0, errHeadTooLarge
			}
			return -1, needMore, nil
		}
		c.scanned += j + 1
		end := i + j
		line := buf[i:end]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		if len(line) > 0 {
			i = end + 1
			continue
		}
		if i == c.r {
			c.r = end + 1
			i = c.r
			continue
		}
		if end+1-c.r > c.srv.maxHeader() {
			return -1, 0, errHeadTooLarge
		}
		return end + 1, 0, nil
	}
}

// headInfo is what the head says about the body and the connection.
type headInfo struct {
	cl      int64 // Content-Length; -1: none
	chunked bool
	keep    bool // keep the connection open after the response
	expect  []byte
}

// parseHead parses the request line and header fields of head into req.
func (c *conn) parseHead(req *Request, head []byte) (headInfo, *protoError) {
	c.scanned += len(head)
	req.nh = 0
	req.Body = nil
	line, rest := nextLine(head)
	if perr := parseRequestLine(req, line); perr != nil {
		return headInfo{}, perr
	}
	h := headInfo{cl: -1}
	var (
		teSeen        bool
		hosts         int
		connClose     bool
		connKeepAlive bool
	)
	for {
		line, rest = nextLine(rest)
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return h, errBadRequest // obsolete line folding
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) {
			return h, errBadRequest
		}
		if req.nh == maxHeaders {
			return h, errHeadTooLarge
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		if !isFieldValue(value) {
			return h, errBadRequest // a NUL, a bare CR or another control byte
		}
		req.hdr[req.nh] = field{name, value}
		req.nh++
		switch len(name) {
		case 14:
			if equalFold(name, "content-length") {
				n, ok := parseLength(value)
				if !ok || (h.cl >= 0 && n != h.cl) {
					return h, errBadRequest
				}
				h.cl = n
			}
		case 17:
			if equalFold(name, "transfer-encoding") {
				if teSeen || req.Minor == 0 || !equalFold(value, "chunked") {
					return h, errBadRequest
				}
				teSeen, h.chunked = true, true
			}
		case 10:
			if equalFold(name, "connection") {
				connClose, connKeepAlive = connectionTokens(value, connClose, connKeepAlive)
			}
		case 6:
			if equalFold(name, "expect") {
				h.expect = value
			}
		case 4:
			if equalFold(name, "host") {
				hosts++
			}
		}
	}
	// RFC 9112 3.2: an HTTP/1.1 request without Host, or any with two, is answered 400.
	if hosts > 1 || hosts == 0 && req.Minor == 1 {
		return h, errBadRequest
	}
	if h.chunked && h.cl >= 0 {
		return h, errBadRequest
	}
	h.keep = !connClose && (req.Minor == 1 || connKeepAlive)
	return h, nil
}

func nextLine(b []byte) (line, rest []byte) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return b, nil
	}
	line, rest = b[:i], b[i+1:]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line, rest
}

func parseRequestLine(req *Request, line []byte) *protoError {
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 || !isToken(line[:sp1]) {
		return errBadRequest
	}
	req.Method = line[:sp1]
	rest := line[sp1+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 <= 0 {
		return errBadRequest
	}
	target, version := rest[:sp2], rest[sp2+1:]
	switch string(version) {
	case "HTTP/1.1":
		req.Minor = 1
	case "HTTP/1.0":
		req.Minor = 0
	default:
		if len(version) == 8 && string(version[:5]) == "HTTP/" && isDigit(version[5]) &&
			version[6] == '.' && isDigit(version[7]) {
			return errVersion
		}
		return errBadRequest
	}
	for _, b := range target {
		if b <= ' ' || b == 0x7f {
			return errBadRequest
		}
	}
	if target[0] != '/' {
		// absolute-form (RFC 9112 3.2.2): keep the path. Anything else ("*", authority
		// form) is not for an API server.
		i := bytes.Index(target, []byte("://"))
		if i <= 0 {
			return errBadRequest
		}
		j := bytes.IndexByte(target[i+3:], '/')
		if j < 0 {
			target = []byte("/")
		} else {
			target = target[i+3+j:]
		}
	}
	req.Path, req.Query = target, nil
	if q := bytes.IndexByte(target, '?'); q >= 0 {
		req.Path, req.Query = target[:q], target[q+1:]
	}
	return nil
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// tokenChars marks the bytes allowed in a token (RFC 9110 5.6.2).
var tokenChars = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func isToken(b []byte) bool {
	for _, c := range b {
		if !tokenChars[c] {
			return false
		}
	}
	return len(b) > 0
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

// parseLength accepts only 1*DIGIT: no sign, no spaces inside, no lists, at most 15 digits.
func parseLength(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func connectionTokens(v []byte, closeTok, keepAlive bool) (bool, bool) {
	for len(v) > 0 {
		var tok []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			tok, v = v[:i], v[i+1:]
		} else {
			tok, v = v, nil
		}
		tok = trimOWS(tok)
		switch {
		case equalFold(tok, "close"):
			closeTok = true
		case equalFold(tok, "keep-alive"):
			keepAlive = true
		}
	}
	return closeTok, keepAlive
}

// isFieldValue reports whether v holds no control bytes but HTAB (RFC 9110 5.5): a NUL or
// a bare CR, which some parsers take for the end of a line, is refused, not passed on.
func isFieldValue(v []byte) bool {
	for _, b := range v {
		if b < ' ' && b != '\t' || b == 0x7f {
			return false
		}
	}
	return true
}
