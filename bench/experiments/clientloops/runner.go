package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/onehost/onehost/internal/httpframe"
	"github.com/onehost/onehost/internal/procstat"
	"github.com/onehost/onehost/internal/srcaddr"
)

// engine is one event loop holding the users' connections.
type engine interface {
	// start starts the loop.
	start() error
	// add hands the engine u's freshly dialled connection (from a dialling goroutine).
	// The engine owns c from then on, also when add fails. u.due is its first request's
	// due time.
	add(u *user, c net.Conn) error
	// stop closes every connection and ends the loop; after it returns no callback of
	// the engine touches the runner's loop-owned fields.
	stop()
	// timers says how the engine keeps the users' timers (for the JSON line).
	timers() string
}

// user is one connection and its user: one request in flight at most. It is one struct
// for every engine (the fields an engine does not use stay zero), so the memory a user
// costs outside the engine is the same for all three. A reconnect is a new user value
// with the same id.
type user struct {
	id int

	// Read and written by more than one goroutine with nbio (its timers run on their own
	// goroutines); atomics for every engine, so the cost is the same.
	due      atomic.Int64 // ns since runner.base: when the next (or in-flight) request is due
	sent     atomic.Int64 // ns since runner.base: when the in-flight request went out
	inflight atomic.Bool
	closed   atomic.Bool // the connection is gone (counted once, in runner.broken)

	// Owned by the engine's loop.
	p    httpframe.Parser
	pend []byte // the unframed tail of earlier reads (epoll, nbio: their read buffers are shared)
	at   int64  // the timer heap's key (epoll, gnet)
	hi   int    // index in the timer heap; -1 when not in it

	// Per engine.
	fd    int                        // epoll: the socket
	slot  int32                      // epoll: the epoll events' key
	wrote int                        // epoll: bytes of the request written
	out   bool                       // epoll: EPOLLOUT is in the interest set
	gc    gnetConn                   // gnet: the connection
	nc    atomic.Pointer[nbioConn]   // nbio: the connection
	timer atomic.Pointer[time.Timer] // nbio: the engine's AfterFunc timer
}

// Error kinds (the JSON line's error_kinds).
const (
	errDial        = iota // the dial failed
	errEnroll             // the engine refused the connection
	errWrite              // writing a request failed
	errRead               // reading failed
	errClosed             // the server closed the connection (EOF, or the engine reported a close)
	errServerClose        // a response said Connection: close
	errFrame              // a malformed response
	errUnasked            // bytes nobody asked for
	errStatus             // a status other than 200
	nErrKinds
)

var errKindNames = [nErrKinds]string{"dial", "enroll", "write", "read", "closed", "server_close", "frame", "unasked", "status"}

// runner is one run: the workload, the dialling and what is measured.
type runner struct {
	o        options
	base     time.Time
	req      []byte
	interval int64
	addr     string
	spread   srcaddr.Spread
	dialers  []*net.Dialer // one per source address (or one with the kernel's choice)

	// The hold, in ns since base; holdStart is MaxInt64 until it begins.
	holdStart, holdEnd atomic.Int64
	stopping           atomic.Bool

	// Owned by the engine's loop (one goroutine in every engine); read after stop.
	requests int64
	lag, rtt *hdrhistogram.Histogram

	connected  atomic.Int64
	reconnects atomic.Int64
	errs       [nErrKinds]atomic.Int64
	redial     chan int // users whose connection must be dialled again
	attempts   []atomic.Uint32
}

func newRunner(o options) (*runner, error) {
	host := o.target.Hostname()
	r := &runner{
		o:        o,
		base:     time.Now(),
		req:      []byte("GET " + o.path + " HTTP/1.1\r\nHost: " + o.target.Host + "\r\nConnection: keep-alive\r\n\r\n"),
		interval: int64(o.interval),
		addr:     o.target.Host,
		lag:      newHist(),
		rtt:      newHist(),
		redial:   make(chan int, o.users),
		attempts: make([]atomic.Uint32, o.users),
	}
	r.holdStart.Store(math.MaxInt64)
	r.holdEnd.Store(math.MaxInt64)
	var dst netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		dst = a
	} else if ips, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host); err == nil && len(ips) > 0 {
		dst = ips[0]
	}
	r.spread = srcaddr.Plan(dst, o.users, 0, o.addrs)
	if len(r.spread.Addrs) == 0 {
		r.dialers = []*net.Dialer{{Timeout: 10 * time.Second}}
	}
	for _, a := range r.spread.Addrs {
		r.dialers = append(r.dialers, &net.Dialer{
			Timeout:   10 * time.Second,
			LocalAddr: &net.TCPAddr{IP: a.AsSlice()},
			Control:   srcaddr.Control, // IP_BIND_ADDRESS_NO_PORT: the port is chosen at connect()
		})
	}
	return r, nil
}

// newHist records microseconds from 1 µs to an hour.
func newHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)
}

