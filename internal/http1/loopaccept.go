package http1

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

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
	if l.signalled {
		return
	}
	l.kickLocked()
}

// kickLocked writes the eventfd, pending wake-up or not (yieldPoll needs a fresh edge),
// unless the loop has ended; l.mu is held.
func (l *loop) kickLocked() {
	if l.evfd < 0 {
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
		if s.full() {
			unix.Close(fd)
			continue
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
	c.due = l.now + int64(s.firstTO()) // a fresh connection's wait for its first request
	if l.draining {
		l.idleWhileDraining(c)
	}
}
