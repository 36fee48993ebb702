package http1

// The loop transport (Server.Transport = TransportLoop).
//
// One loop per GOMAXPROCS (Server.Loops; one in a prefork worker) owns its connections: an
// epoll set of their raw non-blocking descriptors, read only when epoll says data is there.
// A connection between requests is a small struct in the loop's table: no goroutine, no
// stack, no read or write buffer (those come from pools while a request is read or its
// response written), no exchange (the ~5 KB Request with its header table is borrowed
// while a request is parsed). The request is parsed and answered by the same code as on the goroutine
// transport (conn.parse, finish, appendResponse), so framing, limits and the drain are
// the same; only the waiting differs.
//
// The loop's goroutine waits in Go's own netpoller, not in a blocking epoll_wait: the
// epoll descriptor is itself pollable, so the loop reads it through syscall.RawConn, and
// every socket call is a non-blocking raw system call that never hands the P away (see
// rawIO for why that matters in a GOMAXPROCS=1 worker). An idle server's loop is a parked
// goroutine; a busy one parks on purpose every loopYield (100 µs) of work, so that Go's
// scheduler polls the network and runs the goroutines it woke (see yield).
//
// Handlers run inline on the loop, except the requests the Handler's Blocker says may wait
// (the feed's writes, which wait for the batcher's COMMIT or for the write owner): those
// run on a goroutine of their own while the loop leaves their connection out of epoll,
// and come back through an eventfd to be answered. A slow or hostile client never holds
// the loop: a write the socket does not take is finished on EPOLLOUT, and the deadlines
// (idle, request, write, linger) are kept by the loop's timerfd tick, to within one reap
// period as on the goroutine transport.
//
// The loops share the listening socket (the supervisor hands a worker one, at fd 3), each
// with the listener in its epoll set under EPOLLEXCLUSIVE; whichever wakes accepts a batch.
// The kernel does not spread those wake-ups: a burst of new connections (a load generator
// opening its 64..256 keep-alive connections at once) was accepted by one or two loops,
// and one process at GOMAXPROCS=4..12 kept only 1.4 to 2.9 cores busy (16-core host,
// 2026-12-04). So the loop that accepts does not keep what it accepts: each connection goes
// to the loop holding the fewest (itself on a tie), through that loop's queue and eventfd
// (handOff, adopt). Open connections stay even over the loops however they arrive: a
// burst, a trickle, reconnects after "Connection: close". A per-loop SO_REUSEPORT socket
// would spread by the kernel's hash instead, but the worker is handed one socket.
//
// Why not gnet v2 or nbio (both on the module proxy, v2.9.7 and v1.6.8 here): gnet binds
// its own listener from an address and has no way to be handed the socket the supervisor
// passes at fd 3; nbio can adopt net.Conns, but it reads into its own buffers and gives
// them to a callback, so a request split across reads is copied once more into ours, it
// queues writes in its own buffers, and its timers and close paths would have to be taught
// the drain (IdleGrace, Connection: close on requests in flight, the linger after an
// error) that the goroutine transport already keeps. What the transport needs from epoll
// is ~500 lines on golang.org/x/sys/unix, a dependency already; owning them keeps the
// two transports on one parser with one set of tests.

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

const (
	loopEvents   = 256 // events taken per epoll_wait
	loopFreeBufs = 256 // read buffers kept for reuse per loop (1 MiB)
	loopFreeX    = 64  // exchanges kept for reuse per loop
	acceptBatch  = 64  // connections accepted per listener event, so requests are not starved

	// loopYield is how long a loop serves events without parking before it parks once on
	// purpose (yield): a loop that always has work never enters Go's scheduler, so the
	// goroutines the netpoller would wake (the write owner reading its followers' writes,
	// a deferred handler's answer from another process) waited for sysmon's 10 ms poll and
	// preemption. A yield (an eventfd write and read, a pass through the scheduler and its
	// netpoll) took ~3.5 % of a heavy request's CPU in a profile (docs/scaling.md); one
	// every 500 µs made the mix no cheaper.
	loopYield = 100 * time.Microsecond
)

