package ceiling

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/loadhosts"
)

// SweepConfig configures a Sweeper. The zero value of each field is its documented
// default, except SeedDB and WorkDir, which are required.
type SweepConfig struct {
	Supervisor    string // supervisor binary; default "bin/supervisor"
	Worker        string // worker binary; default "bin/worker"
	Autocannon    string // autocannon binary; "" or absent: every workload runs on wrk
	Wrk           string // wrk binary; default "wrk"
	ClusterConfig string // default "configs/cluster.yaml"
	SeedDB        string // seed database, copied afresh for each server start (required)
	Tokens        string // token file for the mix's wrk script (env TOKENS); default "data/tokens.json"
	JWTSecret     string // default "twelve-dollar-challenge"
	WorkDir       string // scratch: database copies, sockets, logs, scripts (required)

	Workloads []Workload // default DefaultWorkloads("bench/mix.lua")
	Ns        []int      // worker counts; default 1 and 2
	// Modes: ModeCluster, ModeSingle and the peers ModePM2, ModeNginx, ModePM2Compress
	// and ModeNginxGzip; default cluster, single. A peer runs only the workload it stands in for (ServesWorkload),
	// and is skipped with a note (Notes) when its programs or files are missing.
	Modes []string

	// PeerHeavyDir: the Fastify heavy PATCH peer for ModePM2, a directory with heavy.js
	// and its node_modules (a copy of the node-heavy peer after `npm install`), for
	// ModePM2Compress with @fastify/compress among them (PeerCompressVersion). Default
	// "": both are skipped.
	PeerHeavyDir string
	// App: the user's own program (argv), run by ModeCluster under the supervisor as
	// `supervisor run -instances N -- App...` instead of our worker: an unmodified Node app
	// (the supervisor's preload gives its listen(PORT) the slot's socket), or any program
	// that takes the socket at fd 3. AppConfig: the supervisor's -config for it instead (our
	// YAML, self_bind for instance, or a PM2 ecosystem file), App then optional. Either set:
	// Workloads is the app's request (AppRequest), SeedDB is not needed, and the modes are
	// ModeCluster and ModePM2 (AppPM2Script under PM2 cluster mode, with AppPM2Args).
	App          []string
	AppConfig    string
	AppPM2Script string
	AppPM2Args   []string
	// PM2: the pm2 binary; default "pm2" on PATH.
	PM2 string
	// Nginx: the nginx binary for ModeNginx; default frontproxy.LookPath.
	Nginx string
	// NginxTemplate: the nginx configuration template; default "configs/nginx/static.conf".
	NginxTemplate string
	// StaticRoot: the directory nginx serves at /static/; default "internal/shop/static",
	// the files the worker embeds.
	StaticRoot string

	Duration time.Duration // measured run; whole seconds (wrk's unit); default 3s
	Warmup   time.Duration // unmeasured run before each measured one; default 1s; <0 none
	// ConnsPerWorker: connections per server worker (cluster) or core (single), the same
	// for every mode at one N; default 16. Where the supervisor steers round robin
	// (internal/steering) any count is dealt evenly, so 16 is no longer for fairness but
	// for saturation: one closed-loop connection keeps a worker busy only while the
	// generator turns it around, or while the group commit answers its write. On one
	// worker (2 cores, the generator on the other) heavy saturates at 4 connections, the
	// mix at about 16 (medians of 3: 21,200 req/s at 8, 24,900 at 16, 22,000 at 32).
	// Where the kernel's hash deals them (no eBPF), 16 per worker on average also makes
	// a worker with fewer than 4 a 1e-4 chance (Poisson, mean 16).
	ConnsPerWorker int
	Pipelining     int // requests in flight per connection (autocannon -p); default 1

	// ServerCPU0: the server runs on cores ServerCPU0 .. ServerCPU0+N-1. Default 0.
	ServerCPU0 int
	// GenCPUs: the generator's cores; nil means the CPUs this process may use that the
	// server does not (for each N), or all of them when none are left (shared cores).
	GenCPUs []int
	// NoPin: do not pin anything (taskset absent or not honoured).
	NoPin bool
	// Pin returns argv run on cpus; default `taskset -c LIST argv...`.
	Pin func(cpus []int, argv []string) []string

	// ImbalanceN and ImbalanceConns: after the sweep's cells with N = ImbalanceN, one
	// cluster run of ImbalanceWorkload with only ImbalanceConns connections, reporting
	// each worker's share. ImbalanceN 0: no such run. ImbalanceConns default N.
	ImbalanceN        int
	ImbalanceConns    int
	ImbalanceWorkload string // default "heavy", else the first workload

	Thresholds Thresholds
	// HostBusyRepeats is how many times a run judged host-busy (other work took part of
	// it) is run again; every one is kept and reported, the disturbed ones marked and left
	// out of the model. Default 0: none, the run is marked and left out.
	HostBusyRepeats int
	// Repeat is how many rounds the sweep runs: round 1 measures every (N, mode, workload),
	// then round 2 all of them again, and so on, so a disturbance minutes long lands in one
	// round of many cells rather than in every run of one. The tables, the model and the
	// plots use each cell's median run (MedianRuns), with the spread beside it. Default 1.
	// Why: on the 16-core host one 3 s run of the same binary ten minutes apart read
	// 27,100 and 40,400 req/s (heavy, N = 1).
	Repeat int
	Logger *zap.Logger // default nop
	// Report receives each run as it finishes (print it, write it); may be nil.
	Report func(Run)
	// Environ is the children's base environment; default os.Environ().
	Environ []string
	// Compress is our worker's COMPRESS (its dynamic routes' content codings, heavy and
	// products). "": the three codings at their default levels when a workload asks for
	// a coding (NAME+gzip), else off; "off": off. Identity workloads run beside encoded
	// ones on the same server; their answers then carry Vary: Accept-Encoding, 23 bytes.
	Compress string
	// ListenHost is the address the cluster and the single worker listen on (port 0);
	// default 127.0.0.1. With LoadHosts: one every host reaches.
	ListenHost string
	// ListenPort is the cluster's port; default 0, any free one. `ceiling fleet` gives every
	// host the same one, as the nftables balancer's DNAT needs.
	ListenPort int
	// Agent: the cluster's supervisor answers HAProxy's agent-check at this HOST:PORT
	// (`supervisor run -agent`); "" none. `ceiling fleet` gives every host one, so that its
	// HAProxy runs with the agent-check of the production config.
	Agent string
	// Wrap, when set, rewrites the server's command line after pinning: `ceiling fleet`
	// runs each host's cluster in its network namespace (nsenter) and CPU quota. It must
	// exec the command so that the pid stays the server's.
	Wrap func(argv []string) []string
	// LoadHosts: run the generator on these hosts over ssh (see LoadHosts); zero: here.
	LoadHosts LoadHosts
	// Progress: keep this file (ProgressFile in the results directory) saying which run is
	// being measured and how the last one went, for a dashboard; default "": none.
	Progress string
}

