// Package journey is the "$12 Server Challenge" load test: virtual users who each scroll
// the feed on their own keep-alive connection, with the challenge's think times, request
// mix and stages, and its pass rule (p95 < 500 ms, p99 < 1 s, failures < 1 %). Search runs
// the challenge's search for the largest number of users that passes.
//
// One user's iteration (the spec's load-profile.md, section 1): on the first iteration
// only, sleep uniform(0, 5) s; GET /feed, and if it is not 200 (or holds no post) sleep
// uniform(3, 7) s and start again; pick one of its posts uniformly and sleep uniform(3, 7)
// s; GET /posts/:id and sleep uniform(3, 8) s; with probability 0.15 like the post, with
// 0.02 write a post, each signed with the user's token; sleep uniform(5, 15) s; repeat.
// User n (from 1) is signed in as user ((n-1) mod len(tokens))+1.
//
// Latency is measured from when a request was due — the end of the think time before
// it — to the end of its response, so a request that waits for the generator, for a
// reconnect or for a stalled server counts all of its wait (no coordinated omission).
// Failed requests are recorded too (a timeout counts its full timeout). The hold's
// latencies are also kept per route and per second of the hold (Result.Intervals, an
// HdrHistogram interval log's worth), each request in the second it ended in.
//
// TimeScale X divides every think time by X, so N users offer the request rate of N×X
// challenge users ("user-equivalents") with N connections: a way to test the request
// rate of 20,000 users with fewer sockets, or to run the journey fast in tests. It does
// not scale the stages.
//
// Every run judges its own generator (Result.Health, package genhealth): how late each
// request went out against its due time, a 1 ms hiccup probe, the process's CPU share
// and the dial times, per second; a saturated run measured the generator, and Search does
// not score it.
//
// The users run on one of two engines (Config.Engine): event loops, one per GOMAXPROCS,
// each owning its users' sockets and timers (loop.go; the default), or a goroutine per
// user on Go's netpoller (user.go). Both make the same requests in the same order from
// the same random choices, and every test runs on both.
// The loop engine is two files: loop.go runs the loops (epoll, the timer heap, the lent
// read buffers) and loopuser.go is one user on a loop (dial, send, read, complete).
//
// Non-goals: TLS, HTTP/2, pipelining, redirects (3xx answers count as successes, as in
// the challenge, and are not followed).
package journey

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/onehost/onehost/internal/genhealth"
	"github.com/onehost/onehost/internal/histlog"
	"github.com/onehost/onehost/internal/srcaddr"
)

// Token is one entry of the token file that `worker seed -tokens FILE` writes.
type Token struct {
	ID       int64  `json:"id"`
	Username string `json:"username"`
	Token    string `json:"token"`
}

// ReadTokens reads a token file: a JSON array of {"id":N,"username":"…","token":"…"}.
// The tokens come back sorted by id, so that user n's token is tokens[(n-1) % len].
func ReadTokens(r io.Reader) ([]Token, error) {
	var toks []Token
	if err := json.NewDecoder(r).Decode(&toks); err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	if len(toks) == 0 {
		return nil, errors.New("read tokens: the file holds no tokens")
	}
	for i, t := range toks {
		if t.Token == "" || t.Username == "" {
			return nil, fmt.Errorf("read tokens: entry %d (id %d) lacks a username or token", i, t.ID)
		}
	}
	slices.SortFunc(toks, func(a, b Token) int { return int(a.ID - b.ID) })
	return toks, nil
}

// LoadTokens reads the token file at path.
func LoadTokens(path string) ([]Token, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load tokens: %w", err)
	}
	defer f.Close()
	return ReadTokens(f)
}

