package journey

// The event-loop engine (Config.Engine "loop"): the users of a process live on a few
// event loops, one per GOMAXPROCS, instead of a goroutine each. A loop owns its users'
// sockets (non-blocking, in its own epoll set, level-triggered) and their timers (one
// min-heap keyed by the next thing each user waits for: its start, its next request's due
// time, its stop time or its request's timeout), and sleeps in epoll_wait until the
// earliest. A request is built in the user's own buffer and written in one call; a
// response is read into a buffer the loop lends only while it is being read, and framed
// by package httpframe; nothing is allocated per request once the buffers have grown.
//
// Why: with a goroutine per user, 50,000 users are 50,000 stacks for the garbage
// collector to scan, 50,000 runtime timers, and a goroutine switch, a parking read and a
// net/http response (allocated) per request; on one generator core the runtime's own
// work then delays the users' timers by tens of milliseconds (docs/bench.md, "50,000
// users from one host"). A loop's heap is exact (no tick granularity) and costs
// O(log n) per request, ~16 comparisons at 50,000 users: a timer wheel would save
// nothing measurable at the journey's few thousand requests a second.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/httpframe"
	"github.com/onehost/onehost/internal/srcaddr"
)

// The engines (Config.Engine).
const (
	EngineLoop      = "loop"      // users on event loops, one per GOMAXPROCS
	EngineGoroutine = "goroutine" // a goroutine per user on Go's netpoller
)

// DefaultEngine is the engine a Config with no Engine gets.
const DefaultEngine = EngineLoop

// A loop user's states: what its heap entry waits for.
const (
	lsWaitStart  = iota // its start time
	lsWaiting           // its next request's due time
	lsStopping          // its stop time (its next request would be due after it)
	lsConnecting        // connect() to finish, or the request's timeout
	lsWriting           // the socket to take the rest of the request, or the timeout
	lsReading           // the response, or the timeout
	lsDone
)

// luser is one user on a loop. The loop owns every field.
type luser struct {
	*user
	l     *evloop
	idx   int32 // in l.users; the epoll events' key
	fd    int   // -1: no connection
	state uint8
	route int
	due   int64 // ns from l.base: when the request now due or in flight was due
	at    int64 // the heap's key
	hi    int   // index in l.heap; -1 when not in it
	iter  int   // the iteration (k6's __ITER), from 0
	id    int64 // the post chosen from the last feed
	posts bool  // this iteration writes a post
	out   bool  // EPOLLOUT is in the socket's interest set
	sent  int   // bytes of req written
	start int64 // when connect() was called
	in    []byte
	inN   int // bytes read into in
	used  int // bytes of in the parser consumed
	p     httpframe.Parser
}

// evloop is one event loop and its users.
type evloop struct {
	r       *runner
	sh      *shard
	base    time.Time
	sa      unix.Sockaddr // the server, this loop's own copy: unix.Connect writes into it
	family  int
	users   []*luser
	heap    []*luser
	ep      int
	wake    int // eventfd: the run's context ended
	events  []unix.EpollEvent
	free    [][]byte // read buffers not lent out
	done    int      // users in lsDone
	timeout int64    // Config.Timeout in ns

	mu     sync.Mutex // guards wake against stop after release
	closed bool
}

const (
	readBufSize = 16 << 10 // a read buffer as lent; a feed that does not fit grows it
	keepBufMax  = 64 << 10 // larger buffers are not kept for reuse
	wakeKey     = -1       // the eventfd's epoll key
)

// runLoops runs the users on GOMAXPROCS loops and returns when every user has stopped or
// ctx has ended.
func (r *runner) runLoops(ctx context.Context) error {
	sa, family, err := r.serverSockaddr()
	if err != nil {
		return err
	}
	n := min(runtime.GOMAXPROCS(0), r.cfg.Users)
	loops := make([]*evloop, n)
	for k := range loops {
		l, err := newEvloop(r, r.shards[k%len(r.shards)], sa, family)
		if err != nil {
			for _, l := range loops[:k] {
				l.release()
			}
			return err
		}
		loops[k] = l
	}
	for i := range r.cfg.Users {
		l := loops[i%n]
		u := &luser{user: r.newUser(i), l: l, idx: int32(len(l.users)), fd: -1, hi: -1, iter: -1}
		u.sh = l.sh // a loop records into its own shard: its lock is never contended
		u.at = int64(u.startAt.Sub(l.base))
		l.users = append(l.users, u)
		l.push(u)
	}
	stop := context.AfterFunc(ctx, func() {
		for _, l := range loops {
			l.stop()
		}
	})
	defer stop()
	var wg sync.WaitGroup
	for _, l := range loops {
		wg.Add(1)
		go func() { // owned by runLoops: ends when its users have stopped or ctx ended
			defer wg.Done()
			l.run()
		}()
	}
	wg.Wait()
	for _, l := range loops {
		l.release()
	}
	return nil
}

