// Measuring one run: where its processes go, the generator's command, the warm-up, the
// measured load with /proc snapshots around it, and what the Run records of it.

package ceiling

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/procstat"
)

// MeasureOptions vary one measured run.
type MeasureOptions struct {
	Purpose      string
	Round        int     // the sweep's round (Run.Round); 0 with one round
	Conns        int     // 0: ConnsPerWorker × N
	LinkBitsPerS float64 // the shaped link's rate, for the record and the verdict
	Shaping      string
	// Settle waits out the supervisor's 1 s counter polling around the run, so the
	// per-worker request counts cover exactly it.
	Settle bool
}

// Measure runs one workload against srv: a probe request, the warm-up, then the measured
// run with /proc snapshots around it. Failures are recorded in the Run (Skipped). Its
// steps: where the run's processes go (place), the probe, the generator's command
// (pickGenerator), the warm-up, the measured run (loadWindow), and what it recorded:
// throughput and latency, costs, per-worker shares, and the verdict.
func (s *Sweeper) Measure(ctx context.Context, srv *Server, wl Workload, o MeasureOptions) Run {
	r := Run{Workload: wl.Name, Mode: srv.Mode, Purpose: o.Purpose, N: srv.N, Writes: wl.Writes, Round: o.Round,
		ServerCommand: srv.Argv, Pipelining: s.cfg.Pipelining, LinkBitsPerS: o.LinkBitsPerS, Shaping: o.Shaping,
		Started: time.Now().UTC().Truncate(time.Millisecond)}
	s.progress.begin(r, max(s.cfg.Warmup, 0)+s.cfg.Duration)
	l := s.place(&r, srv, o)
	if err := probe(ctx, srv.Addr, wl); err != nil {
		r.Skipped = err.Error()
		return r
	}
	if err := s.pickGenerator(&r, &l, wl, srv); err != nil {
		r.Skipped = err.Error()
		return r
	}
	s.warmUp(ctx, l, o)
	var before control.Status
	if srv.Mode == ModeCluster {
		before, _ = srv.status(ctx)
	}
	logOff := fileSize(srv.logPath)
	// The server's CPU is the growth of its process tree's (supervisor and workers; PM2's
	// God and launcher and theirs) between two readings, procstat's accounting: processes
	// that joined the tree meanwhile count in full, and children that exited count through
	// their parents' reaped-children times (cutime, cstime). The workers live through the
	// run, so this is their own user and system time; a worker that restarts mid-run keeps
	// its share instead of losing it (the sweep reports restarts as errors anyway).
	tree, err := serverTree(srv.sampled())
	if err != nil {
		r.Skipped = err.Error()
		return r
	}
	w, err := s.loadWindow(ctx, l, tree)
	if s.remote() {
		r.GenCommand = w.argv
	}
	if err != nil {
		r.Skipped = err.Error()
		return r
	}
	active := recordOutcome(&r, w)
	recordCosts(&r, w, active)
	r.ErrorText = errorText(w.res.stderr, srv.logPath, logOff)
	if srv.Mode == ModeCluster {
		s.recordWorkers(ctx, &r, srv, o, before, w.mid)
	}
	s.judge(&r, o)
	return r
}

// load is how one measured run's load is generated: the workload against the server, by
// which generator, on which cores or load hosts, with how many connections and threads.
type load struct {
	wl          Workload
	srv         *Server
	gen         string
	genCPUs     []int // nil: not pinned
	conns       int
	threads     int
	hostThreads int // each load host's threads
}

// place records where the run's processes go (the server's and the generator's cores,
// shared or not) and its connections and generator threads, and returns the load so far.
func (s *Sweeper) place(r *Run, srv *Server, o MeasureOptions) load {
	srvCPUs := srv.CPUs
	genCPUs, shared := s.genCPUs(srv.N)
	r.ServerCPUs, r.GenCPUs, r.SharedCores = FormatCPUList(srvCPUs), FormatCPUList(genCPUs), shared
	r.ServerCores = len(srvCPUs)
	if r.ServerCores == 0 {
		r.ServerCores = srv.N
	}
	r.GenCores = len(genCPUs)
	if r.GenCores == 0 && !s.remote() {
		r.GenCores = len(s.allowed)
	}
	r.Connections = o.Conns
	if r.Connections <= 0 {
		r.Connections = s.cfg.ConnsPerWorker * srv.N
	}
	r.GenThreads = min(max(r.GenCores, 1), r.Connections)
	hostThreads := s.cfg.LoadHosts.threads(len(s.allowed) - r.ServerCores)
	if s.remote() {
		r.GenThreads = min(hostThreads*len(s.cfg.LoadHosts.Hosts), r.Connections)
	}
	return load{genCPUs: genCPUs, hostThreads: hostThreads, srv: srv}
}

