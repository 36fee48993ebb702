package loadgen

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/genhealth"
)

// loop is one worker: a goroutine running an event loop over its share of the
// connections, with its own level-triggered epoll set and latency histogram.
//
// Why not a goroutine per connection on Go's netpoller: that costs a goroutine switch and
// an extra read (the one that finds nothing and parks) per exchange, about 1.7 times the
// CPU per request of wrk on the same exchange. Waiting on a private epoll set through
// Go's own poller (the set's descriptor is itself pollable) keeps the idle thread in the
// scheduler, where the runtime leaves it alone, instead of in a blocking epoll_wait,
// which invites the runtime to hand its P to another thread on every wait.
type loop struct {
	e      *engine
	sa     unix.Sockaddr   // the target, this loop's own copy: unix.Connect writes into it
	bind   []unix.Sockaddr // the source addresses (engine.bind), its own copies likewise
	lo     int             // id of conns[0]
	conns  []*conn         // ids lo, lo+1, ...
	active int             // connections not finished

	// The latencies of the interval now being recorded (interval secN of the run, which
	// ends at secEnd). The loop itself swaps it for an empty one at the first turn past
	// secEnd and hands the full one to the controller (secs; histograms come back on
	// free), so that recording takes neither a lock nor an allocation.
	sec     *hdrhistogram.Histogram
	secN    int
	secEnd  int64
	secs    chan secHist
	free    chan *hdrhistogram.Histogram
	backlog []secHist // full intervals secs had no room for yet

	ep     int      // the epoll set
	epf    *os.File // ep, registered with Go's poller
	rc     syscall.RawConn
	stopFD int // eventfd in the set; the controller writes to it to end the loop
	events []unix.EpollEvent
	nev    int
	poll   func(fd uintptr) bool
	dl     int64 // deadline set on epf; 0 none, -1 expired

	pending, spare []*conn // connections waiting to connect again
	retryMin       int64   // earliest retryAt in pending
	nextCheck      int64   // next timeout check
	checkEvery     int64

	// The first connects: conns[opened:] have not yet made theirs; conns[j] is at position
	// j·stride + order of the run's opening order (engine.openAt).
	opened, order, stride int

	// Open loop: the next request to fall due among this loop's connections is request
	// curJ of connection curID.
	curID int
	curJ  int64

	// The generator's verdict: this loop's send lags and connect() times (genhealth), and
	// when the loop last asked to wake.
	lag, connects  *genhealth.Recorder
	asked, yielded int64
}

// copySockaddr returns a copy of sa. x/sys/unix marshals a Sockaddr into a buffer inside
// the value on every Connect, so loops on different threads must not share one.
func copySockaddr(sa unix.Sockaddr) unix.Sockaddr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		c := *a
		return &c
	case *unix.SockaddrInet6:
		c := *a
		return &c
	}
	return sa
}

// stopEvent marks the stop eventfd's epoll events; connections use their index.
const stopEvent = -1

func newLoop(e *engine, lo, hi int) (*loop, error) {
	l := &loop{
		e: e, sa: copySockaddr(e.sockaddr), lo: lo, active: hi - lo, sec: newHistogram(),
		secs: make(chan secHist, 4), free: make(chan *hdrhistogram.Histogram, 4),
		events:     make([]unix.EpollEvent, min(hi-lo+1, 512)),
		checkEvery: int64(min(max(e.cfg.Timeout/10, 5*time.Millisecond), 500*time.Millisecond)),
		curID:      lo,
		retryMin:   math.MaxInt64,
		stride:     1,
	}
	for _, sa := range e.bind {
		l.bind = append(l.bind, copySockaddr(sa))
	}
	for id := lo; id < hi; id++ {
		l.conns = append(l.conns, newConn(l, id))
	}
	var err error
	if l.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("create epoll set: %w", err)
	}
	if l.stopFD, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		unix.Close(l.ep)
		return nil, fmt.Errorf("create eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: stopEvent}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, l.stopFD, &ev); err != nil {
		l.release()
		return nil, fmt.Errorf("watch eventfd: %w", err)
	}
	// A non-blocking descriptor handed to os.NewFile joins Go's poller, so that waiting
	// for the set to have events parks this goroutine instead of blocking a thread.
	if err := unix.SetNonblock(l.ep, true); err != nil {
		l.release()
		return nil, fmt.Errorf("set epoll non-blocking: %w", err)
	}
	l.epf = os.NewFile(uintptr(l.ep), "epoll")
	if l.rc, err = l.epf.SyscallConn(); err != nil {
		l.release()
		return nil, fmt.Errorf("poll epoll set: %w", err)
	}
	l.poll = l.pollOnce
	return l, nil
}

