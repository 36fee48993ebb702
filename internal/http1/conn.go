package http1

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Connection states, for Shutdown to find the connections that wait for a request.
const (
	stateActive int32 = iota
	stateIdle
	stateWoken
)

// waitExpired marks a conn's waitBy once its wait was cut short (by the reaper or by
// Shutdown), which set a read deadline in the past that the conn must clear.
const waitExpired = -1

const (
	initialBuf = 4 << 10
	// lingerTimeout and lingerBytes bound how long a refused client's unread input is
	// drained before the close, so the error response is not destroyed by a TCP reset.
	lingerTimeout = time.Second
	lingerBytes   = 256 << 10
)

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

type conn struct {
	srv   *Server
	nc    net.Conn
	raw   *rawIO // nc's descriptor, nil where it has none
	state atomic.Int32

	buf  []byte // read buffer; buf[r:w] is unparsed input
	r, w int
	scan int // where the search for the end of the head resumes
	out  []byte
	outP *[]byte

	// x holds the request being parsed and its response: the connection's own on the
	// goroutine transport (made at its first request), borrowed from the loop while a
	// request is parsed or answered on the loop transport, so that an idle connection
	// holds none (a Request is ~5 KB: its header table).
	x            *exchange
	sentContinue bool
	// next and keep are where the request being answered ends and whether the connection
	// stays open after it, kept from parse for finish (which may run later, see deferred).
	next int
	keep bool

	// The loop transport's state (loop.go); unused on the goroutine transport.
	lp                     *loop
	fd                     int
	woff                   int    // out[:woff] is written
	events                 uint32 // the epoll interest registered now
	gen                    int32  // the loop's number for this connection, carried in its epoll events
	due                    int64  // when the current wait ends (monoNow); 0: none
	busy                   bool   // a deferred request's handler runs on its own goroutine
	dead                   bool   // closed (or hung up) while busy: close when the handler returns
	closeAfter, lingerThen bool   // after the queued output: close, or linger then close
	lingering              bool
	lingerLeft             int

	// waitBy is when the read the conn waits in must end (monotonic ns, see monoNow): the
	// idle or the request deadline, enforced by the server's reaper (see Server.reap)
	// instead of a runtime timer per connection. 0: not waiting; waitExpired: cut short.
	waitBy atomic.Int64
	reqBy  int64      // the current request's deadline, from its first partial read; 0: none
	dlMu   sync.Mutex // orders setting a past read deadline (expire) and clearing it
	wdlAt  time.Time  // write deadline, for connections without a descriptor (see rawIO)

	// body is the request whose head is parsed and whose body is still arriving.
	body pending
	// scanned counts the input bytes the parser passed over, for the test that a request
	// trickled in many small reads costs about what it costs in one (TestTrickledBodyWork).
	scanned int
}

// pending is a request whose head is parsed and whose body is still arriving: the next read
// resumes the body where the last one stopped, instead of parsing the head and decoding the
// body from the start again (quadratic in the number of reads). Its offsets are from c.r,
// so they survive makeRoom moving the input.
type pending struct {
	at      int // where the body starts, from c.r; 0: no request pending
	cl      int64
	chunked bool
	keep    bool
	ck      chunkDecoder
}

// outcome of parsing the buffered input.
type outcome int

const (
	needMore outcome = iota
	served           // a request was answered; the connection stays open
	closeNow         // the last response is queued; close after flushing
	// deferred: the request is complete but its handler may block (see Blocker); the
	// loop runs it on a goroutine and calls finish when it returns. Only the loop
	// transport gets it.
	deferred
)

// exchange is one request and its response.
type exchange struct {
	req  Request
	resp Response
}

// protoError is a request we refuse at the protocol level: answer and close.
type protoError struct {
	status int
	msg    string
}

var (
	errBadRequest   = &protoError{400, "bad request"}
	errHeadTooLarge = &protoError{431, "request header fields too large"}
	errBodyTooLarge = &protoError{413, "request body too large"}
	errExpectation  = &protoError{417, "expectation failed"}
	errVersion      = &protoError{505, "http version not supported"}
)

func (c *conn) serve() {
	s := c.srv
	defer func() {
		if v := recover(); v != nil {
			s.log().Error("connection panicked", zap.Any("panic", v))
		}
		c.nc.Close()
		c.releaseOut()
		s.untrack(c)
	}()
	c.buf = make([]byte, initialBuf)
	for {
		for c.r < c.w {
			res, perr := c.parse()
			if perr != nil {
				c.fail(perr)
				return
			}
			if res == needMore {
				break
			}
			if res == closeNow {
				c.flush()
				return
			}
			if len(c.out) >= flushThreshold && !c.flush() {
				return
			}
		}
		if len(c.out) > 0 && !c.flush() {
			return
		}
		partial := c.r < c.w
		if !c.read(partial) {
			return
		}
	}
}