// loopCount is how many loops serve one listener: Server.Loops, else GOMAXPROCS.
func (s *Server) loopCount() int {
	if s.Loops > 0 {
		return s.Loops
	}
	return runtime.GOMAXPROCS(0)
}

// loop is one event loop. Everything in it is touched only by its goroutine, except the
// fields under mu and the atomics, which other goroutines use to wake it.
type loop struct {
	srv     *Server
	blocker Blocker // the Handler as a Blocker, or nil: every request runs inline
	// gen numbers the accepted connections. Each epoll event carries its connection's
	// number beside the descriptor: a connection closed while one batch of events is
	// handled (by the tick, or a deferred request's end) frees its descriptor, an accept
	// later in the batch may reuse it, and the closed connection's own event, still in
	// the batch, must not reach the new one.
	gen int32

	epfd    int
	epFile  *os.File // epfd, registered in Go's netpoller
	epRaw   syscall.RawConn
	evfd    int // eventfd: completions and Shutdown wake the loop
	tfd     int // timerfd: the reap tick
	lnfd    int // the listening socket (shared by the loops); -1 once accepting stopped
	lnArmed bool
	many    bool    // other loops share the listener: EPOLLEXCLUSIVE
	peers   []*loop // every loop of this Serve, this one included: where accepted connections go
	// load is the connections this loop owns or has been handed and not yet adopted:
	// written by the loop that accepts (+1) and by this one (-1 at a close), read by every
	// accepting loop to choose where a connection goes, and by Stats.
	load atomic.Int64

	events  []unix.EpollEvent
	nready  int
	pollErr syscall.Errno
	pollFn  func(fd uintptr) bool
	yieldFn func(fd uintptr) bool
	parked  bool  // poll found nothing: the loop waits in the netpoller
	woke    bool  // yieldFn has parked once
	ranFrom int64 // monoNow when the loop last parked (or yielded)

	conns []*conn // by descriptor
	n     int     // connections open
	busyN int     // deferred handlers running

	now        int64 // monoNow at the current batch
	period     time.Duration
	draining   bool  // Shutdown seen: no accepting; idle connections close after IdleGrace
	pauseUntil int64 // accepting paused (out of memory or descriptors) until then
	backoff    time.Duration
	shed       *shedReserve // shared by the loops of one Serve

	freeBufs [][]byte
	freeX    []*exchange
	scratch  []byte // the linger's discard buffer

	acceptDone chan struct{} // closed when the loop stopped accepting
	acceptErr  error

	mu        sync.Mutex
	completed []*conn // deferred requests whose handlers returned (under mu)
	incoming  []int   // descriptors another loop accepted for this one (under mu)
	ended     bool    // the loop has left run: hand it nothing more (under mu)
	signalled bool    // an eventfd write is pending (under mu)
	force     atomic.Bool
}

// serveLoops is Serve for TransportLoop: it starts the loops on ln's socket and returns
// once they all stopped accepting (after Shutdown, or on a listener error). The loops go
// on serving their connections; Shutdown waits for them.
func (s *Server) serveLoops(ln net.Listener) error {
	lnfd, err := dupListener(ln)
	if err != nil {
		return err
	}
	shed := newShedReserve()
	defer shed.close()
	n := s.loopCount()
	loops := make([]*loop, 0, n)
	for range n {
		l, err := newLoop(s, lnfd, shed, n > 1)
		if err != nil {
			for _, l := range loops {
				l.closeFDs()
			}
			unix.Close(lnfd)
			return err
		}
		loops = append(loops, l)
	}
	for _, l := range loops {
		l.peers = loops
	}
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		for _, l := range loops {
			l.closeFDs()
		}
		unix.Close(lnfd)
		return ErrServerClosed
	}
	s.loops = append(s.loops, loops...)
	s.loopWG.Add(len(loops))
	s.mu.Unlock()
	for _, l := range loops {
		go l.run()
	}
	var first error
	for _, l := range loops {
		<-l.acceptDone
		if l.acceptErr != nil && first == nil {
			first = l.acceptErr
		}
	}
	unix.Close(lnfd)
	if first != nil && !s.closing.Load() {
		return first
	}
	return ErrServerClosed
}