func recordUS(h *hdrhistogram.Histogram, ns int64) {
	us := max(ns/1e3, 1)
	if us > h.HighestTrackableValue() {
		us = h.HighestTrackableValue()
	}
	h.RecordValue(us)
}

func summarize(h *hdrhistogram.Histogram) summary {
	ms := func(us int64) float64 { return math.Round(float64(us)) / 1e3 }
	return summary{P50: ms(h.ValueAtQuantile(50)), P99: ms(h.ValueAtQuantile(99)), Max: ms(h.Max())}
}

func (r *runner) now() int64 { return int64(time.Since(r.base)) }

// countErr counts an error of kind (any goroutine).
func (r *runner) countErr(kind int) {
	if !r.stopping.Load() {
		r.errs[kind].Add(1)
	}
}

// broken ends u's connection once, from whichever goroutine notices first: the error is
// counted and the user dialled again, unless the run is stopping.
func (r *runner) broken(u *user, kind int) {
	if !u.closed.CompareAndSwap(false, true) {
		return
	}
	r.connected.Add(-1)
	if r.stopping.Load() {
		return
	}
	r.errs[kind].Add(1)
	r.reconnects.Add(1)
	select {
	case r.redial <- u.id:
	default: // cannot happen: a user is queued at most once
	}
}

// frame frames u's response in b (on the loop): it returns the bytes used, whether the
// response completed, and an error kind (-1 for none) that ends the connection. A
// completed response is recorded and u's next request made due one interval later.
func (r *runner) frame(u *user, b []byte) (n int, done bool, kind int) {
	n, done, err := u.p.Parse(b)
	if err != nil {
		return n, false, errFrame
	}
	if !done {
		return n, false, -1
	}
	now := r.now()
	status, closing := u.p.Status, u.p.Close
	u.p.Reset()
	if !u.inflight.Load() || n < len(b) {
		return n, true, errUnasked
	}
	u.inflight.Store(false)
	r.record(u, now)
	if status != 200 {
		r.countErr(errStatus)
	}
	if closing {
		return n, true, errServerClose
	}
	u.due.Store(now + r.interval)
	return n, true, -1
}

// consume frames data read for u into a buffer the loop shares (epoll, nbio): an
// incomplete tail is copied into u.pend and framed again with the next read.
func (r *runner) consume(u *user, data []byte) (done bool, kind int) {
	b := data
	if len(u.pend) > 0 {
		u.pend = append(u.pend, data...)
		b = u.pend
	}
	n, done, kind := r.frame(u, b)
	switch {
	case kind >= 0:
		return false, kind
	case done:
		u.pend = u.pend[:0]
	default:
		u.pend = append(u.pend[:0], b[n:]...) // b[n:] may lie in u.pend: append moves, it does not clobber
	}
	return done, -1
}

// record counts a request completed at now, if now is in the hold (on the loop).
func (r *runner) record(u *user, now int64) {
	if now < r.holdStart.Load() || now >= r.holdEnd.Load() {
		return
	}
	r.requests++
	sent := u.sent.Load()
	recordUS(r.lag, sent-u.due.Load())
	recordUS(r.rtt, now-sent)
}

// offset is user id's first request's offset after its connection joined, the same for
// every engine with one seed: splitmix64 of the seed, the id and the attempt.
func (r *runner) offset(id int, attempt uint32) int64 {
	x := r.o.seed + uint64(id)*0x9e3779b97f4a7c15 + uint64(attempt)<<40
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return int64(x % uint64(r.interval))
}

// dial dials user id once and hands the connection to eng; a failure queues it again
// after a pause.
func (r *runner) dial(ctx context.Context, eng engine, id int) {
	attempt := r.attempts[id].Add(1) - 1
	c, err := r.dialers[id%len(r.dialers)].DialContext(ctx, "tcp", r.addr)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		r.countErr(errDial)
		r.retryLater(ctx, id)
		return
	}
	u := &user{id: id, hi: -1, fd: -1}
	u.due.Store(r.now() + r.offset(id, attempt))
	r.connected.Add(1)
	if err := eng.add(u, c); err != nil {
		c.Close() // the engine may have closed it already: harmless
		if u.closed.CompareAndSwap(false, true) {
			r.connected.Add(-1)
		}
		if ctx.Err() != nil || r.stopping.Load() {
			return
		}
		r.countErr(errEnroll)
		r.retryLater(ctx, id)
	}
}

func (r *runner) retryLater(ctx context.Context, id int) {
	r.reconnects.Add(1)
	go func() { // ends after the pause or with ctx
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
			select {
			case r.redial <- id:
			default:
			}
		}
	}()
}

