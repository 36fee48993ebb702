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

// shedReserve is the descriptor the loops of one Serve hold back for the moment the process
// runs out of them (see Server.shed): given back, it lets a loop accept the waiting
// connection and close it at once instead of leaving it in the queue. One for all loops,
// under mu, which a loop holds while it accepts when there are several.
type shedReserve struct {
	mu sync.Mutex
	fd int // -1 while given away or when it could not be had
}

func newShedReserve() *shedReserve {
	r := &shedReserve{fd: -1}
	r.refill()
	return r
}

func (r *shedReserve) refill() {
	if fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		r.fd = fd
	}
}

func (r *shedReserve) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
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

// wake makes the loop look at its completions, its incoming connections and the server's
// state.
func (l *loop) wake() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.signalLocked()
}

// signalLocked writes the eventfd unless a wake-up is pending already or the loop has
// ended; l.mu is held, so the descriptor is never a closed (or reused) number.
func (l *loop) signalLocked() {
	if l.signalled || l.evfd < 0 {
		return
	}
	l.signalled = true
	one := uint64(1)
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(l.evfd), uintptr(unsafe.Pointer(&one)), 8)
}

// pick is the loop an accepted connection goes to: the one with the fewest, this one on a
// tie (no hand-off, no wake-up). The accepting loops take turns (under shed.mu), so two
// never pick on the same counts.
func (l *loop) pick() *loop {
	best, least := l, l.load.Load()
	for _, p := range l.peers {
		if n := p.load.Load(); n < least {
			best, least = p, n
		}
	}
	return best
}

// handOff queues a connection another loop accepted for this one and wakes it; false when
// this loop has ended (its caller keeps the connection).
func (l *loop) handOff(fd int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || l.evfd < 0 {
		return false
	}
	l.incoming = append(l.incoming, fd)
	l.signalLocked()
	return true
}

// retire marks the loop ended, unless a connection was handed to it since it last looked:
// then it goes on (the eventfd is written) and serves that one first.
func (l *loop) retire() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.incoming) > 0 {
		return false
	}
	l.ended = true
	return true
}

// abandon ends a loop that panicked: the connections still queued for it are closed.
func (l *loop) abandon() {
	l.mu.Lock()
	l.ended = true
	fds := l.incoming
	l.incoming = nil
	l.mu.Unlock()
	for _, fd := range fds {
		unix.Close(fd)
		l.load.Add(-1)
		l.srv.untrack(nil)
	}
}

// forceClose makes the loop close every connection now (Shutdown's deadline passed).
func (l *loop) forceClose() {
	l.force.Store(true)
	l.wake()
}

// mayBlock reports whether r must run off the loop.
func (l *loop) mayBlock(r *Request) bool { return l.blocker != nil && l.blocker.MayBlock(r) }

// yield parks the loop's goroutine in the netpoller for a moment although events wait,
// so that Go's scheduler runs: it polls the network and runs the goroutines that were
// woken or started meanwhile (see loopYield). The events taken but not yet handled stay
// in l.events.
func (l *loop) yield() {
	l.woke = false
	if err := l.epRaw.Read(l.yieldFn); err != nil {
		panic(fmt.Sprintf("wait for events: %v", err))
	}
	l.now = monoNow()
	l.ranFrom = l.now
}

// yieldPoll is yield's RawConn.Read callback: the first call makes sure that the netpoller
// will find epfd ready and parks; the second (woken) returns. The eventfd is written here,
// after RawRead has reset the descriptor's readiness, and whether or not a wake-up is
// pending: Go registers epfd edge-triggered, so only an event after that reset is sure to
// wake the loop, and every eventfd write is one (a readiness the netpoller already
// reported before the reset would be lost, and the loop parked until the next event). The
// loop reads the eventfd at its next poll, as for any wake-up.
func (l *loop) yieldPoll(fd uintptr) bool {
	if l.woke {
		return true
	}
	l.woke = true
	l.mu.Lock()
	if l.evfd >= 0 {
		l.signalled = true
		one := uint64(1)
		syscall.RawSyscall(syscall.SYS_WRITE, uintptr(l.evfd), uintptr(unsafe.Pointer(&one)), 8)
	}
	l.mu.Unlock()
	return false
}