// Sweeper runs the sweep's servers and generators.
type Sweeper struct {
	cfg       SweepConfig
	log       *zap.Logger
	allowed   []int
	useAC     bool
	baseline  map[string]baseline // workload/mode -> p99 at the smallest N
	notes     []string
	serverSeq int
	peers     peerSetup
	progress  *progressWriter  // nil: no progress file
	copies    loadhosts.Copies // the generator's copies on the load hosts
	remoteSeq int              // numbers the load hosts' histogram logs
	// measure is Measure; a test's seam for the repeat of disturbed runs.
	measure func(ctx context.Context, srv *Server, wl Workload, o MeasureOptions) Run
}

type baseline struct {
	n     int
	p99   float64
	cpuUs float64 // server CPU µs per request
}

// NewSweeper checks the configuration and finds the generator.
func NewSweeper(cfg SweepConfig) (*Sweeper, error) {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&cfg.Supervisor, "bin/supervisor")
	def(&cfg.Worker, "bin/worker")
	def(&cfg.Wrk, "wrk")
	def(&cfg.ClusterConfig, "configs/cluster.yaml")
	def(&cfg.Tokens, "data/tokens.json")
	def(&cfg.JWTSecret, "twelve-dollar-challenge")
	def(&cfg.ImbalanceWorkload, "heavy")
	def(&cfg.ListenHost, "127.0.0.1")
	app := len(cfg.App) > 0 || cfg.AppConfig != ""
	if err := appDefaults(&cfg); err != nil {
		return nil, err
	}
	if cfg.SeedDB == "" && !app {
		return nil, errors.New("sweep config: SeedDB is empty: point it at a seed database (`worker seed -db PATH` writes one)")
	}
	if cfg.WorkDir == "" {
		return nil, errors.New("sweep config: WorkDir is empty: give a scratch directory")
	}
	if cfg.Workloads == nil {
		cfg.Workloads = DefaultWorkloads("bench/mix.lua")
	}
	if cfg.Ns == nil {
		cfg.Ns = []int{1, 2}
	}
	if cfg.Modes == nil {
		cfg.Modes = []string{ModeCluster, ModeSingle}
	}
	for _, m := range cfg.Modes {
		if m != ModeCluster && m != ModeSingle && !isPeer(m) {
			return nil, fmt.Errorf("sweep config: mode %q: want %s, %s, %s, %s, %s or %s", m, ModeCluster, ModeSingle, ModePM2, ModeNginx, ModePM2Compress, ModeNginxGzip)
		}
	}
	if cfg.Duration == 0 {
		cfg.Duration = 3 * time.Second
	}
	if cfg.Warmup == 0 {
		cfg.Warmup = time.Second
	}
	if cfg.Duration < time.Second || cfg.Duration%time.Second != 0 || (cfg.Warmup > 0 && cfg.Warmup%time.Second != 0) {
		return nil, fmt.Errorf("sweep config: Duration %v and Warmup %v: want whole seconds (wrk and autocannon count seconds)", cfg.Duration, cfg.Warmup)
	}
	if cfg.ConnsPerWorker <= 0 {
		cfg.ConnsPerWorker = 16
	}
	if cfg.Pipelining <= 0 {
		cfg.Pipelining = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Environ == nil {
		cfg.Environ = os.Environ()
	}
	if cfg.Compress == "" && slices.ContainsFunc(cfg.Workloads, func(w Workload) bool { return requestedCoding(w.Name) != "" }) {
		cfg.Compress = "zstd,br,gzip"
	}
	if cfg.Pin == nil {
		cfg.Pin = tasksetPin
	}
	s := &Sweeper{cfg: cfg, log: cfg.Logger, baseline: make(map[string]baseline),
		progress: newProgressWriter(cfg.Progress, cfg.Logger, time.Now)}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err == nil {
		for c := 0; c < runtime.NumCPU()*4+64 && len(s.allowed) < set.Count(); c++ {
			if set.IsSet(c) {
				s.allowed = append(s.allowed, c)
			}
		}
	}
	for _, n := range cfg.Ns {
		if n < 1 {
			return nil, fmt.Errorf("sweep config: N %d: want at least 1", n)
		}
		if !cfg.NoPin {
			for c := cfg.ServerCPU0; c < cfg.ServerCPU0+n; c++ {
				if !slices.Contains(s.allowed, c) {
					return nil, fmt.Errorf("sweep config: N %d needs cores %d-%d but this process may use only %s (lower N, or set NoPin)",
						n, cfg.ServerCPU0, cfg.ServerCPU0+n-1, FormatCPUList(s.allowed))
				}
			}
		}
	}
	if cfg.Autocannon != "" {
		if st, err := os.Stat(cfg.Autocannon); err == nil && !st.IsDir() {
			s.useAC = true
		} else {
			s.notes = append(s.notes, fmt.Sprintf("autocannon %s not found: every workload ran on wrk", cfg.Autocannon))
		}
	}
	s.findPeers()
	if s.remote() {
		if !s.useAC {
			return nil, fmt.Errorf("sweep config: LoadHosts: autocannon %q not found: the load hosts run it", cfg.Autocannon)
		}
		for _, m := range cfg.Modes {
			if isPeer(m) && s.peers.skip[m] == "" {
				s.peers.skip[m] = "peers listen on loopback: not measured from load hosts"
				s.notes = append(s.notes, fmt.Sprintf("peer %s skipped: it listens on loopback, out of the load hosts' reach", m))
			}
		}
		s.notes = append(s.notes, fmt.Sprintf("the generator (autocannon) ran on %d load host(s) over ssh (%v), each run's connections split between them, "+
			"one start time, the results merged (latency percentiles from the added histograms); the server listened on %s; "+
			"wrk workloads (the mix) are not distributed: skipped", len(cfg.LoadHosts.Hosts), cfg.LoadHosts.Hosts, cfg.ListenHost))
	}
	return s, nil
}

