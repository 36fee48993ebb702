package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/genhealth"
	"github.com/onehost/onehost/internal/histlog"
)

// Latency histogram range, in microseconds.
const (
	minLatency = 1
	maxLatency = 60_000_000
)

// BoundThreshold is the share of its workers' CPU above which, in its busiest second, the
// generator is reported as the bottleneck (Generator.Bound).
const BoundThreshold = 0.80

// Result is what a run measured.
type Result struct {
	Mode          string    // "closed" or "rate"
	Start, Finish time.Time // wall clock
	Sent          int64     // requests written
	Responses     int64     // complete responses
	Bytes         int64     // bytes read, heads and bodies
	Errors        int64     // connection failures, parse errors and timeouts
	Timeouts      int64     // requests past Config.Timeout (also counted in Errors)
	BadBodies     int64     // responses Config.CheckBody refused (also counted in Errors)
	// Connections says how the connections were made: their spread over source
	// addresses, the pace of their first connects, and the reconnects.
	Connections
	// StatusCodes counts responses by status code.
	StatusCodes map[int]int64
	// Latency holds every response's latency in microseconds.
	Latency *hdrhistogram.Histogram
	// Intervals are the same latencies an interval (Config.IntervalLength) at a time, from
	// Start, tag "all", held encoded: the run's HdrHistogram interval log. A response
	// falls in the interval in which its loop saw it; they add up to Latency exactly.
	// Empty intervals are left out; the last is cut at Finish.
	Intervals []histlog.Interval
	// Samples are taken every SampleInterval; a last partial interval is dropped.
	Samples   []Sample
	Generator GeneratorCPU
	// Health is the generator's verdict (package genhealth): whether it kept up with its
	// own schedule in every second of the run. A saturated run measured the generator.
	Health genhealth.Verdict
}

// Duration is the run's length.
func (r *Result) Duration() time.Duration { return r.Finish.Sub(r.Start) }

// Sample counts what one interval of the run completed.
type Sample struct {
	T        float64 `json:"t"` // seconds from the start to the interval's end
	Requests int64   `json:"requests"`
	Bytes    int64   `json:"bytes"`
	Errors   int64   `json:"errors"`
}

// GeneratorCPU is the generator process's own CPU use during the run.
type GeneratorCPU struct {
	Workers int     `json:"workers"`
	UserSec float64 `json:"cpu_user_s"`
	SysSec  float64 `json:"cpu_sys_s"`
	// MaxWorkerCPU is the process's CPU in its busiest sample interval, in cores, divided
	// by Workers: the fraction of a core each worker thread used at the peak.
	MaxWorkerCPU float64 `json:"max_worker_cpu"`
	// Bound is MaxWorkerCPU > BoundThreshold: the generator, not the server, may have
	// set the pace.
	Bound bool `json:"bound"`
}

// engine is one run's shared state.
type engine struct {
	cfg      Config
	tgt      target
	family   int           // of the target's address
	sockaddr unix.Sockaddr // the target's address, as the first connection reached it
	reqs     []byte        // Pipelining copies of the request
	reqLen   int
	head     bool // HEAD requests: responses have no body
	rate     bool
	amount   bool
	budget   atomic.Int64 // Amount left to claim
	nsPer    float64      // open loop: nanoseconds between requests
	nsOpen   float64      // nanoseconds between first connects; 0: all at once
	made     Connections  // the spread planned, and the pace
	base     time.Time    // now() counts from here
	t0       int64        // now() when the run started
	stopAt   int64        // open loop: no request due later than this is sent (t0 + Duration)
	nconns   int
	loops    []*loop
	// observe, set only by tests, sees every response: its connection, status and due time.
	observe func(conn, status int, due int64)
	// onRecord, set only by tests, sees every latency recorded (µs), from the loops'
	// goroutines: a second record of the same requests, kept apart from the intervals.
	onRecord func(us int64)
	// stall, set only by tests, runs at every turn of every loop: a generator that falls
	// behind on purpose.
	stall func()

	stopped atomic.Bool
	wg      sync.WaitGroup

	// bind is made.Spread.Addrs as sockaddrs; each loop binds with its own copies.
	bind []unix.Sockaddr
	// onConnect, set only by tests, sees every connect the loops start: the connection
	// and when (now()); called from the loops' goroutines.
	onConnect func(conn int, at int64)
}