// serverSockaddr resolves the target once for every loop.
func (r *runner) serverSockaddr() (unix.Sockaddr, int, error) {
	a, err := net.ResolveTCPAddr("tcp", r.tgt.addr)
	if err != nil {
		return nil, 0, fmt.Errorf("journey: resolve %s: %w", r.tgt.addr, err)
	}
	if ip4 := a.IP.To4(); ip4 != nil {
		sa := &unix.SockaddrInet4{Port: a.Port}
		copy(sa.Addr[:], ip4)
		return sa, unix.AF_INET, nil
	}
	sa := &unix.SockaddrInet6{Port: a.Port}
	copy(sa.Addr[:], a.IP.To16())
	return sa, unix.AF_INET6, nil
}

func newEvloop(r *runner, sh *shard, sa unix.Sockaddr, family int) (*evloop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("journey: epoll_create1: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("journey: eventfd: %w", err)
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: wakeKey}); err != nil {
		unix.Close(ep)
		unix.Close(wake)
		return nil, fmt.Errorf("journey: epoll_ctl: %w", err)
	}
	// Each loop has its own copy of the target: unix.Connect marshals into the value.
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		c := *a
		sa = &c
	case *unix.SockaddrInet6:
		c := *a
		sa = &c
	}
	return &evloop{r: r, sh: sh, base: time.Now(), sa: sa, family: family, ep: ep, wake: wake,
		events: make([]unix.EpollEvent, 256), timeout: int64(r.cfg.Timeout)}, nil
}

// stop wakes the loop for the end of the run (any goroutine).
func (l *evloop) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		one := [8]byte{1}
		unix.Write(l.wake, one[:])
	}
}

// release closes the loop's descriptors once it has ended.
func (l *evloop) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	unix.Close(l.ep)
	unix.Close(l.wake)
}

func (l *evloop) now() int64 { return int64(time.Since(l.base)) }

func (l *evloop) timeAt(ns int64) time.Time { return l.base.Add(time.Duration(ns)) }

// run fires the users' timers and handles their sockets until every user has stopped or
// the run's context ended; then it closes what is open.
func (l *evloop) run() {
	defer l.closeAll()
	for {
		now := l.now()
		for len(l.heap) > 0 && l.heap[0].at <= now {
			u := l.heap[0]
			l.remove(u)
			u.fire(now)
			now = l.now()
		}
		if l.done == len(l.users) {
			return
		}
		wait := -1
		if len(l.heap) > 0 {
			// epoll_wait counts milliseconds: round up, so a timer never fires early.
			wait = int((l.heap[0].at - now + int64(time.Millisecond) - 1) / int64(time.Millisecond))
		}
		n, err := unix.EpollWait(l.ep, l.events, wait)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			panic(fmt.Sprintf("journey: epoll_wait: %v", err)) // EBADF/EINVAL: a bug of ours
		}
		now = l.now()
		for _, ev := range l.events[:n] {
			if ev.Fd == wakeKey {
				return
			}
			l.users[ev.Fd].event(ev.Events, now)
		}
	}
}

// closeAll closes every connection when the loop ends; a user still active stops now.
func (l *evloop) closeAll() {
	for _, u := range l.users {
		u.closeConn()
		if u.state != lsWaitStart && u.state != lsDone {
			u.r.active.Add(-1)
		}
		u.state = lsDone
	}
}

// The timer heap: a binary min-heap of users by at, each knowing its index.

func (l *evloop) push(u *luser) {
	u.hi = len(l.heap)
	l.heap = append(l.heap, u)
	l.up(u.hi)
}

func (l *evloop) remove(u *luser) {
	i, last := u.hi, len(l.heap)-1
	if i != last {
		l.swap(i, last)
	}
	l.heap[last] = nil
	l.heap = l.heap[:last]
	u.hi = -1
	if i != last {
		l.down(i)
		l.up(i)
	}
}

// setTimer (re)sets u's timer to at.
func (l *evloop) setTimer(u *luser, at int64) {
	u.at = at
	if u.hi < 0 {
		l.push(u)
		return
	}
	l.down(u.hi)
	l.up(u.hi)
}

func (l *evloop) swap(i, j int) {
	l.heap[i], l.heap[j] = l.heap[j], l.heap[i]
	l.heap[i].hi, l.heap[j].hi = i, j
}

func (l *evloop) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if l.heap[p].at <= l.heap[i].at {
			return
		}
		l.swap(i, p)
		i = p
	}
}

