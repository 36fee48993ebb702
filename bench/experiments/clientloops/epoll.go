package main

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// epollEngine is our own loop, as internal/journey/loop.go: one goroutine, one epoll set
// (level-triggered), the users' timers in a min-heap whose head is epoll_wait's timeout
// (milliseconds, rounded up so that no timer fires early), a read buffer the loop shares
// (an incomplete response's tail is copied into the user's pend), writes straight from
// the prebuilt request.
type epollEngine struct {
	r      *runner
	ep     int
	wake   int // eventfd: new connections queued, or stop
	events []unix.EpollEvent
	buf    []byte
	heap   timerHeap
	slots  []*user // by the epoll events' key
	free   []int32 // slots to reuse
	done   chan struct{}

	mu      sync.Mutex // guards queue and stopped: the dialling goroutines' hand-over
	queue   []*user
	stopped bool
}

const (
	epollWakeKey = -1
	readBufSize  = 64 << 10 // gnet's and nbio's default read buffer
)

func newEpollEngine(r *runner) *epollEngine {
	return &epollEngine{r: r, events: make([]unix.EpollEvent, 1024), buf: make([]byte, readBufSize), done: make(chan struct{})}
}

func (e *epollEngine) timers() string {
	return "min-heap in the loop, epoll_wait timeout in ms (rounded up)"
}

func (e *epollEngine) start() error {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("epoll_create1: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(ep)
		return fmt.Errorf("eventfd: %w", err)
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: epollWakeKey}); err != nil {
		unix.Close(ep)
		unix.Close(wake)
		return fmt.Errorf("epoll_ctl: %w", err)
	}
	e.ep, e.wake = ep, wake
	go e.run() // ends with stop
	return nil
}

// add takes c's descriptor (a duplicate: closing c then leaves the socket open, still
// non-blocking, and out of Go's own poller) and queues it for the loop.
func (e *epollEngine) add(u *user, c net.Conn) error {
	defer c.Close()
	sc, ok := c.(syscall.Conn)
	if !ok {
		return errors.New("not a syscall.Conn")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	fd := -1
	cerr := rc.Control(func(s uintptr) { fd, err = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) })
	if cerr != nil {
		return cerr
	}
	if err != nil {
		return err
	}
	u.fd = fd
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		unix.Close(fd)
		return errStopped
	}
	e.queue = append(e.queue, u)
	e.mu.Unlock()
	e.poke()
	return nil
}

func (e *epollEngine) poke() {
	one := [8]byte{1}
	unix.Write(e.wake, one[:])
}

func (e *epollEngine) stop() {
	e.mu.Lock()
	e.stopped = true
	e.mu.Unlock()
	e.poke()
	<-e.done
	unix.Close(e.ep)
	unix.Close(e.wake)
}

func (e *epollEngine) run() {
	defer close(e.done)
	defer e.closeAll()
	r := e.r
	for {
		now := r.now()
		for u := e.heap.head(); u != nil && u.at <= now; u = e.heap.head() {
			e.heap.remove(u)
			e.send(u, now)
			now = r.now()
		}
		wait := -1
		if u := e.heap.head(); u != nil {
			wait = int((u.at - now + int64(time.Millisecond) - 1) / int64(time.Millisecond))
		}
		n, err := unix.EpollWait(e.ep, e.events, wait)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			panic(fmt.Sprintf("clientloops: epoll_wait: %v", err)) // EBADF/EINVAL: a bug of ours
		}
		joined := false
		for _, ev := range e.events[:n] {
			if ev.Fd == epollWakeKey {
				joined = true
				continue
			}
			if u := e.slots[ev.Fd]; u != nil { // nil: closed earlier in this batch
				e.event(u, ev.Events)
			}
		}
		// New connections join after the batch, so a slot freed in it is not reused
		// while events for its old connection may still follow.
		if joined && !e.join() {
			return
		}
	}
}