// Config is one run. URL, Users and Tokens are required; every other field's zero value
// gives the challenge's setting or a documented default.
type Config struct {
	// URL is the server's base URL: http://HOST:PORT, optionally with a path prefix.
	URL string
	// Users is the number of virtual users this run (this process) simulates.
	Users int
	// FirstUser is the number of this run's first user; it runs users FirstUser ..
	// FirstUser+Users-1. Default 1. Processes that share one run set it.
	FirstUser int
	// TotalUsers is the number of users of the whole run, across processes, over which
	// the stages are scheduled. Default FirstUser-1+Users.
	TotalUsers int
	// Ramp is how long the users take to start, evenly spaced. Default 60s; negative: none.
	Ramp time.Duration
	// Hold is how long all users run. Default 5m; negative: none.
	Hold time.Duration
	// RampDown is how long the users take to stop, the last started first, each after its
	// request in flight. Default 30s; negative: none.
	RampDown time.Duration
	// Tokens sign the users in (see ReadTokens).
	Tokens []Token
	// TimeScale divides every think time. Default 1 (the challenge's).
	TimeScale float64
	// LocalAddrs are the source addresses the users' connections are spread over (each
	// address gives its own range of ephemeral ports). Default: on a loopback IPv4 URL,
	// as many 127.0.0.x addresses as keep each (source, server) pair at or under PerAddr
	// of TotalUsers (package srcaddr); elsewhere the kernel's choice. User n (counted
	// across processes) uses LocalAddrs[(n-1) % len].
	LocalAddrs []netip.Addr
	// PerAddr is how many connections one source address may hold before the users are
	// spread over more. Default srcaddr.PerAddr("") (40 % of the ephemeral range's even
	// half, ~5,000 with Linux's default range).
	PerAddr int
	// Timeout bounds one request, connect included. Default 60s (k6's).
	Timeout time.Duration
	// StartAt is when the ramp begins. Default: when Run is called.
	StartAt time.Time
	// Seed seeds the users' random choices; user n uses a generator seeded with (Seed, n).
	// Default: from the clock.
	Seed uint64
	// Progress, if set, is called every ProgressEvery from a goroutine Run owns, and
	// once more at the end.
	Progress func(Progress)
	// ProgressEvery is how often Progress is called. Default 10s.
	ProgressEvery time.Duration
	// Engine is how the users run: EngineLoop (on event loops, one per GOMAXPROCS) or
	// EngineGoroutine (a goroutine each). Default DefaultEngine.
	Engine string
	// Saturation are the thresholds of the generator's verdict (Result.Health); zero
	// fields: genhealth's defaults.
	Saturation genhealth.Thresholds
}

// Progress is a running count, for a live display.
type Progress struct {
	Elapsed  time.Duration
	Active   int // users started and not yet stopped
	Requests int64
	Failures int64
}

// Defaults.
const (
	DefaultRamp     = 60 * time.Second
	DefaultHold     = 5 * time.Minute
	DefaultRampDown = 30 * time.Second
	DefaultTimeout  = 60 * time.Second
)

// withDefaults fills the defaults and checks the rest.
func (c Config) withDefaults() (Config, error) {
	dur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		} else if *d < 0 {
			*d = 0
		}
	}
	dur(&c.Ramp, DefaultRamp)
	dur(&c.Hold, DefaultHold)
	dur(&c.RampDown, DefaultRampDown)
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.TimeScale == 0 {
		c.TimeScale = 1
	}
	if c.Engine == "" {
		c.Engine = DefaultEngine
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = 10 * time.Second
	}
	if c.FirstUser == 0 {
		c.FirstUser = 1
	}
	if c.TotalUsers == 0 {
		c.TotalUsers = c.FirstUser - 1 + c.Users
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	switch {
	case c.Users <= 0:
		return c, fmt.Errorf("journey config: Users is %d: give at least 1", c.Users)
	case c.FirstUser < 1 || c.FirstUser-1+c.Users > c.TotalUsers:
		return c, fmt.Errorf("journey config: users %d..%d do not fit in TotalUsers %d",
			c.FirstUser, c.FirstUser-1+c.Users, c.TotalUsers)
	case len(c.Tokens) == 0:
		return c, errors.New("journey config: no Tokens: load a token file (worker seed -tokens FILE)")
	case c.Engine != EngineLoop && c.Engine != EngineGoroutine:
		return c, fmt.Errorf("journey config: Engine %q: want %q or %q", c.Engine, EngineLoop, EngineGoroutine)
	case c.TimeScale < 0:
		return c, fmt.Errorf("journey config: TimeScale %v: give a positive factor", c.TimeScale)
	}
	return c, nil
}