func (l *evloop) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(l.heap) {
			return
		}
		if c+1 < len(l.heap) && l.heap[c+1].at < l.heap[c].at {
			c++
		}
		if l.heap[i].at <= l.heap[c].at {
			return
		}
		l.swap(i, c)
		i = c
	}
}

// lend gives out a read buffer.
func (l *evloop) lend() []byte {
	if n := len(l.free); n > 0 {
		b := l.free[n-1]
		l.free = l.free[:n-1]
		return b
	}
	return make([]byte, readBufSize)
}

// giveBack takes a read buffer back.
func (l *evloop) giveBack(b []byte) {
	if cap(b) <= keepBufMax {
		l.free = append(l.free, b[:cap(b)])
	}
}

// fire handles u's timer.
func (u *luser) fire(now int64) {
	switch u.state {
	case lsWaitStart:
		if !u.startAt.Before(u.stopAt) { // stops before it starts, as user.run's wait
			u.state = lsDone
			u.l.done++
			return
		}
		u.r.active.Add(1)
		// The first iteration's spread.
		u.schedule(int64(u.startAt.Add(u.think(0, 5)).Sub(u.l.base)), routeFeed)
	case lsWaiting:
		u.send(now)
	case lsStopping:
		u.closeConn()
		u.state = lsDone
		u.l.done++
		u.r.active.Add(-1)
	case lsConnecting, lsWriting, lsReading:
		u.fail(now, "timeout")
	}
}

// schedule makes route's request due at due, or stops the user at its stop time if
// due is at or past it.
func (u *luser) schedule(due int64, route int) {
	u.due, u.route = due, route
	if stop := int64(u.stopAt.Sub(u.l.base)); due >= stop {
		u.state = lsStopping
		u.l.setTimer(u, stop)
		return
	}
	u.state = lsWaiting
	u.l.setTimer(u, due)
}

// send starts the request now due: it dials first if there is no connection.
func (u *luser) send(now int64) {
	switch u.route { // each builds the request in u.req
	case routeFeed:
		u.iter++
		u.sh.mu.Lock()
		u.sh.iterations++
		u.sh.mu.Unlock()
		u.ids = u.ids[:0]
		u.feedRequest()
	case routePost:
		u.postRequest(u.id)
	case routeLike:
		u.likeRequest(u.id)
	case routeCreate:
		u.createRequest(u.iter, u.l.timeAt(now))
	}
	if u.r.stall != nil {
		u.r.stall()
		now = u.l.now()
	}
	// Send lag, for the generator's verdict: how late the request goes out.
	u.sh.lag.Record(time.Duration(now - u.due))
	u.sent = 0
	u.l.setTimer(u, now+u.l.timeout)
	if u.fd < 0 {
		u.dial(now)
		return
	}
	u.write(now)
}

// dial starts a non-blocking connect from the user's source address.
func (u *luser) dial(now int64) {
	fd, err := unix.Socket(u.l.family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		u.complete(now, 0, "connect")
		return
	}
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1) // as Go's dialer does
	if a := u.r.spread.For(u.vu - 1); a.IsValid() && a.Is4() && u.l.family == unix.AF_INET {
		if err := srcaddr.NoPort(fd); err == nil {
			err = unix.Bind(fd, &unix.SockaddrInet4{Addr: a.As4()})
		}
		if err != nil {
			unix.Close(fd)
			u.complete(now, 0, "connect")
			return
		}
	}
	u.start = now
	err = unix.Connect(fd, u.l.sa)
	if err != nil && !errors.Is(err, unix.EINPROGRESS) {
		unix.Close(fd)
		u.complete(now, 0, "connect")
		return
	}
	u.fd = fd
	u.out = true
	if err := unix.EpollCtl(u.l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP, Fd: u.idx}); err != nil {
		u.fail(now, "connect")
		return
	}
	u.state = lsConnecting
}

// event handles what epoll reported for u's socket.
func (u *luser) event(ev uint32, now int64) {
	switch u.state {
	case lsConnecting:
		if ev&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) == 0 {
			return
		}
		u.sh.dial.Record(time.Duration(now - u.start)) // failed or not, as user.roundTrip
		if soerr, err := unix.GetsockoptInt(u.fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || soerr != 0 {
			u.fail(now, "connect")
			return
		}
		u.write(now)
	case lsWriting:
		if ev&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
			u.write(now)
		}
	case lsReading:
		u.read(now)
	default:
		// An idle keep-alive connection: the server closed it (or sent what nobody asked
		// for). Either way it is done; the next request dials a new one, as a browser's
		// would, and nothing failed.
		u.closeConn()
	}
}