// Notes says what applied to every run (the generator used, shared cores).
func (s *Sweeper) Notes() []string { return s.notes }

// tasksetPin runs argv under taskset.
func tasksetPin(cpus []int, argv []string) []string {
	return append([]string{"taskset", "-c", FormatCPUList(cpus)}, argv...)
}

// serverCPUs are the cores of an N-worker server.
func (s *Sweeper) serverCPUs(n int) []int {
	if s.cfg.NoPin {
		return nil
	}
	var c []int
	for i := 0; i < n; i++ {
		c = append(c, s.cfg.ServerCPU0+i)
	}
	return c
}

// genCPUs are the generator's cores next to an N-worker server, and whether they overlap.
func (s *Sweeper) genCPUs(n int) (cpus []int, shared bool) {
	srv := s.serverCPUs(n)
	if s.remote() {
		return nil, false // on the load hosts
	}
	if s.cfg.NoPin {
		return nil, true
	}
	cpus = s.cfg.GenCPUs
	if cpus == nil {
		for _, c := range s.allowed {
			if !slices.Contains(srv, c) {
				cpus = append(cpus, c)
			}
		}
		if len(cpus) == 0 {
			cpus = s.allowed
		}
	}
	for _, c := range cpus {
		if slices.Contains(srv, c) {
			shared = true
		}
	}
	return cpus, shared
}