// target is where requests go, from Config.URL.
type target struct {
	addr   string // host:port to dial
	host   string // Host header
	prefix string // path prefix without the trailing slash
}

// ip is the target's address when its host is a literal address or localhost, else the
// zero Addr (the kernel's choice of source address then).
func (t target) ip() netip.Addr {
	host, _, err := net.SplitHostPort(t.addr)
	if err != nil {
		return netip.Addr{}
	}
	if host == "localhost" {
		return netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	a, _ := netip.ParseAddr(host)
	return a
}

func parseTarget(raw string) (target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return target{}, fmt.Errorf("journey config: URL: %w", err)
	}
	if u.Scheme != "http" || u.Host == "" {
		return target{}, fmt.Errorf("journey config: URL %q: want http://HOST:PORT (plain HTTP only)", raw)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return target{addr: addr, host: u.Host, prefix: strings.TrimSuffix(u.EscapedPath(), "/")}, nil
}

// Stage indices.
const (
	stageRamp = iota
	stageHold
	stageRampDown
	numStages
)

var stageNames = [numStages]string{"ramp-up", "hold", "ramp-down"}

// shard is one lock's worth of recording: users record into shard (user mod shards), so
// that thousands of users share a few histograms without one contended lock.
type shard struct {
	mu          sync.Mutex
	hist        [numStages]*hdrhistogram.Histogram
	routeHist   [len(routes)]*hdrhistogram.Histogram // the hold's only (see RouteCounts.Hist)
	stageReqs   [numStages]int64
	stageFails  [numStages]int64
	routes      [len(routes)]RouteCounts
	status      map[int]int64
	errors      map[string]int64
	iterations  int64
	feedRetries int64

	// The generator's verdict: this shard's users' send lags and dial times.
	lag, dial *genhealth.Recorder

	// The hold's latencies of the current second (secN since the hold began), per route:
	// the user that records the first request of a later second swaps them for empty ones
	// and hands the full ones to the run's collector (runner.secs), under the lock it
	// holds anyway, so recording takes no other lock and allocates nothing.
	secHist routeHists
	secN    int
	backlog []routeSecond // full seconds runner.secs had no room for yet
}

// routeHists are one second's histograms, one per route.
type routeHists [len(routes)]*hdrhistogram.Histogram

// routeSecond is a shard's histograms of second n of the hold.
type routeSecond struct {
	n int
	h routeHists
}

func newRouteHists() routeHists {
	var h routeHists
	for i := range h {
		h[i] = newHistogram()
	}
	return h
}

// newShard makes a shard with all its histograms, so that record never allocates.
func newShard() *shard {
	s := &shard{status: make(map[int]int64), errors: make(map[string]int64)}
	for i := range s.hist {
		s.hist[i] = newHistogram()
	}
	for i := range s.routeHist {
		s.routeHist[i] = newHistogram()
	}
	s.secHist = newRouteHists()
	return s
}

// runner is one Run's shared state.
type runner struct {
	cfg    Config
	tgt    target
	spread srcaddr.Spread // the users' source addresses
	start  time.Time
	shards []*shard

	active   atomic.Int64
	requests atomic.Int64
	failures atomic.Int64

	// The hold's per-second histograms: shards hand theirs over on secs, the collector
	// (owned by run) adds them up in acc and gives them back on free.
	secs chan routeSecond
	free chan routeHists
	acc  histlog.Accumulator

	readers sync.Pool // *bufio.Reader, held only while a response is read
	bodies  sync.Pool // *bytes.Buffer, held only while a feed is read

	// stall, set only by tests, runs before every request: a generator that falls behind
	// its users' schedules on purpose.
	stall func()
}

// Run runs the journey: Users users through the ramp, hold and ramp-down, and returns
// the result. If ctx ends first, users stop at once and Run returns what was recorded
// with ctx's error.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	tgt, err := parseTarget(cfg.URL)
	if err != nil {
		return Result{}, err
	}
	r := &runner{cfg: cfg, tgt: tgt, start: cfg.StartAt}
	return r.run(ctx)
}