// dupListener returns a duplicate of ln's descriptor for the loops' epoll sets: ln keeps
// its own, which Shutdown closes as on the goroutine transport.
func dupListener(ln net.Listener) (int, error) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("serve loop: listener %T has no descriptor", ln)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("serve loop: listener descriptor: %w", err)
	}
	fd := -1
	var derr error
	if err := rc.Control(func(f uintptr) { fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, fmt.Errorf("serve loop: listener descriptor: %w", err)
	}
	if derr != nil {
		return -1, fmt.Errorf("serve loop: duplicate listener: %w", derr)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("serve loop: listener non-blocking: %w", err)
	}
	return fd, nil
}

func newLoop(s *Server, lnfd int, shed *shedReserve, many bool) (*loop, error) {
	l := &loop{srv: s, lnfd: lnfd, shed: shed, many: many, evfd: -1, tfd: -1, epfd: -1,
		events: make([]unix.EpollEvent, loopEvents), acceptDone: make(chan struct{})}
	l.blocker, _ = s.Handler.(Blocker)
	l.pollFn = l.poll
	l.yieldFn = l.yieldPoll
	var err error
	fail := func(what string, err error) (*loop, error) {
		l.closeFDs()
		return nil, fmt.Errorf("serve loop: %s: %w", what, err)
	}
	if l.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fail("epoll", err)
	}
	if l.evfd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fail("eventfd", err)
	}
	if l.tfd, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC); err != nil {
		return fail("timerfd", err)
	}
	l.period = s.reapPeriod()
	if err := l.setTick(l.period); err != nil {
		return fail("timerfd", err)
	}
	for _, fd := range []int{l.evfd, l.tfd} {
		if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			return fail("epoll add", err)
		}
	}
	if err := l.armListener(); err != nil {
		return fail("epoll add listener", err)
	}
	// The epoll descriptor goes into Go's netpoller: the loop parks there, as a goroutine,
	// when no event is ready.
	if err := unix.SetNonblock(l.epfd, true); err != nil {
		return fail("epoll non-blocking", err)
	}
	l.epFile = os.NewFile(uintptr(l.epfd), "epoll")
	if l.epRaw, err = l.epFile.SyscallConn(); err != nil {
		return fail("epoll poller", err)
	}
	return l, nil
}

func (l *loop) armListener() error {
	ev := uint32(unix.EPOLLIN)
	if l.many {
		ev |= unix.EPOLLEXCLUSIVE // one loop woken per connection, not all of them
	}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, l.lnfd, &unix.EpollEvent{Events: ev, Fd: int32(l.lnfd)}); err != nil {
		return err
	}
	l.lnArmed = true
	return nil
}

func (l *loop) disarmListener() {
	if l.lnArmed {
		unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, l.lnfd, nil)
		l.lnArmed = false
	}
}

func (l *loop) setTick(d time.Duration) error {
	ts := unix.NsecToTimespec(int64(d))
	return unix.TimerfdSettime(l.tfd, 0, &unix.ItimerSpec{Interval: ts, Value: ts}, nil)
}

