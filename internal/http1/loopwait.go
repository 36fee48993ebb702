package http1

import (
	"fmt"
	"syscall"
	"unsafe"
)

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
	l.kickLocked()
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
