package http1

import (
	"errors"
	"io"
	"net"
	"os"
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
	waited bool       // the goroutine transport's conn waited for a request before: not fresh
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
		wait := s.idle()
		if !c.waited { // a fresh connection's wait for its first request
			wait, c.waited = s.firstTO(), true
		}
		c.waitBy.Store(monoNow() + int64(wait))
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