func newHistogram() *hdrhistogram.Histogram { return hdrhistogram.New(minLatency, maxLatency, 3) }

// now is monotonic nanoseconds since base; base is a second in the past, so that 0 can
// mean "no time".
func (e *engine) now() int64 { return int64(time.Since(e.base)) }

// dueAt is when request j of connection id is due in open loop: request k = id + j·C of
// the run is due at start + k/Rate.
func (e *engine) dueAt(id int, j int64) int64 {
	k := int64(id) + j*int64(e.nconns)
	return e.t0 + int64(float64(k)*e.nsPer)
}

// openAt is when the connection at position k of the opening order may first connect.
func (e *engine) openAt(k int) int64 {
	return e.t0 + int64(float64(k)*e.nsOpen)
}

// claim takes up to k requests from the Amount budget and returns how many it got.
func (e *engine) claim(k int) int {
	left := e.budget.Add(-int64(k))
	if left >= 0 {
		return k
	}
	got := max(int64(k)+left, 0)
	e.budget.Add(int64(k) - got)
	return int(got)
}

// Run performs one load run and returns what it measured. It first opens one connection
// and returns an error if that fails (nothing to measure); later connection failures are
// counted in Result.Errors. Canceling ctx ends the run early with the results so far.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	e, err := newEngine(cfg)
	if err != nil {
		return nil, err
	}
	return e.start(ctx)
}

func newEngine(cfg Config) (*engine, error) {
	c := cfg.withDefaults()
	tgt, err := parseTarget(c.URL)
	if err != nil {
		return nil, err
	}
	req, err := buildRequest(tgt, c.Method, c.Headers, c.Body)
	if err != nil {
		return nil, err
	}
	e := &engine{
		cfg:    c,
		tgt:    tgt,
		reqs:   bytes.Repeat(req, c.Pipelining),
		reqLen: len(req),
		head:   c.Method == "HEAD",
		rate:   c.Rate > 0,
		amount: c.Amount > 0,
		base:   time.Now().Add(-time.Second),
		nconns: c.Connections,
	}
	if e.rate {
		e.nsPer = 1e9 / c.Rate
	}
	if c.ConnectRate > 0 {
		e.nsOpen = 1e9 / c.ConnectRate
	}
	e.budget.Store(c.Amount)
	return e, nil
}

// start makes the first connection with package net (which resolves the name and checks
// that a server is there), plans the spread over source addresses, gives the first
// connection's socket to the first loop, and runs.
func (e *engine) start(ctx context.Context) (*Result, error) {
	d := net.Dialer{Timeout: e.cfg.Timeout}
	from := e.planSpread(ctx, &d)
	probe, err := d.DialContext(ctx, "tcp", e.tgt.addr)
	if err != nil {
		return nil, fmt.Errorf("connect to %s%s: %w", e.tgt.addr, from, err)
	}
	addr, _ := probe.RemoteAddr().(*net.TCPAddr)
	if addr == nil {
		probe.Close()
		return nil, fmt.Errorf("connect to %s: not a TCP connection", e.tgt.addr)
	}
	first, err := detach(probe)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", e.tgt.addr, err)
	}
	if ip4 := addr.IP.To4(); ip4 != nil {
		sa := &unix.SockaddrInet4{Port: addr.Port}
		copy(sa.Addr[:], ip4)
		e.family, e.sockaddr = unix.AF_INET, sa
	} else {
		sa := &unix.SockaddrInet6{Port: addr.Port}
		copy(sa.Addr[:], addr.IP.To16())
		if addr.Zone != "" {
			if ifi, err := net.InterfaceByName(addr.Zone); err == nil {
				sa.ZoneId = uint32(ifi.Index)
			}
		}
		e.family, e.sockaddr = unix.AF_INET6, sa
	}
	// Workers take contiguous shares of the connections; with fewer connections than
	// workers some have none and are not started.
	w := e.cfg.Workers
	for i := range w {
		lo, hi := i*e.nconns/w, (i+1)*e.nconns/w
		if lo == hi {
			continue
		}
		l, err := newLoop(e, lo, hi)
		if err != nil {
			for _, l := range e.loops {
				l.release()
			}
			unix.Close(first)
			return nil, err
		}
		e.loops = append(e.loops, l)
	}
	// The loops open their connections in turn, so that every worker has some open from
	// the start of a paced opening.
	for i, l := range e.loops {
		l.order, l.stride = i, len(e.loops)
	}
	e.loops[0].conns[0].fd = first
	return e.run(ctx), nil
}