func (l *loop) closeFDs() {
	l.mu.Lock()
	defer l.mu.Unlock() // wake writes evfd under mu: never to a closed (or reused) number
	if l.epFile != nil {
		l.epFile.Close() // closes epfd
		l.epfd = -1
	}
	for _, fd := range []*int{&l.epfd, &l.evfd, &l.tfd} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

func (l *loop) run() {
	s := l.srv
	defer func() {
		if v := recover(); v != nil {
			s.log().Error("event loop panicked", zap.Any("panic", v))
			l.stopAccepting(fmt.Errorf("event loop: %v", v))
			for _, c := range l.conns {
				if c != nil {
					l.close(c)
				}
			}
		}
		l.stopAccepting(nil)
		l.abandon()
		l.closeFDs()
		s.loopWG.Done()
	}()
	l.now = monoNow()
	l.ranFrom = l.now
	l.checkServer()
	for !(l.draining && l.n == 0 && l.busyN == 0 && l.retire()) {
		l.nready, l.pollErr = 0, 0
		if err := l.epRaw.Read(l.pollFn); err != nil {
			panic(fmt.Sprintf("wait for events: %v", err))
		}
		if l.pollErr != 0 {
			panic(fmt.Sprintf("epoll_wait: %v", l.pollErr))
		}
		l.now = monoNow()
		if l.parked {
			l.ranFrom, l.parked = l.now, false
		}
		for i := range l.nready {
			ev := &l.events[i]
			fd := int(ev.Fd)
			switch fd {
			case l.evfd:
				l.woken()
			case l.tfd:
				var b [8]byte
				syscall.RawSyscall(syscall.SYS_READ, uintptr(l.tfd), uintptr(unsafe.Pointer(&b[0])), 8)
				l.tick()
			case l.lnfd:
				l.accept()
			default:
				if fd < len(l.conns) && l.conns[fd] != nil && l.conns[fd].gen == ev.Pad {
					l.ready(l.conns[fd], ev.Events)
				}
			}
			if monoNow()-l.ranFrom >= int64(loopYield) {
				l.yield()
			}
		}
	}
}

// woken handles what other goroutines asked for: connections handed over, deferred
// requests answered, Shutdown.
func (l *loop) woken() {
	var b [8]byte
	syscall.RawSyscall(syscall.SYS_READ, uintptr(l.evfd), uintptr(unsafe.Pointer(&b[0])), 8)
	l.mu.Lock()
	l.signalled = false
	done := l.completed
	l.completed = nil
	in := l.incoming
	l.incoming = nil
	l.mu.Unlock()
	for _, fd := range in {
		l.adopt(fd)
	}
	for _, c := range done {
		c.busy = false
		l.busyN--
		if c.dead {
			l.release(c)
			continue
		}
		if c.finish() == closeNow {
			c.closeAfter = true
		}
		l.advance(c)
	}
	l.checkServer()
}

// checkServer follows Shutdown: stop accepting, close idle connections after IdleGrace,
// close everything when forced.
func (l *loop) checkServer() {
	s := l.srv
	if l.force.Load() {
		l.draining = true
		l.stopAccepting(nil)
		for _, c := range l.conns {
			if c != nil {
				l.close(c)
			}
		}
		return
	}
	if l.draining || !s.closing.Load() {
		return
	}
	l.draining = true
	l.stopAccepting(nil)
	if s.IdleGrace > 0 {
		// The tick keeps the grace to within a quarter of it.
		l.setTick(min(l.period, max(s.IdleGrace/4, 5*time.Millisecond)))
	}
	for _, c := range l.conns {
		if c != nil && l.isIdle(c) {
			l.idleWhileDraining(c)
		}
	}
}

func (l *loop) isIdle(c *conn) bool {
	return !c.busy && !c.lingering && c.r == c.w && len(c.out) == 0 && !c.closeAfter && !c.lingerThen
}

// idleWhileDraining: an idle connection of a draining server waits IdleGrace for a request
// already on its way (answered with "Connection: close"), then closes.
func (l *loop) idleWhileDraining(c *conn) {
	if l.srv.IdleGrace <= 0 {
		l.close(c)
		return
	}
	if by := l.now + int64(l.srv.IdleGrace); c.due == 0 || by < c.due {
		c.due = by
	}
}

func (l *loop) stopAccepting(err error) {
	if l.lnfd < 0 {
		return
	}
	l.disarmListener()
	l.lnfd = -1
	l.acceptErr = err
	close(l.acceptDone)
}

// tick enforces the deadlines and resumes a paused accept.
func (l *loop) tick() {
	if l.pauseUntil > 0 && l.now >= l.pauseUntil && l.lnfd >= 0 {
		l.pauseUntil = 0
		if err := l.armListener(); err != nil {
			l.stopAccepting(fmt.Errorf("accept: %w", err))
		}
	}
	for _, c := range l.conns {
		if c == nil || c.due == 0 || l.now < c.due || c.busy {
			continue
		}
		c.due = 0
		switch {
		case c.lingering, len(c.out) > 0:
			l.close(c) // the linger's end, or a client that does not read (WriteTimeout)
		case c.r < c.w:
			l.refuse(c, &protoError{408, "request timeout"})
			l.advance(c)
		default:
			l.close(c) // idle past IdleTimeout, or past IdleGrace while draining
		}
	}
}