// poll is the RawConn.Read callback: take the ready events without waiting; none ready
// (false) parks the goroutine in the netpoller until epfd is readable.
func (l *loop) poll(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&l.events[0])),
			uintptr(len(l.events)), 0, 0, 0)
		switch e {
		case 0:
			l.nready = int(n)
			l.parked = n == 0
			return n > 0
		case syscall.EINTR:
			continue
		default:
			l.pollErr = e
			return true
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

func (l *loop) accept() {
	s := l.srv
	if l.many {
		// The loops take turns: with one reserve for all, a loop's accept could otherwise
		// take the descriptor another loop freed to shed with, and serve a connection over
		// the limit while the reserve is lost.
		l.shed.mu.Lock()
		defer l.shed.mu.Unlock()
	}
	if l.lnfd >= 0 && restoreNonblocking(uintptr(l.lnfd)) {
		s.warnBlocking()
	}
	for range acceptBatch {
		if l.lnfd < 0 {
			return
		}
		// Syscall, not RawSyscall: should the socket still be blocking (another process
		// sharing it switched it between the check above and here), the accept ties up
		// this loop until a connection comes, but not the process: the runtime hands its
		// P on, so the supervisor's channel and Shutdown's signal are still served.
		nfd, _, e := syscall.Syscall6(syscall.SYS_ACCEPT4, uintptr(l.lnfd), 0, 0,
			syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0, 0)
		switch e {
		case 0:
		case syscall.EAGAIN, syscall.EINTR, syscall.ECONNABORTED:
			if e == syscall.EAGAIN {
				l.backoff = 0
				return
			}
			continue
		case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM:
			err := os.NewSyscallError("accept", e)
			if (e == syscall.EMFILE || e == syscall.ENFILE) && l.shed.fd >= 0 {
				// As Server.shed: give the reserve back, close the waiting connection at once.
				unix.Close(l.shed.fd)
				l.shed.fd = -1
				if fd, _, e2 := syscall.Syscall6(syscall.SYS_ACCEPT4, uintptr(l.lnfd), 0, 0, syscall.SOCK_CLOEXEC, 0, 0); e2 == 0 {
					unix.Close(int(fd))
					s.shedCount.Add(1)
				}
				s.logLimit(err, "out of descriptors: closing new connections at once until some free up")
				l.shed.refill()
				continue
			}
			// Nothing to shed with: existing connections keep working; new ones wait in
			// the kernel's queue while accepting pauses (resumed by the tick).
			l.backoff = min(max(2*l.backoff, 5*time.Millisecond), time.Second)
			s.logLimit(err, "accept failing: new connections wait in the kernel queue until descriptors or memory free up")
			l.disarmListener()
			l.pauseUntil = l.now + int64(l.backoff)
			return
		default:
			l.stopAccepting(fmt.Errorf("accept: %w", os.NewSyscallError("accept", e)))
			return
		}
		fd := int(nfd)
		if l.shed.fd < 0 {
			l.shed.refill() // given away while shedding, or not had at the start
		}
		// What net's accepted TCP connections get by default: no Nagle, keep-alive
		// probes after 15 s. They fail harmlessly on a Unix socket.
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 15)
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 15)
		// Counted open from here, so a drain that starts while the connection is on its
		// way to another loop waits for it (see retire).
		s.open.Add(1)
		s.accepted.Add(1)
		to := l.pick()
		to.load.Add(1)
		if to != l {
			if to.handOff(fd) {
				continue
			}
			to.load.Add(-1) // it ended meanwhile: this loop serves the connection
			l.load.Add(1)
		}
		l.adopt(fd)
	}
}

// adopt makes an accepted connection (counted in s.open and in l.load) one of this loop's.
func (l *loop) adopt(fd int) {
	s := l.srv
	l.gen++
	c := &conn{srv: s, lp: l, fd: fd, events: unix.EPOLLIN, gen: l.gen}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd), Pad: c.gen}); err != nil {
		unix.Close(fd)
		l.load.Add(-1)
		s.untrack(nil)
		s.log().Warn("epoll add connection", zap.Error(err))
		return
	}
	for fd >= len(l.conns) {
		l.conns = append(l.conns, make([]*conn, max(len(l.conns), 64))...)
	}
	l.conns[fd] = c
	l.n++
	c.due = l.now + int64(s.idle())
	if l.draining {
		l.idleWhileDraining(c)
	}
}