// write writes what is left of the request; what the socket does not take now waits
// for EPOLLOUT.
func (u *luser) write(now int64) {
	for u.sent < len(u.req) {
		n, errno := rawWrite(u.fd, u.req[u.sent:])
		switch {
		case errno == unix.EAGAIN:
			u.interest(true)
			u.state = lsWriting
			return
		case errno == unix.EINTR:
			continue
		case errno != 0:
			u.fail(now, "write")
			return
		}
		u.sent += n
	}
	u.interest(false)
	u.state = lsReading
}

// interest sets whether the socket's interest includes EPOLLOUT.
func (u *luser) interest(out bool) {
	if u.out == out {
		return
	}
	ev := uint32(unix.EPOLLIN | unix.EPOLLRDHUP)
	if out {
		ev |= unix.EPOLLOUT
	}
	unix.EpollCtl(u.l.ep, unix.EPOLL_CTL_MOD, u.fd, &unix.EpollEvent{Events: ev, Fd: u.idx})
	u.out = out
}

// read reads once (the set is level-triggered: what is left is reported again) and
// frames the response.
func (u *luser) read(now int64) {
	feed := u.route == routeFeed
	if u.in == nil {
		u.in, u.inN, u.used = u.l.lend(), 0, 0
	}
	if u.inN == len(u.in) {
		if !feed && u.used > 0 { // a body nobody reads: drop what was framed
			u.inN = copy(u.in, u.in[u.used:u.inN])
			u.used = 0
		} else {
			grown := make([]byte, 2*len(u.in))
			copy(grown, u.in[:u.inN])
			u.l.giveBack(u.in)
			u.in = grown
		}
	}
	n, errno := rawRead(u.fd, u.in[u.inN:])
	switch {
	case errno == unix.EAGAIN || errno == unix.EINTR:
		return
	case errno != 0:
		u.fail(now, "read")
		return
	case n == 0:
		if u.p.EOF() { // a body delimited by the close
			u.done(now, true)
			return
		}
		u.fail(now, "read")
		return
	}
	u.inN += n
	m, done, err := u.p.Parse(u.in[u.used:u.inN])
	u.used += m
	switch {
	case err != nil:
		u.fail(now, "read")
	case done:
		u.done(now, u.p.Close || u.used < u.inN)
	}
}

// done ends a request whose response has arrived whole: the feed's post ids kept, the
// connection closed when the server said so or sent more than was asked for.
func (u *luser) done(now int64, closeConn bool) {
	status := u.p.Status
	if u.route == routeFeed && status == http.StatusOK {
		u.ids = appendPostIDs(u.ids[:0], u.in[:u.used])
	}
	u.p.Reset()
	u.l.giveBack(u.in)
	u.in = nil
	if closeConn {
		u.closeConn()
	}
	u.complete(now, status, "")
}

// fail ends the request in flight with a transport error of kind.
func (u *luser) fail(now int64, kind string) {
	u.closeConn()
	u.ids = u.ids[:0]
	u.complete(now, 0, kind)
}

func (u *luser) closeConn() {
	if u.fd >= 0 {
		unix.Close(u.fd) // also takes it out of the epoll set
		u.fd = -1
	}
	u.out = false
	if u.in != nil {
		u.l.giveBack(u.in)
		u.in = nil
	}
	u.p.Reset()
}

// complete records the request that ended at now with status (0 with errKind on a
// transport error) and makes the journey's next request due, as user.run does.
func (u *luser) complete(now int64, status int, errKind string) {
	l := u.l
	end := l.timeAt(now)
	u.r.record(u.sh, u.route, l.timeAt(u.due), end, status, errKind)
	switch u.route {
	case routeFeed:
		if status != http.StatusOK || len(u.ids) == 0 {
			u.sh.mu.Lock()
			u.sh.feedRetries++
			u.sh.mu.Unlock()
			u.schedule(now+int64(u.think(3, 7)), routeFeed)
			return
		}
		u.id = u.ids[u.rng.IntN(len(u.ids))]
		u.schedule(now+int64(u.think(3, 7)), routePost)
	case routePost:
		due := now + int64(u.think(3, 8))
		like := u.rng.Float64() < likeProbability
		u.posts = u.rng.Float64() < createProbability
		switch {
		case like:
			u.schedule(due, routeLike)
		case u.posts:
			u.schedule(due, routeCreate)
		default:
			u.schedule(due+int64(u.think(5, 15)), routeFeed)
		}
	case routeLike:
		if u.posts {
			u.schedule(now, routeCreate)
			return
		}
		u.schedule(now+int64(u.think(5, 15)), routeFeed)
	case routeCreate:
		u.schedule(now+int64(u.think(5, 15)), routeFeed)
	}
}

// rawRead and rawWrite skip the runtime's system call bookkeeping: the socket is
// non-blocking, so neither can block the thread. b must not be empty.
func rawRead(fd int, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

func rawWrite(fd int, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}