// release closes the loop's descriptors once it has ended.
func (l *loop) release() {
	if l.epf != nil {
		l.epf.Close()
	} else {
		unix.Close(l.ep)
	}
	unix.Close(l.stopFD)
}

// stop wakes the loop so that it sees e.stopped.
func (l *loop) stop() {
	one := uint64(1)
	unix.Write(l.stopFD, (*[8]byte)(unsafe.Pointer(&one))[:])
}

// run owns the loop's connections until the run stops, or (with Amount) until none has
// anything left to send.
func (l *loop) run() {
	defer l.e.wg.Done()
	defer l.closeConns()
	e := l.e
	now := e.now()
	l.nextCheck = now + l.checkEvery
	l.secEnd = e.t0 + int64(e.cfg.IntervalLength)
	if c := l.conns[0]; c.fd >= 0 { // the first connection, made by start
		c.tried = true
		c.opened(now)
		l.opened = 1
	}
	l.open(now)
	for !e.stopped.Load() && l.active > 0 {
		if err := l.wait(); err != nil {
			return
		}
		if e.stall != nil {
			e.stall()
		}
		now = e.now()
		if now >= l.secEnd {
			l.rotate(now)
		}
		if now-l.yielded > int64(time.Millisecond) {
			// A busy loop finds events at every turn and never parks; with one P (-w 1) the
			// process's other goroutines, the controller and the hiccup probe, would wait
			// for the runtime's 10 ms preemption, and the probe would blame the generator
			// for its own scheduling.
			runtime.Gosched()
			l.yielded = now
		}
		if l.asked <= now {
			// The loop's own lateness: it asked to wake at l.asked (a request due, a retry,
			// a timeout check) and runs only now. It goes with the send lags: in open loop the
			// request due then goes out this late, whatever its connection's pipeline says.
			l.lag.Record(time.Duration(now - l.asked))
		}
		for _, ev := range l.events[:l.nev] {
			if ev.Fd == stopEvent {
				return
			}
			l.conns[ev.Fd].event(ev.Events, now)
		}
		if l.opened < len(l.conns) {
			l.open(now)
		}
		if e.rate {
			l.advance(now)
		}
		if len(l.pending) > 0 && l.retryMin <= now {
			l.reconnect(now)
		}
		if now >= l.nextCheck {
			timeout := int64(e.cfg.Timeout)
			for _, c := range l.conns {
				c.checkTimeout(now, timeout)
			}
			l.nextCheck = now + l.checkEvery
		}
		if e.amount && e.budget.Load() <= 0 {
			l.finishIdle()
		}
	}
}

// open makes the first connects whose time has come.
func (l *loop) open(now int64) {
	for l.opened < len(l.conns) && l.e.openAt(l.opened*l.stride+l.order) <= now {
		l.conns[l.opened].connect(now)
		l.opened++
	}
}

// finishIdle finishes the connections with nothing in flight once the Amount is spent:
// in open loop a connection waiting for its next due time hears nothing more, and one
// not yet opened has nothing to do.
func (l *loop) finishIdle() {
	for ; l.opened < len(l.conns); l.opened++ {
		l.conns[l.opened].finish()
	}
	for _, c := range l.conns {
		if !c.done && c.state == csOpen && c.fly == 0 {
			c.finish()
		}
	}
}

func (l *loop) closeConns() {
	for _, c := range l.conns {
		c.closeFD()
	}
}

