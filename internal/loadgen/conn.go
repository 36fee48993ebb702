package loadgen

import (
	"errors"
	"io"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/httpframe"
)

// Reasons a connection ends that are not failures, and failures that are not errnos.
var (
	errServerClose = errors.New("server closed the connection") // after a response, or idle
	errUnsolicited = errors.New("response with no request in flight")
	errTimeout     = errors.New("request timed out")
	errHeadTooLong = errors.New("response head larger than the read buffer")
)

// Connection states.
const (
	csIdle       = iota // no socket: waiting to retry a connect (retryAt), or finished
	csConnecting        // non-blocking connect in progress
	csOpen
)

// conn is one client connection. Its loop owns every field, except the counters the
// controller samples.
type conn struct {
	l  *loop
	id int

	fd      int // -1 when none
	state   uint8
	tried   bool  // a connect was made: the next one is a reconnect
	done    bool  // Amount reached: nothing more to send
	since   int64 // csConnecting: when the connect started
	retryAt int64 // csIdle: when to connect again
	fails   int   // consecutive failed connects
	freeAt  int64 // when the pipeline last had room again (opened, or a response to a full one)

	buf      []byte
	r, n     int // unread bytes are buf[r:n]
	p        httpframe.Parser
	wbuf     []byte // requests not yet accepted by the socket
	outWatch bool   // registered for EPOLLOUT, waiting to write the rest of wbuf

	// In-flight requests, oldest first: a ring of due (latency is measured from it) and
	// sent (timeouts are measured from it) times, capacity Pipelining.
	due, sent []int64
	head, fly int

	codes *[1000]int64 // responses by status code
	wrote int64        // requests written
	tmo   int64        // timeouts
	idx   int64        // open loop: this connection's next request number

	reconnects int64 // connects after the first

	body []byte // Config.CheckBody: the body of the response being read
	bad  int64  // responses CheckBody refused

	// Sampled by the controller while the loop runs.
	responses, bytes, errs atomic.Int64
}

func newConn(l *loop, id int) *conn {
	e := l.e
	c := &conn{
		l: l, id: id, fd: -1,
		buf:   make([]byte, e.cfg.ReadBuffer),
		p:     httpframe.Parser{NoBody: e.head},
		due:   make([]int64, e.cfg.Pipelining),
		sent:  make([]int64, e.cfg.Pipelining),
		codes: new([1000]int64),
	}
	if e.cfg.CheckBody != nil {
		c.p.Body = func(b []byte) { c.body = append(c.body, b...) }
	}
	return c
}

// connect starts a non-blocking connect.
func (c *conn) connect(now int64) {
	e := c.l.e
	if e.amount && e.budget.Load() <= 0 {
		c.finish()
		return
	}
	if c.tried {
		c.reconnects++
	}
	c.tried = true
	if obs := e.onConnect; obs != nil {
		obs(c.id, now)
	}
	fd, err := unix.Socket(e.family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		c.connectFailed(now)
		return
	}
	if c.bindSource(fd) != nil {
		unix.Close(fd)
		c.connectFailed(now)
		return
	}
	// Requests leave as soon as they are written, as every HTTP client does.
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	c.fd = fd
	t0 := e.now()
	err = unix.Connect(fd, c.l.sa)
	c.l.connects.Record(time.Duration(e.now() - t0)) // the kernel's own work: port choice, SYN
	switch err {
	case nil:
		c.opened(now)
	case unix.EINPROGRESS:
		c.state, c.since = csConnecting, now
		if c.l.watch(c, unix.EPOLLOUT, unix.EPOLL_CTL_ADD) != nil {
			c.connectFailed(now)
		}
	default:
		c.connectFailed(now)
	}
}

// connected finishes a connect the loop saw complete.
func (c *conn) connected(now int64) {
	if errno, err := unix.GetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || errno != 0 {
		c.connectFailed(now)
		return
	}
	c.opened(now)
}

func (c *conn) opened(now int64) {
	op := unix.EPOLL_CTL_ADD
	if c.state == csConnecting {
		op = unix.EPOLL_CTL_MOD
	}
	if c.l.watch(c, unix.EPOLLIN, op) != nil {
		c.connectFailed(now)
		return
	}
	c.state, c.fails, c.freeAt = csOpen, 0, now
	c.send(now)
}