// ready handles epoll's news of one connection.
func (l *loop) ready(c *conn, ev uint32) {
	if c.busy {
		// Its handler runs. A hang-up or an error: the response will not reach the
		// client, close (the buffers wait for the handler). Input (pipelined behind the
		// request): it waits in the socket, and the connection leaves epoll's interest so
		// level-triggered readiness does not spin the loop; only a hang-up or an error
		// is reported then. Taken out only now, not at every deferred request: a client
		// waiting for its answer sends nothing, and two epoll_ctl calls per write are saved.
		if ev&(unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			l.close(c)
		} else {
			l.interest(c, 0)
		}
		return
	}
	if c.lingering {
		l.discard(c)
		return
	}
	if len(c.out) > 0 {
		if ev&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			l.advance(c)
		}
		return
	}
	if ev&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR|unix.EPOLLRDHUP) == 0 {
		return
	}
	// Readable: now, and only now, a buffer.
	if c.buf == nil {
		c.buf = l.getBuf()
		c.r, c.w, c.scan = 0, 0, 0
	} else if c.w == len(c.buf) && !c.makeRoom() {
		l.refuse(c, errBodyTooLarge)
		l.advance(c)
		return
	}
	n, e := sysRead(c.fd, c.buf[c.w:])
	switch {
	case e == syscall.EAGAIN:
		if c.r == c.w {
			l.putBuf(c)
		}
		return
	case e != 0 || n == 0:
		l.close(c) // the client closed (or reset) its side
		return
	}
	c.w += n
	l.advance(c)
}

// advance drives a connection as far as it goes without waiting: write what is queued,
// parse and answer what is buffered, and settle into the next wait.
func (l *loop) advance(c *conn) {
	s := l.srv
	for {
		if c.fd < 0 {
			return
		}
		if len(c.out) > 0 {
			if !l.write(c) {
				l.close(c)
				return
			}
			if len(c.out) > 0 {
				// The socket is full: go on when epoll says there is room, for at most
				// WriteTimeout from now (not re-armed by the partial writes after).
				if c.events != unix.EPOLLOUT {
					c.due = l.now + int64(s.writeTO())
					l.interest(c, unix.EPOLLOUT)
				}
				return
			}
			c.releaseOut()
		}
		if c.closeAfter {
			l.close(c)
			return
		}
		if c.lingerThen {
			l.linger(c)
			return
		}
		// Parse and answer the buffered requests; pipelined responses leave together, or
		// at flushThreshold.
		for c.r < c.w && len(c.out) < flushThreshold && !c.closeAfter && !c.lingerThen {
			if c.x == nil {
				c.x = l.getX()
			}
			res, perr := c.parse()
			if perr != nil {
				l.refuse(c, perr)
				break
			}
			if res == deferred {
				l.putOff(c)
				return
			}
			if res == closeNow {
				c.closeAfter = true
			}
			if res == needMore {
				break
			}
		}
		if len(c.out) > 0 || c.closeAfter || c.lingerThen {
			continue
		}
		l.putX(c)
		if c.r == c.w {
			// Idle: the buffers go back to the pools.
			l.putBuf(c)
			c.reqBy = 0
			c.due = l.now + int64(s.idle())
			if l.draining {
				l.idleWhileDraining(c)
			}
		} else {
			if c.reqBy == 0 {
				c.reqBy = l.now + int64(s.readTO())
			}
			c.due = c.reqBy
		}
		l.interest(c, unix.EPOLLIN)
		return
	}
}

// putOff runs a request that may block on a goroutine of its own; the loop reads nothing
// more of the connection until the handler returns (woken), see ready.
func (l *loop) putOff(c *conn) {
	c.busy = true
	c.due = 0
	l.busyN++
	go func() {
		c.runHandler()
		l.complete(c)
	}()
}