// read waits for more input. It returns false when the connection should close.
func (c *conn) read(partial bool) bool {
	s := c.srv
	if !partial {
		c.r, c.w, c.scan = 0, 0, 0
		c.releaseOut()
		if cap(c.buf) > initialBuf {
			c.buf = make([]byte, initialBuf)
		}
	} else if c.w == len(c.buf) {
		if !c.makeRoom() {
			c.fail(errBodyTooLarge)
			return false
		}
	}
	grace := false
	if partial {
		if c.reqBy == 0 {
			c.reqBy = monoNow() + int64(s.readTO())
		}
		c.waitBy.Store(c.reqBy)
	} else {
		c.reqBy = 0
		c.waitBy.Store(monoNow() + int64(s.idle()))
		// Publish "idle" after the deadline and before checking closing: either Shutdown
		// sees idle and wakes us, or we see closing and leave.
		c.state.Store(stateIdle)
		if s.closing.Load() {
			// Draining: a request may already be on its way (the client cannot know we
			// are stopping); wait IdleGrace for it, then close.
			if s.IdleGrace <= 0 {
				c.waitBy.Store(0)
				return false
			}
			c.waitBy.Store(0)
			c.dlMu.Lock()
			if c.state.Load() == stateIdle { // not woken by Shutdown already
				c.nc.SetReadDeadline(time.Now().Add(s.IdleGrace))
			}
			c.dlMu.Unlock()
			grace = true
		}
	}
	var n int
	var err error
	if c.raw != nil {
		n, err = c.raw.read(c.buf[c.w:])
	} else {
		n, err = c.nc.Read(c.buf[c.w:])
	}
	expired := c.waitBy.Swap(0) == waitExpired
	woken := !partial && !c.state.CompareAndSwap(stateIdle, stateActive)
	if expired || woken || grace {
		// A read deadline was set (in the past, or IdleGrace's): clear it, so input that
		// raced with it is still read; the request's own deadline is the reaper's again.
		c.dlMu.Lock()
		c.nc.SetReadDeadline(time.Time{})
		c.dlMu.Unlock()
	}
	if woken {
		// Woken by Shutdown. Input that raced with it is still answered (with
		// "Connection: close").
		c.state.Store(stateActive)
		if n == 0 {
			return false
		}
	}
	c.w += n
	if err != nil && n == 0 {
		if partial && isTimeout(err) {
			c.fail(&protoError{408, "request timeout"})
		}
		return false
	}
	return true
}

// expire cuts short the read the conn waits in if that wait's deadline is still by (the
// conn may have moved on since the reaper looked). The read returns a timeout.
func (c *conn) expire(by int64) {
	c.dlMu.Lock()
	if c.waitBy.CompareAndSwap(by, waitExpired) {
		c.nc.SetReadDeadline(aLongTimeAgo)
	}
	c.dlMu.Unlock()
}

// aLongTimeAgo is a deadline in the past: it makes a waiting read return at once.
var aLongTimeAgo = time.Unix(1, 0)

// monoNow is the monotonic clock in nanoseconds since the process started.
func monoNow() int64 { return int64(time.Since(epoch)) }

var epoch = time.Now()

func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// makeRoom frees space at the end of the read buffer: by moving the unparsed input to the
// front, by dropping the framing a chunked body's decoding left behind, or by growing the
// buffer up to what one maximal request needs.
func (c *conn) makeRoom() bool {
	if c.r > 0 {
		n := copy(c.buf, c.buf[c.r:c.w])
		c.scan -= c.r
		c.r, c.w = 0, n
		return true
	}
	if d := &c.body.ck; c.body.chunked && d.enc > d.dec {
		b := c.buf[c.r+c.body.at : c.w]
		gap := d.enc - d.dec
		copy(b[d.dec:], b[d.enc:])
		c.w -= gap
		d.enc, d.line = d.dec, d.line-gap
		return true
	}
	limit := c.srv.maxHeader() + c.srv.maxBody() + initialBuf
	if len(c.buf) >= limit {
		return false
	}
	nb := make([]byte, min(2*len(c.buf), limit))
	copy(nb, c.buf[:c.w])
	c.buf = nb
	return true
}

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

// runHandler runs the handler on the parsed request; a panic is answered 500 and closes.
func (c *conn) runHandler() {
	s := c.srv
	w := &c.x.resp
	w.reset()
	defer func() {
		if v := recover(); v != nil {
			s.log().Error("handler panicked", zap.Any("panic", v), zap.ByteString("path", c.x.req.Path))
			w.reset()
			w.Error(500, "internal server error")
			w.Close = true
		}
	}()
	s.Handler.ServeHTTP1(w, &c.x.req)
}