// cell is one server start of the sweep: round, N and mode, and the workloads it runs.
type cell struct {
	round, n  int
	mode      string
	workloads []Workload
}

// plan is the sweep's server starts in order: Repeat rounds, each every (N, mode) with the
// workloads that mode serves. Rounds are outermost: repeats of one cell are a whole round
// apart, never back to back.
func (s *Sweeper) plan() []cell {
	var out []cell
	for round := 1; round <= max(s.cfg.Repeat, 1); round++ {
		for _, n := range s.cfg.Ns {
			for _, mode := range s.cfg.Modes {
				wls := s.workloadsFor(mode)
				if len(wls) == 0 || s.peers.skip[mode] != "" {
					continue
				}
				out = append(out, cell{round, n, mode, wls})
			}
		}
	}
	return out
}

// Sweep runs every (N, mode) cell, Repeat rounds over: one server start each, then every
// workload against it, then (at ImbalanceN, in the first round) the few-connection run.
func (s *Sweeper) Sweep(ctx context.Context) (err error) {
	defer func() { s.progress.end(err) }()
	for _, c := range s.plan() {
		n, mode, wls := c.n, c.mode, c.workloads
		if err := ctx.Err(); err != nil {
			return err
		}
		srv, err := s.StartServer(ctx, mode, n)
		if err != nil {
			if !isPeer(mode) || ctx.Err() != nil {
				return err
			}
			// A peer that does not start is that peer's result, not the sweep's end.
			s.log.Warn("peer did not start", zap.String("mode", mode), zap.Int("n", n), zap.Error(err))
			for _, wl := range wls {
				s.emit(Run{Workload: wl.Name, Mode: mode, Purpose: PurposeSweep, N: n, Skipped: err.Error(),
					Round: s.roundOf(c.round), Started: time.Now().UTC().Truncate(time.Millisecond)})
			}
			continue
		}
		for _, wl := range wls {
			if ctx.Err() != nil {
				break
			}
			s.measureQuiet(ctx, srv, wl, MeasureOptions{Purpose: PurposeSweep, Round: s.roundOf(c.round)})
		}
		if mode == ModeCluster && n == s.cfg.ImbalanceN && n > 1 && c.round == 1 && ctx.Err() == nil {
			if wl, ok := s.imbalanceWorkload(); ok {
				c := s.cfg.ImbalanceConns
				if c <= 0 {
					c = n
				}
				s.emit(s.Measure(ctx, srv, wl, MeasureOptions{Purpose: PurposeImbalance, Conns: c, Settle: true}))
			}
		}
		if err := srv.Stop(); err != nil {
			s.log.Warn("stop server", zap.Error(err))
		}
	}
	return ctx.Err()
}

// roundOf is the Round a run records: 0 (not written) when the sweep runs one round.
func (s *Sweeper) roundOf(round int) int {
	if s.cfg.Repeat > 1 {
		return round
	}
	return 0
}

func (s *Sweeper) imbalanceWorkload() (Workload, bool) {
	for _, w := range s.cfg.Workloads {
		if w.Name == s.cfg.ImbalanceWorkload {
			return w, true
		}
	}
	for _, w := range s.cfg.Workloads {
		if w.WrkScript == "" {
			return w, true
		}
	}
	return Workload{}, false
}

// ShapeFunc sets the emulated link's rate and returns the equivalent tc command.
type ShapeFunc func(bitsPerS float64) (string, error)

