package journey

import (
	"errors"
	"net/http"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/httpframe"
	"github.com/onehost/onehost/internal/srcaddr"
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
		// One err for both: a failed bind once went unseen (the if's own err), and the
		// user connected from the machine's address instead of its own.
		err = srcaddr.NoPort(fd)
		if err == nil {
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