// detach takes the socket of a connection dialed through package net for a loop to own:
// a duplicate descriptor (non-blocking, as net set the shared file description), after
// which the original is closed.
func detach(c net.Conn) (int, error) {
	defer c.Close()
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, errors.New("not a socket")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var dupErr error
	if err := raw.Control(func(s uintptr) { fd, dupErr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if dupErr != nil {
		return -1, fmt.Errorf("duplicate socket: %w", dupErr)
	}
	return fd, nil
}

// run is the controller: it starts the loops, samples once per interval, and stops
// everything at the end. It runs once per run, off the per-request path (the loops), so its
// steps cost nothing there: start the loops, sample until the end, stop the loops, gather
// what they had not handed over, and add up the connections' counters and the CPU.
func (e *engine) run(ctx context.Context) *Result {
	res := &Result{Mode: "closed", StatusCodes: map[int]int64{}}
	if e.rate {
		res.Mode = "rate"
	}
	cpu0 := processCPU()
	res.Start = time.Now()
	e.t0 = e.now()
	e.stopAt = math.MaxInt64
	if e.cfg.Duration > 0 {
		// The loops stop when the deadline's timer has fired and they have noticed; on a
		// busy machine that is late, and requests due after the run would go out.
		e.stopAt = e.t0 + int64(e.cfg.Duration)
	}
	// The connect times are the connect() calls themselves (conn.connect), the generator's
	// own kernel work, so they may trip the verdict.
	health := genhealth.Start(genhealth.Config{Interval: e.cfg.SampleInterval, Thresholds: e.cfg.Saturation, JudgeConnect: true})
	loopsDone := e.startLoops(health)

	tick := time.NewTicker(e.cfg.SampleInterval)
	defer tick.Stop()
	var deadline <-chan time.Time
	if !e.amount {
		t := time.NewTimer(e.cfg.Duration)
		defer t.Stop()
		deadline = t.C
	}
	// The loops' interval histograms, added up per interval as they come (each loop hands
	// its own over once per interval; see loop.rotate), and in total.
	sm := &runSampler{e: e, res: res, acc: histlog.Accumulator{Length: e.cfg.IntervalLength}, lastAt: e.t0, lastCPU: cpu0}
	res.Latency = newHistogram()
	sm.until(ctx, tick.C, deadline, loopsDone)

	e.stopped.Store(true)
	for _, l := range e.loops {
		l.stop()
	}
	<-loopsDone
	res.Finish = time.Now()
	end := time.Duration(e.now() - e.t0)
	cpu := processCPU()
	res.Health = health.Stop()

	// The loops have ended: what they had not handed over is read here.
	sm.takeRest()
	// Encoding a histogram fails only for an unknown encoding version.
	res.Intervals, _ = sm.acc.Intervals(end)
	e.addCounters(res)
	res.Connections = e.connections()
	res.Generator = e.generatorCPU(res, cpu0, cpu, sm.peak)
	return res
}

// startLoops starts every loop, each reporting to health; the channel closes once all
// have returned.
func (e *engine) startLoops(health *genhealth.Monitor) <-chan struct{} {
	for _, l := range e.loops {
		l.lag, l.connects = health.SendLag(), health.Connect()
	}
	e.wg.Add(len(e.loops))
	for _, l := range e.loops {
		go l.run()
	}
	loopsDone := make(chan struct{})
	go func() { e.wg.Wait(); close(loopsDone) }()
	return loopsDone
}

// runSampler gathers a run's figures: the loops' interval histograms into acc and
// res.Latency, and one Sample per interval into res.Samples, with the peak CPU.
type runSampler struct {
	e       *engine
	res     *Result
	acc     histlog.Accumulator
	last    Sample
	lastAt  int64
	lastCPU cpuTimes
	peak    float64
}

// take adds one loop's interval histogram and hands it back to the loop for reuse.
func (sm *runSampler) take(l *loop, s secHist) {
	if s.h == nil {
		return
	}
	sm.acc.Add("all", s.n, s.h)
	sm.res.Latency.Merge(s.h)
	s.h.Reset()
	select {
	case l.free <- s.h:
	default:
	}
}

// collect takes every interval histogram the loops have handed over so far.
func (sm *runSampler) collect() {
	for _, l := range sm.e.loops {
		for drained := false; !drained; {
			select {
			case s := <-l.secs:
				sm.take(l, s)
			default:
				drained = true
			}
		}
	}
}

// sample records the interval ending at now.
func (sm *runSampler) sample(now int64) {
	e := sm.e
	s := e.totals()
	cpu := processCPU()
	if secs := float64(now-sm.lastAt) / 1e9; secs > 0 {
		sm.peak = max(sm.peak, (cpu.user+cpu.sys-sm.lastCPU.user-sm.lastCPU.sys)/secs)
	}
	d := Sample{
		T:        float64(now-e.t0) / 1e9,
		Requests: s.Requests - sm.last.Requests,
		Bytes:    s.Bytes - sm.last.Bytes,
		Errors:   s.Errors - sm.last.Errors,
	}
	sm.res.Samples = append(sm.res.Samples, d)
	sm.last, sm.lastAt, sm.lastCPU = s, now, cpu
	sm.collect()
	if e.cfg.Progress != nil {
		e.cfg.Progress(Progress{Elapsed: time.Duration(now - e.t0), Sample: d, Total: s.Requests})
	}
}

// until samples at each tick until the deadline, the loops' end or ctx.
func (sm *runSampler) until(ctx context.Context, tick, deadline <-chan time.Time, loopsDone <-chan struct{}) {
	interval := sm.e.cfg.SampleInterval
	for {
		select {
		case <-tick:
			sm.sample(sm.e.now())
		case <-deadline:
			// The deadline and the last tick fall together; keep that last interval
			// whichever of the two fires first.
			if now := sm.e.now(); now-sm.lastAt >= int64(interval)*9/10 {
				sm.sample(now)
			}
			return
		case <-loopsDone:
			return
		case <-ctx.Done():
			return
		}
	}
}

// takeRest takes, once the loops have ended, what they had not handed over: the queued
// intervals, the backlog and the interval under way.
func (sm *runSampler) takeRest() {
	sm.collect()
	for _, l := range sm.e.loops {
		for _, s := range l.backlog {
			sm.take(l, s)
		}
		sm.take(l, secHist{n: l.secN, h: l.sec})
	}
}

// addCounters releases the loops and adds up their connections' counters into res.
func (e *engine) addCounters(res *Result) {
	for _, l := range e.loops {
		l.release()
		for _, c := range l.conns {
			res.Sent += c.wrote
			res.Responses += c.responses.Load()
			res.Bytes += c.bytes.Load()
			res.Errors += c.errs.Load()
			res.Timeouts += c.tmo
			res.BadBodies += c.bad
			for code, n := range c.codes {
				if n > 0 {
					res.StatusCodes[code] += n
				}
			}
		}
	}
}

// generatorCPU is the generator's CPU over the run, from cpu0 to cpu, with the busiest
// interval's (peak) share per worker.
func (e *engine) generatorCPU(res *Result, cpu0, cpu cpuTimes, peak float64) GeneratorCPU {
	w := float64(e.cfg.Workers)
	if len(res.Samples) == 0 { // a run shorter than one interval: its average is its peak
		if secs := res.Duration().Seconds(); secs > 0 {
			peak = (cpu.user + cpu.sys - cpu0.user - cpu0.sys) / secs
		}
	}
	return GeneratorCPU{
		Workers:      e.cfg.Workers,
		UserSec:      cpu.user - cpu0.user,
		SysSec:       cpu.sys - cpu0.sys,
		MaxWorkerCPU: peak / w,
		Bound:        peak/w > BoundThreshold,
	}
}

// totals sums the connections' running counters.
func (e *engine) totals() Sample {
	var s Sample
	for _, l := range e.loops {
		for _, c := range l.conns {
			s.Requests += c.responses.Load()
			s.Bytes += c.bytes.Load()
			s.Errors += c.errs.Load()
		}
	}
	return s
}

// cpuTimes is the process's CPU time in seconds.
type cpuTimes struct{ user, sys float64 }

func processCPU() cpuTimes {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTimes{}
	}
	return cpuTimes{
		user: float64(ru.Utime.Sec) + float64(ru.Utime.Usec)/1e6,
		sys:  float64(ru.Stime.Sec) + float64(ru.Stime.Usec)/1e6,
	}
}