// NIC runs the workloads on one server (mode, n) once per link rate, shaping the link
// with shape before each rate. The caller has put this process (and so its children) in
// a private network namespace whose loopback shape controls.
func (s *Sweeper) NIC(ctx context.Context, mode string, n int, rates []float64, shape ShapeFunc) (err error) {
	defer func() { s.progress.end(err) }()
	if isPeer(mode) {
		return fmt.Errorf("nic: mode %s: peers are measured in the sweep only", mode)
	}
	srv, err := s.StartServer(ctx, mode, n)
	if err != nil {
		return err
	}
	defer srv.Stop()
	for _, rate := range rates {
		tc, err := shape(rate)
		if err != nil {
			return err
		}
		for _, wl := range s.cfg.Workloads {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.measureQuiet(ctx, srv, wl, MeasureOptions{Purpose: PurposeNIC, LinkBitsPerS: rate, Shaping: tc})
		}
	}
	return nil
}

// measureQuiet measures and reports a run, and runs it again while the host was busy with
// other work during it, at most HostBusyRepeats times: a laptop's or a shared machine's
// neighbours come and go, and a quiet repeat is worth more than a disturbed point.
func (s *Sweeper) measureQuiet(ctx context.Context, srv *Server, wl Workload, o MeasureOptions) {
	repeats := max(s.cfg.HostBusyRepeats, 0)
	measure := s.measure
	if measure == nil {
		measure = s.Measure
	}
	for try := 0; ; try++ {
		r := measure(ctx, srv, wl, o)
		s.emit(r)
		if r.Verdict != VerdictHostBusy || try >= repeats || ctx.Err() != nil {
			return
		}
		s.log.Info("host busy during the run: running it again", zap.String("workload", wl.Name), zap.Int("n", r.N),
			zap.String("evidence", r.Evidence), zap.Int("repeat", try+1), zap.Int("of", repeats))
	}
}