// pickGenerator completes l with the workload's generator and records it, with the load
// hosts it runs on or, here, its command (recorded before the run, so that a failed run
// keeps it; a remote one's after, from the first host). An error is why the run is skipped.
func (s *Sweeper) pickGenerator(r *Run, l *load, wl Workload, srv *Server) error {
	gen := s.generatorFor(wl)
	r.Generator = gen
	l.wl, l.gen, l.conns, l.threads = wl, gen, r.Connections, r.GenThreads
	if s.remote() {
		if gen != "autocannon" {
			return errors.New("wrk workloads are not distributed to load hosts")
		}
		for _, h := range s.cfg.LoadHosts.Hosts {
			r.LoadHosts = append(r.LoadHosts, h.String())
		}
		return nil
	}
	argv, err := s.genArgv(gen, wl, srv, r.Connections, r.GenThreads, s.cfg.Duration)
	if err != nil {
		return err
	}
	if l.genCPUs != nil {
		argv = s.cfg.Pin(l.genCPUs, argv)
	}
	r.GenCommand = argv
	return nil
}

// generate runs the generator for d: here, pinned to its cores, or on the load hosts.
// started and ended (nil: nothing) are called as the load starts and ends.
func (s *Sweeper) generate(ctx context.Context, l load, d time.Duration, started, ended func()) (genResult, []string, error) {
	if s.remote() {
		return s.runRemote(ctx, l.wl, l.srv, l.conns, l.hostThreads, d, started, ended)
	}
	if started != nil {
		defer ended()
		started()
	}
	argv, err := s.genArgv(l.gen, l.wl, l.srv, l.conns, l.threads, d)
	if err != nil {
		return genResult{}, nil, err
	}
	if l.genCPUs != nil {
		argv = s.cfg.Pin(l.genCPUs, argv)
	}
	res, err := s.runGen(ctx, l.gen, argv)
	return res, argv, err
}

// warmUp runs the warm-up load (a failure is logged: the measured run says its own), and
// with Settle waits out the supervisor's counter polling.
func (s *Sweeper) warmUp(ctx context.Context, l load, o MeasureOptions) {
	if s.cfg.Warmup > 0 {
		if _, _, err := s.generate(ctx, l, s.cfg.Warmup, nil, nil); err != nil {
			s.log.Warn("warm-up", zap.String("workload", l.wl.Name), zap.Error(err))
		}
	}
	if o.Settle {
		sleepCtx(ctx, 1100*time.Millisecond)
	}
}

// window is what the measured run saw: the generator's result and command, the /proc
// snapshots as the load started and ended, its wall time, and the supervisor's status
// mid-run (empty outside cluster mode).
type window struct {
	res          genResult
	argv         []string
	snap0, snap1 snapshot
	wall         float64
	mid          control.Status
}

// loadWindow runs the measured load for Duration, snapshotting tree as it starts and ends
// and, in cluster mode, reading the supervisor's per-worker connection counts mid-run
// (polled once a second). Its error is the generator's or a snapshot's.
func (s *Sweeper) loadWindow(ctx context.Context, l load, tree *procstat.Tree) (window, error) {
	srv := l.srv
	var w window
	mid := make(chan control.Status, 1)
	midCtx, midCancel := context.WithCancel(ctx)
	defer midCancel()
	var err0, err1 error
	var t0 time.Time
	started := func() {
		w.snap0, err0 = takeSnapshot(tree)
		t0 = time.Now()
		if srv.Mode != ModeCluster {
			mid <- control.Status{}
			return
		}
		go func() {
			var st control.Status
			wait := max(s.cfg.Duration/2, min(1200*time.Millisecond, s.cfg.Duration-300*time.Millisecond))
			if sleepCtx(midCtx, wait) {
				st, _ = srv.status(midCtx)
			}
			mid <- st
		}()
	}
	ended := func() {
		w.wall = time.Since(t0).Seconds()
		w.snap1, err1 = takeSnapshot(tree)
		midCancel()
	}
	res, argv, genErr := s.generate(ctx, l, s.cfg.Duration, started, ended)
	w.res, w.argv = res, argv
	if t0.IsZero() { // the load never started (a host failed first)
		mid <- control.Status{}
	}
	if err0 != nil {
		genErr = err0
	}
	w.mid = <-mid
	if genErr != nil {
		return w, genErr
	}
	return w, err1
}