// measure runs the workload on o.engine and returns what the hold measured.
func measure(ctx context.Context, o options, stderr io.Writer) (result, error) {
	r, err := newRunner(o)
	if err != nil {
		return result{}, err
	}
	var eng engine
	switch o.engine {
	case engineEpoll:
		eng = newEpollEngine(r)
	case engineGnet:
		eng = newGnetEngine(r, stderr)
	case engineNbio:
		eng = newNbioEngine(r, stderr)
	}
	if err := eng.start(); err != nil {
		return result{}, fmt.Errorf("%s: start: %w", o.engine, err)
	}
	stopped := false
	stopEngine := func() {
		if !stopped {
			stopped = true
			r.stopping.Store(true)
			eng.stop()
		}
	}
	defer stopEngine()

	probe := startProbe(r)
	defer probe.stop()

	// The dialling goroutines: the ramp's users first, at an even rate, then redials.
	dctx, dcancel := context.WithCancel(ctx)
	defer dcancel()
	ramp := make(chan int)
	rampDone := make(chan struct{}) // closed when every user's first dial has ended
	var firstDials atomic.Int64
	firstDials.Store(int64(o.users))
	var workers sync.WaitGroup
	for range o.dialers {
		workers.Go(func() {
			for {
				select {
				case <-dctx.Done():
					return
				case id := <-ramp:
					r.dial(dctx, eng, id)
					if firstDials.Add(-1) == 0 {
						close(rampDone)
					}
				case id := <-r.redial:
					r.dial(dctx, eng, id)
				}
			}
		})
	}
	defer workers.Wait()
	defer dcancel()
	go func() { // ends when the ramp is fed or the run ends
		start := time.Now()
		for i := range o.users {
			at := start.Add(time.Duration(int64(o.ramp) * int64(i) / int64(o.users)))
			if d := time.Until(at); d > time.Millisecond {
				select {
				case <-dctx.Done():
					return
				case <-time.After(d):
				}
			}
			select {
			case <-dctx.Done():
				return
			case ramp <- i:
			}
		}
	}()
	rampEnd := time.Now().Add(o.ramp)
	select {
	case <-ctx.Done():
		return result{}, ctx.Err()
	case <-rampDone:
	}
	if d := time.Until(rampEnd); d > 0 {
		select {
		case <-ctx.Done():
			return result{}, ctx.Err()
		case <-time.After(d):
		}
	}

	// The hold.
	hs := r.now()
	r.holdEnd.Store(hs + int64(o.hold))
	r.holdStart.Store(hs)
	cpu0 := processCPU()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	gc0 := ms.NumGC
	select {
	case <-ctx.Done():
		return result{}, ctx.Err()
	case <-time.After(time.Duration(hs + int64(o.hold) - r.now())):
	}
	cpu := processCPU() - cpu0
	holdS := float64(r.now()-hs) / 1e9
	runtime.ReadMemStats(&ms)
	gcs := ms.NumGC - gc0
	rss := readRSS()
	connected := r.connected.Load()

	dcancel()
	workers.Wait()
	stopEngine()
	probe.stop()

	res := result{
		Engine:     o.engine,
		Users:      o.users,
		Connected:  connected,
		IntervalMS: msOf(o.interval),
		RampS:      o.ramp.Seconds(),
		HoldS:      math.Round(holdS*1000) / 1000,
		Requests:   r.requests,
		RPS:        math.Round(float64(r.requests) / holdS),
		SendLag:    summarize(r.lag),
		RoundTrip:  summarize(r.rtt),
		Hiccup:     summarize(probe.h),
		CPUS:       math.Round(cpu.Seconds()*1000) / 1000,
		RSSMB:      math.Round(float64(rss)/(1<<20)*10) / 10,
		GCCycles:   gcs,
		ErrorKinds: map[string]int{},
		Reconnects: r.reconnects.Load(),
		GOMAXPROCS: gomaxprocs(),
		Timers:     eng.timers(),
		Spread:     r.spread.Report(),
	}
	if r.requests > 0 {
		res.USPerReq = math.Round(float64(cpu.Microseconds())/float64(r.requests)*100) / 100
	}
	for k := range r.errs {
		if v := r.errs[k].Load(); v > 0 {
			res.Errors += v
			res.ErrorKinds[errKindNames[k]] = int(v)
		}
	}
	return res, nil
}

// probe is the hiccup probe: a goroutine asks to wake every millisecond and records, in
// the hold, how late it woke.
type probe struct {
	h    *hdrhistogram.Histogram
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

func startProbe(r *runner) *probe {
	p := &probe{h: newHist(), quit: make(chan struct{}), done: make(chan struct{})}
	go func() { // ends with stop
		defer close(p.done)
		t := time.NewTimer(time.Millisecond)
		defer t.Stop()
		for {
			asked := r.now()
			t.Reset(time.Millisecond)
			select {
			case <-p.quit:
				return
			case <-t.C:
			}
			now := r.now()
			if now >= r.holdStart.Load() && now < r.holdEnd.Load() {
				recordUS(p.h, now-asked-int64(time.Millisecond))
			}
		}
	}()
	return p
}

func (p *probe) stop() {
	p.once.Do(func() { close(p.quit) })
	<-p.done
}

// processCPU is the process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// readRSS is the process's resident set in bytes (0 if unreadable).
func readRSS() int64 {
	rss, _ := procstat.RSS("", os.Getpid())
	return rss
}

var errStopped = errors.New("engine stopped")