// connectFailed counts a failed connect as an error (and, with Amount, as the outcome of
// one request, so that a run against a dead server ends) and schedules a retry.
func (c *conn) connectFailed(now int64) {
	e := c.l.e
	c.closeFD()
	c.errs.Add(1)
	if e.amount {
		e.claim(1)
	}
	c.fails++
	c.l.retry(c, now+int64(min(time.Millisecond<<min(c.fails, 7), 100*time.Millisecond)))
}

// finish ends a connection that has nothing more to do (Amount reached).
func (c *conn) finish() {
	c.closeFD()
	if !c.done {
		c.done = true
		c.l.active--
	}
}

func (c *conn) closeFD() {
	if c.fd >= 0 {
		unix.Close(c.fd) // which also removes it from the epoll set
		c.fd = -1
	}
	c.state, c.outWatch = csIdle, false
}

// event handles what epoll reported for the connection.
func (c *conn) event(ev uint32, now int64) {
	switch c.state {
	case csConnecting:
		c.connected(now)
	case csOpen:
		if ev&unix.EPOLLOUT != 0 && len(c.wbuf) > 0 {
			if err := c.flush(); err != nil {
				c.fail(err, now)
				return
			}
			if len(c.wbuf) == 0 && ev&unix.EPOLLIN == 0 {
				c.send(now)
			}
		}
		if ev&(unix.EPOLLIN|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
			c.readable(now)
		}
	}
}

// readable reads once (the epoll set is level-triggered: what is left is reported again)
// and frames the responses that arrived by now.
func (c *conn) readable(now int64) {
	if c.r == c.n {
		c.r, c.n = 0, 0
	} else if c.n == len(c.buf) {
		if c.r == 0 {
			c.fail(errHeadTooLong, now)
			return
		}
		c.n = copy(c.buf, c.buf[c.r:c.n])
		c.r = 0
	}
	m, errno := rawRead(c.fd, c.buf[c.n:])
	switch {
	case errno == unix.EAGAIN || errno == unix.EINTR:
		return
	case errno != 0:
		c.fail(errno, now)
		return
	case m == 0:
		c.eof(now)
		return
	}
	c.n += m
	c.bytes.Add(int64(m))
	done, err := c.frame(now)
	if done > 0 {
		c.responses.Add(done)
	}
	if err != nil {
		c.fail(err, now)
		return
	}
	c.send(now)
}

// eof handles the server's close: the end of a close-delimited body, an idle keep-alive
// connection closed, or a failure when requests were in flight.
func (c *conn) eof(now int64) {
	switch {
	case c.p.EOF():
		c.complete(now)
		c.responses.Add(1)
		c.fail(errServerClose, now)
	case c.fly == 0 && c.p.Idle() && c.r == c.n:
		c.fail(errServerClose, now)
	default:
		c.fail(io.ErrUnexpectedEOF, now)
	}
}

// frame parses the responses in buf[r:n] that a read at time t completed.
func (c *conn) frame(t int64) (done int64, err error) {
	for c.r < c.n {
		m, ok, err := c.p.Parse(c.buf[c.r:c.n])
		c.r += m
		if err != nil {
			return done, err
		}
		if !ok {
			return done, nil
		}
		if c.fly == 0 {
			return done, errUnsolicited
		}
		c.complete(t)
		done++
		if c.p.Close {
			return done, errServerClose
		}
		c.p.Reset()
	}
	return done, nil
}

// complete records the response to the oldest request in flight, finished at time t.
func (c *conn) complete(t int64) {
	due := c.due[c.head]
	if c.fly == len(c.due) {
		c.freeAt = t
	}
	c.head = (c.head + 1) % len(c.due)
	c.fly--
	c.codes[c.p.Status]++
	if check := c.l.e.cfg.CheckBody; check != nil {
		if check(c.p.ContentEncoding(), c.body) != nil {
			c.bad++
			c.errs.Add(1)
		}
		c.body = c.body[:0]
	}
	c.l.record(t - due)
	if obs := c.l.e.observe; obs != nil {
		obs(c.id, c.p.Status, due)
	}
}