// wait returns when the set has events (in l.events[:l.nev]) or the next timer is due.
func (l *loop) wait() error {
	at := l.nextCheck
	if len(l.pending) > 0 {
		at = min(at, l.retryMin)
	}
	if l.opened < len(l.conns) {
		at = min(at, l.e.openAt(l.opened*l.stride+l.order))
	}
	if l.e.rate && l.cursorLive() {
		at = min(at, l.e.dueAt(l.curID, l.curJ))
	}
	l.asked = at
	if at != l.dl {
		if err := l.epf.SetReadDeadline(l.e.base.Add(time.Duration(at))); err != nil {
			return err
		}
		l.dl = at
	}
	l.nev = 0
	err := l.rc.Read(l.poll)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		l.dl = -1
		return nil
	}
	return err
}

// pollOnce collects the set's events without blocking; false makes the poller wait.
func (l *loop) pollOnce(fd uintptr) bool {
	n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&l.events[0])),
		uintptr(len(l.events)), 0, 0, 0)
	if errno != 0 {
		return false
	}
	l.nev = int(n)
	return n > 0
}

// watch registers a connection's socket for events, or changes them.
func (l *loop) watch(c *conn, events uint32, op int) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(c.id - l.lo)}
	return unix.EpollCtl(l.ep, op, c.fd, &ev)
}

// retry schedules a connect at time at.
func (l *loop) retry(c *conn, at int64) {
	c.retryAt = at
	l.pending = append(l.pending, c)
	l.retryMin = min(l.retryMin, at)
}

// reconnect connects the pending connections whose time has come.
func (l *loop) reconnect(now int64) {
	todo := l.pending
	l.pending, l.retryMin = l.spare[:0], math.MaxInt64
	for _, c := range todo {
		if c.retryAt <= now {
			c.connect(now) // may add c to l.pending again
		} else {
			l.retry(c, c.retryAt)
		}
	}
	l.spare = todo[:0]
}

// cursorLive reports whether requests are still to fall due (not, with Amount, once the
// budget is spent; not, in open loop, after the run's duration).
func (l *loop) cursorLive() bool {
	if l.e.rate && l.e.dueAt(l.curID, l.curJ) > l.e.stopAt {
		return false
	}
	return !l.e.amount || l.e.budget.Load() > 0
}

// advance lets every request due by now go out, connection by connection; a
// connection whose pipeline is full sends its due requests when responses make room.
func (l *loop) advance(now int64) {
	e := l.e
	for l.cursorLive() && e.dueAt(l.curID, l.curJ) <= now {
		l.conns[l.curID-l.lo].send(now)
		l.curID++
		if l.curID == l.lo+len(l.conns) {
			l.curID = l.lo
			l.curJ++
		}
	}
}

// record adds a latency (ns) to the loop's interval histogram, in microseconds.
func (l *loop) record(ns int64) {
	us := min(max((ns+500)/1000, minLatency), maxLatency)
	l.sec.RecordValue(us)
	if f := l.e.onRecord; f != nil {
		f(us)
	}
}

// secHist is one loop's histogram of interval n; next is the interval the loop has moved
// on to (those before it are complete as far as this loop goes).
type secHist struct {
	n, next int
	h       *hdrhistogram.Histogram // nil: the interval was empty
}

// rotate ends the loop's interval: the responses seen from now on belong to the interval
// now falls in. Once per interval, never per request.
func (l *loop) rotate(now int64) {
	e := l.e
	n := int((now - e.t0) / int64(e.cfg.IntervalLength))
	done := secHist{n: l.secN, next: n}
	if l.sec.TotalCount() > 0 {
		done.h = l.sec
		select {
		case l.sec = <-l.free:
		default:
			l.sec = newHistogram()
		}
	}
	l.secN, l.secEnd = n, e.t0+int64(n+1)*int64(e.cfg.IntervalLength)
	l.backlog = append(l.backlog, done)
	sent := 0 // as many as the controller takes now; the rest wait for the next second
send:
	for _, s := range l.backlog {
		select {
		case l.secs <- s:
			sent++
		default:
			break send
		}
	}
	l.backlog = append(l.backlog[:0], l.backlog[sent:]...)
}