// join registers the queued connections; false when the engine is stopping.
func (e *epollEngine) join() bool {
	var b [8]byte
	unix.Read(e.wake, b[:])
	e.mu.Lock()
	q, stopped := e.queue, e.stopped
	e.queue = nil
	e.mu.Unlock()
	for _, u := range q {
		if stopped {
			unix.Close(u.fd)
			continue
		}
		var slot int32
		if n := len(e.free); n > 0 {
			slot = e.free[n-1]
			e.free = e.free[:n-1]
		} else {
			slot = int32(len(e.slots))
			e.slots = append(e.slots, nil)
		}
		u.slot = slot
		e.slots[slot] = u
		if err := unix.EpollCtl(e.ep, unix.EPOLL_CTL_ADD, u.fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: slot}); err != nil {
			e.fail(u, errEnroll)
			continue
		}
		e.heap.push(u, u.due.Load())
	}
	return !stopped
}

func (e *epollEngine) send(u *user, now int64) {
	u.sent.Store(now)
	u.inflight.Store(true)
	u.wrote = 0
	e.write(u)
}

// write writes what is left of the request; what the socket does not take waits for
// EPOLLOUT.
func (e *epollEngine) write(u *user) {
	req := e.r.req
	for u.wrote < len(req) {
		n, errno := rawWrite(u.fd, req[u.wrote:])
		switch errno {
		case 0:
			u.wrote += n
		case unix.EINTR:
		case unix.EAGAIN:
			e.interest(u, true)
			return
		default:
			e.fail(u, errWrite)
			return
		}
	}
	e.interest(u, false)
}

func (e *epollEngine) interest(u *user, out bool) {
	if u.out == out {
		return
	}
	ev := uint32(unix.EPOLLIN | unix.EPOLLRDHUP)
	if out {
		ev |= unix.EPOLLOUT
	}
	unix.EpollCtl(e.ep, unix.EPOLL_CTL_MOD, u.fd, &unix.EpollEvent{Events: ev, Fd: u.slot})
	u.out = out
}

func (e *epollEngine) event(u *user, ev uint32) {
	if ev&unix.EPOLLOUT != 0 && u.out {
		e.write(u)
		if u.fd < 0 {
			return
		}
	}
	if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		e.read(u)
	}
}

// read reads once (level-triggered: what is left is reported again) and frames.
func (e *epollEngine) read(u *user) {
	n, errno := rawRead(u.fd, e.buf)
	switch {
	case errno == unix.EAGAIN || errno == unix.EINTR:
		return
	case errno != 0:
		e.fail(u, errRead)
		return
	case n == 0:
		e.fail(u, errClosed)
		return
	}
	done, kind := e.r.consume(u, e.buf[:n])
	switch {
	case kind >= 0:
		e.fail(u, kind)
	case done:
		e.heap.push(u, u.due.Load())
	}
}

// fail closes u's connection and has it dialled again.
func (e *epollEngine) fail(u *user, kind int) {
	e.closeUser(u)
	e.r.broken(u, kind)
}

func (e *epollEngine) closeUser(u *user) {
	if u.fd < 0 {
		return
	}
	unix.Close(u.fd) // also takes it out of the epoll set
	u.fd = -1
	e.heap.remove(u)
	e.slots[u.slot] = nil
	e.free = append(e.free, u.slot)
}

func (e *epollEngine) closeAll() {
	for _, u := range e.slots {
		if u != nil {
			e.closeUser(u)
			e.r.broken(u, errClosed) // not counted: the run is stopping
		}
	}
	e.mu.Lock()
	for _, u := range e.queue {
		unix.Close(u.fd)
	}
	e.queue = nil
	e.stopped = true
	e.mu.Unlock()
}

// rawRead and rawWrite skip the runtime's system call bookkeeping, as the journey's loop
// does: the socket is non-blocking, so neither can block the thread. b must not be empty.
func rawRead(fd int, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

func rawWrite(fd int, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}