// send writes as many requests as may go now: in closed loop, enough to fill the
// pipeline; in open loop, those already due, up to the pipeline's room. With Amount, a
// connection that has nothing in flight and nothing left to send finishes.
func (c *conn) send(now int64) {
	e := c.l.e
	if c.state != csOpen || len(c.wbuf) > 0 {
		return
	}
	k := len(c.due) - c.fly
	if k == 0 {
		return
	}
	// The loop's clock is when it woke; this write may come later in a busy turn, and its
	// requests' latency starts now.
	ready := now
	now = e.now()
	if e.rate {
		due := 0
		for due < k && e.dueAt(c.id, c.idx+int64(due)) <= now {
			due++
		}
		k = due
	}
	if e.amount && k > 0 {
		k = e.claim(k)
	}
	if k == 0 {
		if c.fly == 0 && e.amount && e.budget.Load() <= 0 {
			c.finish()
		}
		return
	}
	// Send lag, for the generator's verdict: from when this request could first have gone
	// to the write. In open loop that is its due time, or, if the pipeline was full then,
	// when a response made room; the wake-up's lateness counts. In closed loop it is the
	// start of the turn that found the connection free: the kernel gives no time for when a
	// response arrived, so a loop that wakes late shows in the hiccup probe and its CPU
	// share instead, and this lag shows a turn made long by its many connections.
	if e.rate {
		ready = max(e.dueAt(c.id, c.idx), c.freeAt)
	}
	c.l.lag.Record(time.Duration(now - ready))
	pipe := len(c.due)
	for i := range k {
		at := now
		if e.rate {
			at = e.dueAt(c.id, c.idx+int64(i))
		}
		j := (c.head + c.fly) % pipe
		c.due[j], c.sent[j] = at, now
		c.fly++
	}
	c.idx += int64(k)
	c.wrote += int64(k)
	c.wbuf = e.reqs[:k*e.reqLen]
	if err := c.flush(); err != nil {
		c.fail(err, now)
	}
}

// flush writes wbuf; what the socket does not take now waits for EPOLLOUT.
func (c *conn) flush() error {
	m, errno := rawWrite(c.fd, c.wbuf)
	switch {
	case errno == unix.EAGAIN || errno == unix.EINTR:
		m = 0
	case errno != 0:
		return errno
	}
	c.wbuf = c.wbuf[m:]
	if want := len(c.wbuf) > 0; want != c.outWatch {
		c.outWatch = want
		ev := uint32(unix.EPOLLIN)
		if want {
			ev |= unix.EPOLLOUT
		}
		return c.l.watch(c, ev, unix.EPOLL_CTL_MOD)
	}
	return nil
}

// fail closes the connection after a failure or the server's close, settles its
// requests in flight and reconnects. A failure (anything but a close the server
// announced) counts one error, and one timeout for errTimeout, and is the outcome of the
// oldest request in flight; the others were never answered and, with Amount, go back to
// the budget to be sent again.
func (c *conn) fail(err error, now int64) {
	e := c.l.e
	c.closeFD()
	lost := c.fly
	c.fly, c.head, c.r, c.n, c.wbuf = 0, 0, 0, 0, nil
	c.p.Reset()
	c.body = c.body[:0] // a body cut short is no response: not checked
	if e.stopped.Load() {
		return
	}
	if err != errServerClose {
		c.errs.Add(1)
		if err == errTimeout {
			c.tmo++
		}
		if lost > 0 {
			lost--
		}
	}
	if e.amount && lost > 0 {
		e.budget.Add(int64(lost))
	}
	// Reconnect on the loop's next turn rather than from inside this call, which may be
	// deep in a send that a connect would re-enter.
	c.l.retry(c, now)
}

// checkTimeout fails a connection whose oldest request, or whose connect, has waited
// longer than the timeout.
func (c *conn) checkTimeout(now int64, timeout int64) {
	switch c.state {
	case csConnecting:
		if now-c.since > timeout {
			c.connectFailed(now)
		}
	case csOpen:
		if c.fly > 0 && now-c.sent[c.head] > timeout {
			c.fail(errTimeout, now)
		}
	}
}

// rawRead and rawWrite skip the runtime's system call bookkeeping: the socket is
// non-blocking, so neither can block the thread.
// b must not be empty.
func rawRead(fd int, b []byte) (int, syscall.Errno) {
	n, _, errno := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), errno
}

func rawWrite(fd int, b []byte) (int, syscall.Errno) {
	n, _, errno := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), errno
}