func (s *Sweeper) emit(r Run) {
	s.progress.finish(r)
	if s.cfg.Report != nil {
		s.cfg.Report(r)
	}
}

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
// run with /proc snapshots around it. Failures are recorded in the Run (Skipped).
func (s *Sweeper) Measure(ctx context.Context, srv *Server, wl Workload, o MeasureOptions) Run {
	r := Run{Workload: wl.Name, Mode: srv.Mode, Purpose: o.Purpose, N: srv.N, Writes: wl.Writes, Round: o.Round,
		ServerCommand: srv.Argv, Pipelining: s.cfg.Pipelining, LinkBitsPerS: o.LinkBitsPerS, Shaping: o.Shaping,
		Started: time.Now().UTC().Truncate(time.Millisecond)}
	s.progress.begin(r, max(s.cfg.Warmup, 0)+s.cfg.Duration)
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

	if err := probe(ctx, srv.Addr, wl); err != nil {
		r.Skipped = err.Error()
		return r
	}
	gen := s.generatorFor(wl)
	r.Generator = gen
	if s.remote() {
		if gen != "autocannon" {
			r.Skipped = "wrk workloads are not distributed to load hosts"
			return r
		}
		for _, h := range s.cfg.LoadHosts.Hosts {
			r.LoadHosts = append(r.LoadHosts, h.String())
		}
	}
	// generate runs the generator for d: here, pinned to its cores, or on the load hosts.
	// started and ended (nil: nothing) are called as the load starts and ends.
	generate := func(d time.Duration, started, ended func()) (genResult, []string, error) {
		if s.remote() {
			return s.runRemote(ctx, wl, srv, r.Connections, hostThreads, d, started, ended)
		}
		if started != nil {
			defer ended()
			started()
		}
		argv, err := s.genArgv(gen, wl, srv, r.Connections, r.GenThreads, d)
		if err != nil {
			return genResult{}, nil, err
		}
		if genCPUs != nil {
			argv = s.cfg.Pin(genCPUs, argv)
		}
		res, err := s.runGen(ctx, gen, argv)
		return res, argv, err
	}
	if !s.remote() {
		// The command is recorded before the run (a failed run keeps it); a remote one
		// after, from the first host.
		argv, err := s.genArgv(gen, wl, srv, r.Connections, r.GenThreads, s.cfg.Duration)
		if err != nil {
			r.Skipped = err.Error()
			return r
		}
		if genCPUs != nil {
			argv = s.cfg.Pin(genCPUs, argv)
		}
		r.GenCommand = argv
	}

	if s.cfg.Warmup > 0 {
		if _, _, err := generate(s.cfg.Warmup, nil, nil); err != nil {
			s.log.Warn("warm-up", zap.String("workload", wl.Name), zap.Error(err))
		}
	}
	if o.Settle {
		sleepCtx(ctx, 1100*time.Millisecond)
	}
	var before clusterStatus
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
	// Mid-run, the supervisor's per-worker connection counts (polled once a second).
	mid := make(chan clusterStatus, 1)
	midCtx, midCancel := context.WithCancel(ctx)
	defer midCancel()
	var snap0, snap1 snapshot
	var err0, err1 error
	var t0 time.Time
	var wall float64
	started := func() {
		snap0, err0 = takeSnapshot(tree)
		t0 = time.Now()
		if srv.Mode != ModeCluster {
			mid <- clusterStatus{}
			return
		}
		go func() {
			var st clusterStatus
			wait := max(s.cfg.Duration/2, min(1200*time.Millisecond, s.cfg.Duration-300*time.Millisecond))
			if sleepCtx(midCtx, wait) {
				st, _ = srv.status(midCtx)
			}
			mid <- st
		}()
	}
	ended := func() {
		wall = time.Since(t0).Seconds()
		snap1, err1 = takeSnapshot(tree)
		midCancel()
	}
	res, argv, genErr := generate(s.cfg.Duration, started, ended)
	if s.remote() {
		r.GenCommand = argv
	}
	if t0.IsZero() { // the load never started (a host failed first)
		mid <- clusterStatus{}
	}
	if err0 != nil {
		genErr = err0
	}
	midSt := <-mid
	if genErr != nil {
		r.Skipped = genErr.Error()
		return r
	}
	if err1 != nil {
		r.Skipped = err1.Error()
		return r
	}
	o2 := res.outcome
	r.DurationS = round(o2.DurationS, 3)
	if r.DurationS <= 0 {
		r.DurationS = round(wall, 3)
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
	active := r.DurationS
	if active <= 0 || active > wall {
		active = wall
	}
	user := (snap1.tree.User - snap0.tree.User).Seconds()
	sys := (snap1.tree.System - snap0.tree.System).Seconds()
	r.ServerPeakRSS = snap1.tree.RSS
	r.ServerBusyCores = round((user+sys)/active, 3)
	if o2.Requests > 0 {
		r.ServerUserUsPerReq = round(user*1e6/float64(o2.Requests), 2)
		r.ServerSysUsPerReq = round(sys*1e6/float64(o2.Requests), 2)
		r.ServerCPUUsPerReq = round((user+sys)*1e6/float64(o2.Requests), 2)
		r.GenUsPerReq = round(res.cpuS*1e6/float64(o2.Requests), 2)
	}
	r.GenBusyCores = round(res.cpuS/active, 3)
	h := snap1.host.CPUSince(snap0.host)
	r.Host = HostCPU{round(h.User, 1), round(h.System, 1), round(h.Idle, 1), round(h.IOWait, 1), round(h.SoftIRQ, 1), round(h.Steal, 1)}
	r.HostCores = len(snap1.host.CPUs)
	// Loopback's transmitted bytes alone: each byte between generator and server passes
	// lo once, counted once as sent and once as received.
	if lo := snap1.host.LoTxBytes - snap0.host.LoTxBytes; lo >= 0 {
		r.LoBytesPerS = round(float64(lo)/active, 0)
	}
	r.ErrorText = errorText(res.stderr, srv.logPath, logOff)
	if srv.Mode == ModeCluster {
		after := before
		if o.Settle {
			sleepCtx(ctx, 1100*time.Millisecond)
		}
		if st, err := srv.status(ctx); err == nil {
			after = st
		}
		r.Workers = shares(before, after, midSt)
		r.Steering = before.Steering
		r.WritePath = writePathOf(before, after, r.RPS, r.Connections)
	}
	// The sqlite verdict compares p99 with the same workload's at the sweep's smallest N.
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
	e := EvidenceOf(r, base)
	e.BaselineCPUUs = baseCPU
	r.Verdict, r.Evidence = Judge(e, s.cfg.Thresholds)
	return r
}

// shares is each worker's requests between two status snapshots and connections mid-run.
func shares(before, after, mid clusterStatus) []WorkerShare {
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

// Tail is the last n bytes of b, trimmed: the end of a process's output for an error.
func Tail(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// CopyFile copies the database src to dst, removing dst's -wal and -shm first: a fresh copy
// of the seed for a server.
func CopyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	for _, suf := range []string{"-wal", "-shm"} {
		os.Remove(dst + suf)
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
