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
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
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