// run is Run once the configuration is checked.
func (r *runner) run(ctx context.Context) (Result, error) {
	cfg, tgt := r.cfg, r.tgt
	r.spread = cfg.plan(tgt)
	if r.start.IsZero() {
		r.start = time.Now()
	}
	r.readers.New = func() any { return bufio.NewReaderSize(nil, 8<<10) }
	r.bodies.New = func() any { return new(bytes.Buffer) }
	r.shards = make([]*shard, min(max(2*runtime.GOMAXPROCS(0), 1), 16))
	// A dial's time holds the server's accept queue as well as the generator's connect(),
	// so it is reported, not judged.
	health := genhealth.Start(genhealth.Config{Thresholds: cfg.Saturation})
	for i := range r.shards {
		r.shards[i] = newShard()
		r.shards[i].lag, r.shards[i].dial = health.SendLag(), health.Connect()
	}

	r.secs, r.free = make(chan routeSecond, 4*len(r.shards)), make(chan routeHists, len(r.shards))
	collected := make(chan struct{})
	go func() { // owned by run: ends when secs is closed, once every user has returned
		defer close(collected)
		for s := range r.secs {
			r.collect(s)
		}
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var loopErr error
	if cfg.Engine == EngineLoop {
		wg.Add(1)
		go func() { // owned by run: ends when the loops have
			defer wg.Done()
			loopErr = r.runLoops(ctx)
		}()
	} else {
		for i := range cfg.Users {
			u := r.newUser(i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				u.run(ctx)
			}()
		}
	}
	progressDone := make(chan struct{})
	stopProgress := make(chan struct{})
	go func() { // owned by Run: stopped by stopProgress once every user has returned
		defer close(progressDone)
		if cfg.Progress == nil {
			return
		}
		t := time.NewTicker(cfg.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				cfg.Progress(r.progress())
				return
			case <-t.C:
				cfg.Progress(r.progress())
			}
		}
	}()
	wg.Wait()
	close(stopProgress)
	<-progressDone
	close(r.secs)
	<-collected

	res := r.result(time.Since(r.start))
	res.Health = health.Stop()
	res.Engine = cfg.Engine
	if loopErr != nil {
		return res, loopErr
	}
	return res, ctx.Err()
}

func (r *runner) progress() Progress {
	return Progress{
		Elapsed:  time.Since(r.start),
		Active:   int(r.active.Load()),
		Requests: r.requests.Load(),
		Failures: r.failures.Load(),
	}
}

// collect adds a shard's second to the run's and gives its histograms back for reuse.
func (r *runner) collect(s routeSecond) {
	for i, h := range s.h {
		r.acc.Add(routes[i], s.n, h)
		h.Reset()
	}
	select {
	case r.free <- s.h:
	default:
	}
}

// rotate moves sh on to second n of the hold (sh.mu held).
func (r *runner) rotate(sh *shard, n int) {
	full := routeSecond{n: sh.secN, h: sh.secHist}
	select {
	case sh.secHist = <-r.free:
	default:
		sh.secHist = newRouteHists()
	}
	sh.secN = n
	sh.backlog = append(sh.backlog, full)
	sent := 0 // as many as the collector takes now; the rest wait for the next second
send:
	for _, s := range sh.backlog {
		select {
		case r.secs <- s:
			sent++
		default:
			break send
		}
	}
	sh.backlog = append(sh.backlog[:0], sh.backlog[sent:]...)
}