// finish queues the response of the request runHandler answered and moves past it. Whether
// the connection stays open is decided after the handler, so a request in flight during
// Shutdown (or while SetKeepAlive(false)) is answered with "Connection: close".
func (c *conn) finish() outcome {
	keepAlive := c.keep
	if c.x.resp.Close || c.srv.closing.Load() || c.srv.noKeepAlive.Load() {
		keepAlive = false
	}
	if c.out == nil {
		c.outP = bufPool.Get().(*[]byte)
		c.out = (*c.outP)[:0]
	}
	c.appendResponse(keepAlive, string(c.x.req.Method) == "HEAD")
	c.r, c.scan, c.sentContinue = c.next, c.next, false
	c.body = pending{}
	c.reqBy = 0 // the next request gets its own ReadTimeout
	if !keepAlive {
		return closeNow
	}
	return served
}

func (c *conn) appendResponse(keepAlive, head bool) {
	s := c.srv
	w := &c.x.resp
	status := w.Status
	if status == 0 {
		status = 200
	}
	out := statusLine(c.out, status)
	if status != 204 && status != 304 {
		ct := w.ContentType
		if ct == "" {
			ct = "application/json"
		}
		out = append(out, "Content-Type: "...)
		out = append(out, ct...)
		out = append(out, "\r\nContent-Length: "...)
		out = strconv.AppendInt(out, int64(len(w.Body)), 10)
		out = append(out, "\r\n"...)
	}
	out = append(out, s.dateHeader(time.Now())...)
	out = append(out, w.header...)
	if !keepAlive {
		out = append(out, "Connection: close\r\n"...)
	} else if c.x.req.Minor == 0 {
		out = append(out, "Connection: keep-alive\r\n"...)
	}
	out = append(out, "\r\n"...)
	if !head && status != 204 && status != 304 {
		out = append(out, w.Body...)
	}
	c.out = out
	if !w.Probe {
		s.requests.Add(1)
	}
}

// flush writes the queued responses. It returns false when the connection is dead.
func (c *conn) flush() bool {
	if len(c.out) == 0 {
		return true
	}
	if c.lp != nil {
		// The loop never waits: what the socket does not take now stays queued, and the
		// loop goes on when epoll says there is room (see loop.advance).
		return c.lp.write(c)
	}
	var err error
	if c.raw != nil {
		_, err = c.raw.write(c.out, c.srv.writeTO())
	} else {
		now := time.Now()
		if wt := c.srv.writeTO(); c.wdlAt.Sub(now) < wt/2 {
			c.wdlAt = now.Add(wt)
			c.nc.SetWriteDeadline(c.wdlAt)
		}
		_, err = c.nc.Write(c.out)
	}
	c.out = c.out[:0]
	return err == nil
}

func (c *conn) releaseOut() {
	if c.outP == nil {
		c.out = nil
		return
	}
	if cap(c.out) <= 256<<10 {
		*c.outP = c.out[:0]
		bufPool.Put(c.outP)
	}
	c.out, c.outP = nil, nil
}

// fail answers a refused request and closes the connection without a reset: the write side
// is shut first and the client's unread input drained for a moment, else the kernel would
// answer that input with a RST that can destroy our response before the client reads it.
func (c *conn) fail(perr *protoError) {
	if perr.status != 0 {
		c.queueError(perr)
		if !c.flush() {
			return
		}
	}
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		c.nc.SetReadDeadline(time.Now().Add(lingerTimeout))
		io.CopyN(io.Discard, c.nc, lingerBytes)
	}
}

// queueError queues the answer to a refused request.
func (c *conn) queueError(perr *protoError) {
	if c.out == nil {
		c.outP = bufPool.Get().(*[]byte)
		c.out = (*c.outP)[:0]
	}
	if c.x == nil {
		c.x = new(exchange)
	}
	c.x.req.Minor = 1
	c.x.req.Method = nil
	c.x.resp.reset()
	c.x.resp.Error(perr.status, perr.msg)
	c.appendResponse(false, false)
}

// wakeIfIdle makes a connection that waits for its next request return from its read, so
// it can close. A busy connection closes by itself after its current responses.
func (c *conn) wakeIfIdle() {
	c.dlMu.Lock()
	if c.state.CompareAndSwap(stateIdle, stateWoken) {
		c.nc.SetReadDeadline(aLongTimeAgo)
	}
	c.dlMu.Unlock()
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
