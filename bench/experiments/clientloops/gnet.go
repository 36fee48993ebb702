package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
)

type gnetConn = gnet.Conn

// gnetEngine is gnet v2's client with one event loop. gnet has no per-connection timer
// (EventLoop.Schedule is "not supported yet" in v2.9.7: it returns ErrUnsupportedOp),
// only the engine's ticker: OnTick, called on a goroutine of its own, returning the
// delay to its next call. So the users' timers are a min-heap owned by the loop, as the
// epoll engine's, and OnTick wakes at the heap's head (at most 1 ms later, so a timer
// pushed ahead of the head it saw is late by 1 ms at most) and hands the due sends to the
// loop with EventLoop.Execute (an eventfd write and a queued task). Reads: OnTraffic
// frames c.Peek(-1), which is gnet's own read buffer with no copy while the connection's
// inbound ring buffer is empty; what Discard leaves (an incomplete response) gnet copies
// into that ring, and a later Peek joins ring and new bytes in a pooled buffer. Writes:
// c.Write on the loop, straight to the socket (what it does not take gnet buffers).
type gnetEngine struct {
	gnet.BuiltinEventEngine
	r      *runner
	stderr io.Writer
	cli    *gnet.Client
	fire   gnet.RunnableFunc

	loop    atomic.Pointer[gnetLoop] // the loop, known from the first OnOpen
	next    atomic.Int64             // the heap head's time, for OnTick; MaxInt64 when empty
	pending atomic.Bool              // an Execute of fire is queued

	heap timerHeap // owned by the loop
}

type gnetLoop struct{ el gnet.EventLoop }

const gnetMaxTick = time.Millisecond

func newGnetEngine(r *runner, stderr io.Writer) *gnetEngine {
	e := &gnetEngine{r: r, stderr: stderr}
	e.next.Store(maxInt64)
	e.fire = func(context.Context) error { e.sendDue(); return nil }
	return e
}

const maxInt64 = 1<<63 - 1

func (e *gnetEngine) timers() string {
	return "min-heap in the loop; OnTick (own goroutine, wakes at the head, <=1 ms) -> EventLoop.Execute"
}

func (e *gnetEngine) start() error {
	cli, err := gnet.NewClient(e,
		gnet.WithMulticore(false),
		gnet.WithNumEventLoop(1),
		gnet.WithTicker(true),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithLogger(gnetLogger{e.stderr}),
	)
	if err != nil {
		return err
	}
	e.cli = cli
	return cli.Start()
}

// add enrolls c: gnet duplicates its descriptor, closes c and registers the duplicate on
// the loop, waiting until the loop has run OnOpen.
func (e *gnetEngine) add(u *user, c net.Conn) error {
	_, err := e.cli.EnrollContext(c, u)
	return err
}

func (e *gnetEngine) stop() {
	e.cli.Stop()
}

func (e *gnetEngine) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	u := c.Context().(*user)
	u.gc = c
	if e.loop.Load() == nil {
		e.loop.Store(&gnetLoop{c.EventLoop()})
	}
	e.heap.push(u, u.due.Load())
	e.setNext()
	return nil, gnet.None
}

func (e *gnetEngine) OnTraffic(c gnet.Conn) gnet.Action {
	u := c.Context().(*user)
	b, _ := c.Peek(-1)
	n, done, kind := e.r.frame(u, b)
	c.Discard(n)
	switch {
	case kind >= 0:
		e.r.broken(u, kind)
		return gnet.Close
	case done:
		e.heap.push(u, u.due.Load())
		e.setNext()
	}
	return gnet.None
}

func (e *gnetEngine) OnClose(c gnet.Conn, _ error) gnet.Action {
	u, ok := c.Context().(*user)
	if !ok {
		return gnet.None
	}
	e.heap.remove(u)
	e.setNext()
	e.r.broken(u, errClosed) // a no-op when OnTraffic already counted why
	return gnet.None
}

// OnTick runs on gnet's ticker goroutine: when the heap's head is due it has the loop
// send; it sleeps until the head, or 1 ms at most.
func (e *gnetEngine) OnTick() (time.Duration, gnet.Action) {
	now, next := e.r.now(), e.next.Load()
	if next > now {
		return min(time.Duration(next-now), gnetMaxTick), gnet.None
	}
	if l := e.loop.Load(); l != nil && !e.pending.Swap(true) {
		if err := l.el.Execute(context.Background(), e.fire); err != nil {
			e.pending.Store(false) // shutting down
		}
	}
	return gnetMaxTick, gnet.None
}

// sendDue sends every due user's request (on the loop).
func (e *gnetEngine) sendDue() {
	e.pending.Store(false)
	now := e.r.now()
	for u := e.heap.head(); u != nil && u.at <= now; u = e.heap.head() {
		e.heap.remove(u)
		u.sent.Store(now)
		u.inflight.Store(true)
		u.gc.Write(e.r.req) // on an error gnet closes the connection: OnClose counts it
		now = e.r.now()
	}
	e.setNext()
}

func (e *gnetEngine) setNext() {
	if u := e.heap.head(); u != nil {
		e.next.Store(u.at)
	} else {
		e.next.Store(maxInt64)
	}
}

// gnetLogger drops gnet's debug and info lines and writes the rest to stderr.
type gnetLogger struct{ w io.Writer }

func (gnetLogger) Debugf(string, ...any) {}
func (gnetLogger) Infof(string, ...any)  {}
func (l gnetLogger) Warnf(f string, a ...any) {
	fmt.Fprintf(l.w, "gnet: warning: "+f+"\n", a...)
}
func (l gnetLogger) Errorf(f string, a ...any) { fmt.Fprintf(l.w, "gnet: "+f+"\n", a...) }
func (l gnetLogger) Fatalf(f string, a ...any) { fmt.Fprintf(l.w, "gnet: fatal: "+f+"\n", a...) }