// result adds up the shards.
func (r *runner) result(elapsed time.Duration) Result {
	res := Result{
		URL:       r.cfg.URL,
		Users:     r.cfg.Users,
		Spread:    r.spread.Report(),
		TimeScale: r.cfg.TimeScale,
		Elapsed:   elapsed,
		Routes:    make(map[string]RouteCounts),
		Status:    make(map[int]int64),
		Errors:    make(map[string]int64),
	}
	durations := [numStages]time.Duration{r.cfg.Ramp, r.cfg.Hold, r.cfg.RampDown}
	for i := range numStages {
		res.Stages = append(res.Stages, Stage{Name: stageNames[i], Duration: durations[i], Hist: Histogram{newHistogram()}})
	}
	for _, name := range routes {
		res.Routes[name] = RouteCounts{Hist: Histogram{newHistogram()}}
	}
	for _, s := range r.shards {
		s.mu.Lock()
		for i := range numStages {
			st := &res.Stages[i]
			st.Requests += s.stageReqs[i]
			st.Failures += s.stageFails[i]
			st.Hist.Merge(s.hist[i])
			res.Requests += s.stageReqs[i]
			res.Failures += s.stageFails[i]
		}
		for i, name := range routes {
			c := res.Routes[name]
			c.Requests += s.routes[i].Requests
			c.Failures += s.routes[i].Failures
			c.Hist.Merge(s.routeHist[i]) // c.Hist points at the histogram in the map
			res.Routes[name] = c
		}
		for k, v := range s.status {
			res.Status[k] += v
		}
		for k, v := range s.errors {
			res.Errors[k] += v
		}
		res.Iterations += s.iterations
		res.FeedRetries += s.feedRetries
		for _, b := range s.backlog { // the collector has ended: what it was not handed
			r.collect(b)
		}
		r.collect(routeSecond{n: s.secN, h: s.secHist})
		s.backlog = nil
		s.mu.Unlock()
	}
	res.HoldStart = r.start.Add(r.cfg.Ramp)
	// Encoding a histogram fails only for an unknown encoding version.
	res.Intervals, _ = r.acc.Intervals(elapsed - r.cfg.Ramp)
	if len(res.Errors) == 0 {
		res.Errors = nil
	}
	res.finish()
	return res
}

// stageOf is the stage a request due at t belongs to.
func (r *runner) stageOf(t time.Time) int {
	off := t.Sub(r.start)
	switch {
	case off < r.cfg.Ramp:
		return stageRamp
	case off < r.cfg.Ramp+r.cfg.Hold:
		return stageHold
	default:
		return stageRampDown
	}
}

// record counts one request due at due that ended at end.
func (r *runner) record(sh *shard, route int, due, end time.Time, status int, errKind string) {
	lat := min(max(int64(max(end.Sub(due), 0)/time.Microsecond), histLowest), histHighest)
	failed := errKind != "" || status < 200 || status > 399
	stage := r.stageOf(due)
	sh.mu.Lock()
	sh.hist[stage].RecordValue(lat)
	if stage == stageHold {
		sh.routeHist[route].RecordValue(lat)
		// The second is the one the request ended in, as HdrHistogram's recorders count
		// (a request due in the hold may end after it).
		if n := int(end.Sub(r.start.Add(r.cfg.Ramp)) / time.Second); n > sh.secN {
			r.rotate(sh, n)
		}
		sh.secHist[route].RecordValue(lat)
	}
	sh.stageReqs[stage]++
	sh.routes[route].Requests++
	if failed {
		sh.stageFails[stage]++
		sh.routes[route].Failures++
	}
	if errKind != "" {
		sh.errors[errKind]++
	} else {
		sh.status[status]++
	}
	sh.mu.Unlock()
	r.requests.Add(1)
	if failed {
		r.failures.Add(1)
	}
}