// complete hands a deferred request back to the loop. The wake-up is written under mu, so
// the loop (which ends only once every deferred request came back) is still there for it.
func (l *loop) complete(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.completed = append(l.completed, c)
	l.signalLocked()
}

// refuse queues the answer to a refused request; the connection closes after a linger.
func (l *loop) refuse(c *conn, perr *protoError) {
	if perr.status == 0 {
		c.closeAfter = true
		return
	}
	if c.x == nil {
		c.x = l.getX()
	}
	c.queueError(perr)
	c.lingerThen = true
}

// linger shuts the write side and discards the client's input for a moment before the
// close, as conn.fail does, so the error response is not destroyed by a reset.
func (l *loop) linger(c *conn) {
	unix.Shutdown(c.fd, unix.SHUT_WR)
	c.lingering, c.lingerThen = true, false
	c.lingerLeft = lingerBytes
	c.due = l.now + int64(lingerTimeout)
	l.putX(c)
	l.putBuf(c)
	l.interest(c, unix.EPOLLIN)
}

func (l *loop) discard(c *conn) {
	if l.scratch == nil {
		l.scratch = make([]byte, 16<<10)
	}
	n, e := sysRead(c.fd, l.scratch)
	if e == syscall.EAGAIN {
		return
	}
	if c.lingerLeft -= n; e != 0 || n == 0 || c.lingerLeft <= 0 {
		l.close(c)
	}
}

// write writes the queued output until done or the socket is full. It returns false when
// the connection is dead.
func (l *loop) write(c *conn) bool {
	for c.woff < len(c.out) {
		n, e := sysWrite(c.fd, c.out[c.woff:])
		switch e {
		case 0:
			c.woff += n
		case syscall.EINTR:
		case syscall.EAGAIN:
			return true
		default:
			return false
		}
	}
	c.out, c.woff = c.out[:0], 0
	return true
}

func (l *loop) interest(c *conn, ev uint32) {
	if c.events == ev {
		return
	}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: ev, Fd: int32(c.fd), Pad: c.gen}); err != nil {
		l.srv.log().Warn("epoll modify connection", zap.Error(err))
	}
	c.events = ev
}

// close closes a connection; a busy one's buffers wait for its handler to return.
func (l *loop) close(c *conn) {
	if c.fd < 0 {
		return
	}
	l.conns[c.fd] = nil
	unix.Close(c.fd) // also takes it out of the epoll set
	c.fd = -1
	l.n--
	l.load.Add(-1)
	if c.busy {
		c.dead = true
	} else {
		l.release(c)
	}
	l.srv.untrack(c)
}

func (l *loop) release(c *conn) {
	l.putX(c)
	l.putBuf(c)
	c.releaseOut()
}

func (l *loop) getBuf() []byte {
	if n := len(l.freeBufs); n > 0 {
		b := l.freeBufs[n-1]
		l.freeBufs = l.freeBufs[:n-1]
		return b
	}
	return make([]byte, initialBuf)
}

// putBuf takes c's read buffer back; one grown past initialBuf is left to the GC.
func (l *loop) putBuf(c *conn) {
	if c.buf == nil {
		return
	}
	if len(c.buf) == initialBuf && len(l.freeBufs) < loopFreeBufs {
		l.freeBufs = append(l.freeBufs, c.buf)
	}
	c.buf, c.r, c.w, c.scan = nil, 0, 0, 0
}

func (l *loop) getX() *exchange {
	if n := len(l.freeX); n > 0 {
		x := l.freeX[n-1]
		l.freeX = l.freeX[:n-1]
		return x
	}
	return new(exchange)
}

func (l *loop) putX(c *conn) {
	x := c.x
	if x == nil {
		return
	}
	c.x = nil
	if len(l.freeX) < loopFreeX && cap(x.resp.Body) <= 256<<10 {
		// Drop the slices into the connection's buffer (the header table's stale ones are
		// bounded by the free list and overwritten by the next parse).
		x.req.Method, x.req.Path, x.req.Query, x.req.Body = nil, nil, nil, nil
		l.freeX = append(l.freeX, x)
	}
}

func sysRead(fd int, b []byte) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		if e != syscall.EINTR {
			return int(n), e
		}
	}
}

func sysWrite(fd int, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}
