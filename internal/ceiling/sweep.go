// The sweep's configuration and its setup: SweepConfig and its defaults, NewSweeper's
// checks (binaries, cores, the generator, peers, load hosts), and the cores each run's
// server and generator are pinned to.

package ceiling

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/configs"
	"github.com/onehost/onehost/internal/loadhosts"
)

// SweepConfig configures a Sweeper. The zero value of each field is its documented
// default, except SeedDB and WorkDir, which are required.
type SweepConfig struct {
	Supervisor    string // supervisor binary; default "bin/supervisor"
	Worker        string // worker binary; default "bin/worker"
	Autocannon    string // autocannon binary; "" or absent: every workload runs on wrk
	Wrk           string // wrk binary; default "wrk"
	ClusterConfig string // default: configs/cluster.yaml as built in (package configs), written into WorkDir
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
	// SingleProcs is the single mode's GOMAXPROCS as a multiple of the N cores it is given;
	// 0 or 1: N. At 2, one process on a 2-core host shared with the generator used the
	// cores the cluster used (docs/results/single-2026-12-05-2cpu); the run's server_cores
	// stay N, its command says the GOMAXPROCS.
	SingleProcs int
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
	// Progress: keep this file (progress.FileName in the results directory) saying which run is
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
	if s.cfg.ClusterConfig == "" && !app {
		// The one this binary carries, so that the sweep runs from any directory.
		var err error
		if s.cfg.ClusterConfig, err = configs.WriteCluster(cfg.WorkDir); err != nil {
			return nil, fmt.Errorf("sweep config: write the built-in cluster configuration: %w", err)
		}
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