// recordOutcome records the generator's outcome: duration, requests and errors, latency,
// throughput and the generator's own saturation. It returns the seconds the load was
// active, over which rates are taken.
func recordOutcome(r *Run, w window) (active float64) {
	o2 := w.res.outcome
	r.DurationS = round(o2.DurationS, 3)
	if r.DurationS <= 0 {
		r.DurationS = round(w.wall, 3)
	}
	r.Requests, r.Errors, r.ConnectErrors, r.Timeouts, r.Non2xx = o2.Requests, o2.Errors, o2.Connect, o2.Timeouts, o2.Non2xx
	r.P50Ms, r.P99Ms, r.MaxMs = round(o2.P50Ms, 3), round(o2.P99Ms, 3), round(o2.MaxMs, 3)
	r.RPS = round(float64(o2.Requests)/r.DurationS, 1)
	r.BytesPerS = round(float64(o2.Bytes)/r.DurationS, 0)
	if o2.Requests > 0 {
		r.BytesPerReq = round(float64(o2.Bytes)/float64(o2.Requests), 1)
	}
	r.GenBoundFlag, r.GenMaxThread = o2.Bound, round(o2.MaxThread, 3)
	r.GenSaturated, r.GenSaturation = o2.Saturated, o2.Saturation
	if o2.GenThreads > 0 {
		r.GenThreads = o2.GenThreads
	}
	// Rates are over the generator's own measured time, as req/s is: the window between
	// the snapshots also holds the generator's start and exit, when the server idles.
	active = r.DurationS
	if active <= 0 || active > w.wall {
		active = w.wall
	}
	return active
}

// recordCosts records what the run cost, over active seconds: the server's CPU and memory,
// the generator's CPU, the host's CPU and loopback bytes.
func recordCosts(r *Run, w window, active float64) {
	snap0, snap1, requests := w.snap0, w.snap1, w.res.outcome.Requests
	user := (snap1.tree.User - snap0.tree.User).Seconds()
	sys := (snap1.tree.System - snap0.tree.System).Seconds()
	r.ServerPeakRSS = snap1.tree.RSS
	r.ServerBusyCores = round((user+sys)/active, 3)
	if requests > 0 {
		r.ServerUserUsPerReq = round(user*1e6/float64(requests), 2)
		r.ServerSysUsPerReq = round(sys*1e6/float64(requests), 2)
		r.ServerCPUUsPerReq = round((user+sys)*1e6/float64(requests), 2)
		r.GenUsPerReq = round(w.res.cpuS*1e6/float64(requests), 2)
	}
	r.GenBusyCores = round(w.res.cpuS/active, 3)
	h := snap1.host.CPUSince(snap0.host)
	r.Host = HostCPU{round(h.User, 1), round(h.System, 1), round(h.Idle, 1), round(h.IOWait, 1), round(h.SoftIRQ, 1), round(h.Steal, 1)}
	r.HostCores = len(snap1.host.CPUs)
	// Loopback's transmitted bytes alone: each byte between generator and server passes
	// lo once, counted once as sent and once as received.
	if lo := snap1.host.LoTxBytes - snap0.host.LoTxBytes; lo >= 0 {
		r.LoBytesPerS = round(float64(lo)/active, 0)
	}
}

// recordWorkers records, in cluster mode, each worker's share of the requests (the
// supervisor's counters before and after, settled with Settle) and of the connections
// mid-run, the kernel's steering, and the write path.
func (s *Sweeper) recordWorkers(ctx context.Context, r *Run, srv *Server, o MeasureOptions, before, mid control.Status) {
	after := before
	if o.Settle {
		sleepCtx(ctx, 1100*time.Millisecond)
	}
	if st, err := srv.status(ctx); err == nil {
		after = st
	}
	r.Workers = shares(before, after, mid)
	r.Steering = before.Steering
	r.WritePath = writePathOf(before, after, r.RPS, r.Connections)
}

// judge names what ran out first. The sqlite verdict compares p99 with the same
// workload's at the sweep's smallest N, the first such run being that baseline.
func (s *Sweeper) judge(r *Run, o MeasureOptions) {
	base, baseCPU := 0.0, 0.0
	if o.Purpose == PurposeSweep {
		key := r.Workload + "/" + r.Mode
		b, ok := s.baseline[key]
		if !ok {
			s.baseline[key] = baseline{r.N, r.P99Ms, r.ServerCPUUsPerReq}
		} else if r.N > b.n {
			base, baseCPU = b.p99, b.cpuUs
		}
	}
	e := EvidenceOf(*r, base)
	e.BaselineCPUUs = baseCPU
	r.Verdict, r.Evidence = Judge(e, s.cfg.Thresholds)
}

// shares is each worker's requests between two status snapshots and connections mid-run.
func shares(before, after, mid control.Status) []WorkerShare {
	var out []WorkerShare
	for _, w := range after.Workers {
		ws := WorkerShare{ID: w.ID, Requests: w.Requests}
		for _, b := range before.Workers {
			if b.ID == w.ID && b.PID == w.PID && b.Requests <= w.Requests {
				ws.Requests = w.Requests - b.Requests
			}
		}
		for _, m := range mid.Workers {
			if m.ID == w.ID {
				ws.Connections = m.Connections
			}
		}
		out = append(out, ws)
	}
	return out
}

// sleepCtx sleeps d unless ctx ends first; it reports whether it slept the whole time.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
