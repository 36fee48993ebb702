package ceiling

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/loadhosts"
)

// Workload is one kind of request the sweep sends.
type Workload struct {
	Name    string
	Method  string   // default GET
	Path    string   // with a leading slash
	Headers []string // "Name: value"
	Body    string
	// Writes: the workload writes to SQLite (it is judged for lock waits).
	Writes bool
	// WrkScript: a wrk Lua script that builds the requests itself (the challenge mix).
	// Such a workload runs on wrk whatever generator the others use, until the
	// autocannon clone can send a mix. Its Path and Method are then only the probe.
	WrkScript string
}

// DefaultWorkloads are the sweep's five workloads; mixScript is bench/mix.lua.
func DefaultWorkloads(mixScript string) []Workload {
	return []Workload{
		{Name: "hello", Path: "/api/hello"},
		{Name: "static", Path: "/static/catalog.html"},
		{Name: "feed", Path: "/feed"},
		{Name: "heavy", Method: "PATCH", Path: "/api/resource/123",
			Headers: []string{"Content-Type: application/json"}, Body: `{"foo1":"bar"}`},
		// Last: it writes, and the server's copy of the seed is not reset between workloads.
		{Name: "mix", Path: "/feed", Writes: true, WrkScript: mixScript},
	}
}

// SelectWorkloads returns the named workloads of all, in all's order.
func SelectWorkloads(all []Workload, names []string) ([]Workload, error) {
	var out []Workload
	for _, n := range names {
		i := slices.IndexFunc(all, func(w Workload) bool { return w.Name == n })
		if i < 0 {
			var known []string
			for _, w := range all {
				known = append(known, w.Name)
			}
			return nil, fmt.Errorf("select workloads: unknown workload %q (known: %s)", n, strings.Join(known, ", "))
		}
	}
	for _, w := range all {
		if slices.Contains(names, w.Name) {
			out = append(out, w)
		}
	}
	return out, nil
}

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
	// Modes: ModeCluster, ModeSingle and the peers ModePM2 and ModeNginx; default
	// cluster, single. A peer runs only the workload it stands in for (ServesWorkload),
	// and is skipped with a note (Notes) when its programs or files are missing.
	Modes []string

	// PeerHeavyDir: the Fastify heavy PATCH peer for ModePM2, a directory with heavy.js
	// and its node_modules (a copy of the node-heavy peer after `npm install`). Default
	// "": ModePM2 is skipped.
	PeerHeavyDir string
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
	Logger          *zap.Logger // default nop
	// Report receives each run as it finishes (print it, write it); may be nil.
	Report func(Run)
	// Environ is the children's base environment; default os.Environ().
	Environ []string
	// ListenHost is the address the cluster and the single worker listen on (port 0);
	// default 127.0.0.1. With LoadHosts: one every host reaches.
	ListenHost string
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
	if cfg.SeedDB == "" {
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
			return nil, fmt.Errorf("sweep config: mode %q: want %s, %s, %s or %s", m, ModeCluster, ModeSingle, ModePM2, ModeNginx)
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

// Sweep runs every (N, mode) cell: one server start each, then every workload against
// it, then (at ImbalanceN) the few-connection run.
func (s *Sweeper) Sweep(ctx context.Context) (err error) {
	defer func() { s.progress.end(err) }()
	for _, n := range s.cfg.Ns {
		for _, mode := range s.cfg.Modes {
			if err := ctx.Err(); err != nil {
				return err
			}
			wls := s.workloadsFor(mode)
			if len(wls) == 0 || s.peers.skip[mode] != "" {
				continue
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
						Started: time.Now().UTC().Truncate(time.Millisecond)})
				}
				continue
			}
			for _, wl := range wls {
				if ctx.Err() != nil {
					break
				}
				s.measureQuiet(ctx, srv, wl, MeasureOptions{Purpose: PurposeSweep})
			}
			if mode == ModeCluster && n == s.cfg.ImbalanceN && n > 1 && ctx.Err() == nil {
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
	}
	return ctx.Err()
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

// Server is one running server: the supervisor with its workers, one worker, or a peer
// (PM2 with its workers, nginx with its workers).
type Server struct {
	Mode string
	N    int
	Addr string
	Argv []string // the command as started (after pinning), with its environment prefix
	CPUs []int

	pid     int   // the root process: the generator's --server-pid
	roots   []int // the trees whose CPU is the server's; nil: pid's
	stop    func() error
	cmd     *exec.Cmd
	socket  string
	sup     string
	db      string
	logPath string
	environ []string
	exited  chan struct{}
	waitErr error
}

// StartServer copies the seed and starts a server of mode with n workers (or
// GOMAXPROCS=n), pinned to its cores, and waits until it serves.
func (s *Sweeper) StartServer(ctx context.Context, mode string, n int) (*Server, error) {
	s.serverSeq++
	dir := filepath.Join(s.cfg.WorkDir, fmt.Sprintf("server-%d-%s-%d", s.serverSeq, mode, n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	srv := &Server{Mode: mode, N: n, CPUs: s.serverCPUs(n), db: filepath.Join(dir, "feed.db"),
		socket: filepath.Join(dir, "sup.sock"), sup: s.cfg.Supervisor, logPath: filepath.Join(dir, "server.log"),
		environ: s.cfg.Environ, exited: make(chan struct{})}
	switch mode {
	case ModePM2:
		return s.startPM2(ctx, srv, dir)
	case ModeNginx:
		return s.startNginx(ctx, srv, dir)
	}
	if err := CopyFile(s.cfg.SeedDB, srv.db); err != nil {
		return nil, fmt.Errorf("start server: copy seed: %w", err)
	}
	env := []string{"SQLITE_PATH=" + srv.db, "JWT_SECRET=" + s.cfg.JWTSecret}
	var argv []string
	if mode == ModeCluster {
		env = append(env, "LOG_LEVEL=warn")
		argv = []string{s.cfg.Supervisor, "run", "-config", s.cfg.ClusterConfig, "-instances", strconv.Itoa(n),
			"-listen", net.JoinHostPort(s.cfg.ListenHost, "0"), "-socket", srv.socket, "-log-level", "warn"}
	} else {
		// info: the worker's "serving" line says which port it bound.
		env = append(env, "LOG_LEVEL=info", "HOST="+s.cfg.ListenHost, "PORT=0", "GOMAXPROCS="+strconv.Itoa(n))
		argv = []string{s.cfg.Worker}
	}
	if srv.CPUs != nil {
		argv = s.cfg.Pin(srv.CPUs, argv)
	}
	if err := s.spawn(srv, "server", "", argv, env); err != nil {
		return nil, err
	}
	s.log.Info("server started", zap.String("mode", mode), zap.Int("n", n), zap.Int("pid", srv.pid))

	ready := func() bool {
		if mode == ModeCluster {
			if st, err := srv.status(ctx); err == nil && st.Addr != "" && st.online() == n {
				srv.Addr = st.Addr
			}
		} else {
			srv.Addr = servingAddr(srv.logPath)
		}
		return srv.Addr != ""
	}
	if err := srv.waitReady(ctx, "server", "not serving", ready); err != nil {
		return nil, err
	}
	return srv, nil
}

// spawn starts argv (in dir; "" the sweep's) with env added to the sweep's environment,
// its output in the server's log, killed if the sweep dies (Pdeathsig: the servers die
// with the sweep even if it is killed), and reaped by a goroutine that closes srv.exited.
// what names the server in errors.
func (s *Sweeper) spawn(srv *Server, what, dir string, argv, env []string) error {
	srv.Argv = append(append([]string(nil), env...), argv...)
	logf, err := os.Create(srv.logPath)
	if err != nil {
		return fmt.Errorf("start %s: %w", what, err)
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(append([]string(nil), s.cfg.Environ...), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s %s: %w", what, argv[0], err)
	}
	srv.cmd, srv.pid = cmd, cmd.Process.Pid
	go func() { srv.waitErr = cmd.Wait(); close(srv.exited) }()
	return nil
}

// waitReady polls ready every 100 ms for up to 60 s. When the server exits first, the
// context ends or the time runs out, it stops the server and says why, with the tail of
// the server's log; notReady says what was still missing at the deadline.
func (srv *Server) waitReady(ctx context.Context, what, notReady string, ready func() bool) error {
	deadline := time.Now().Add(60 * time.Second)
	for !ready() {
		select {
		case <-srv.exited:
			srv.Stop()
			b, _ := os.ReadFile(srv.logPath)
			return fmt.Errorf("start %s: %s exited (%v): %s", what, srv.cmd.Args[0], srv.waitErr, Tail(plain(b), 600))
		case <-ctx.Done():
			srv.Stop()
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			srv.Stop()
			b, _ := os.ReadFile(srv.logPath)
			return fmt.Errorf("start %s: %s after 60 s: %s", what, notReady, Tail(plain(b), 600))
		}
	}
	return nil
}

// PID is the server's root process (the supervisor, the worker, PM2's God daemon, or
// nginx's master).
func (srv *Server) PID() int { return srv.pid }

// sampled are the roots of the process trees whose CPU the server's is.
func (srv *Server) sampled() []int {
	if len(srv.roots) > 0 {
		return srv.roots
	}
	return []int{srv.pid}
}

// Stop stops the server gracefully (SIGTERM; a peer its own way), killing it after 10 s,
// and removes its database copy.
func (srv *Server) Stop() error {
	if srv.stop != nil {
		return srv.stop()
	}
	if srv.cmd == nil {
		return nil
	}
	select {
	case <-srv.exited:
	default:
		srv.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-srv.exited:
		case <-time.After(10 * time.Second):
			srv.cmd.Process.Kill()
			<-srv.exited
		}
	}
	for _, suf := range []string{"", "-wal", "-shm"} {
		os.Remove(srv.db + suf)
	}
	var ee *exec.ExitError
	if srv.waitErr != nil && !errors.As(srv.waitErr, &ee) {
		return fmt.Errorf("stop server: %w", srv.waitErr)
	}
	return nil
}

// clusterStatus is `supervisor status -json` (cmd/supervisor's statusReply).
type clusterStatus struct {
	Addr     string `json:"addr"`
	Steering string `json:"steering"`
	Workers  []struct {
		ID          int    `json:"id"`
		PID         int    `json:"pid"`
		Status      string `json:"status"`
		Requests    uint64 `json:"requests"`
		Connections int64  `json:"connections"`
	} `json:"workers"`
}

func (st clusterStatus) online() int {
	n := 0
	for _, w := range st.Workers {
		if w.Status == "online" {
			n++
		}
	}
	return n
}

// status runs `supervisor status -json` against a cluster server.
func (srv *Server) status(ctx context.Context) (clusterStatus, error) {
	var st clusterStatus
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, srv.sup, "status", "-json", "-socket", srv.socket)
	cmd.Env = srv.environ
	out, err := cmd.Output()
	if err != nil {
		return st, fmt.Errorf("supervisor status: %w", err)
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("decode supervisor status: %w", err)
	}
	return st, nil
}

// servingAddr finds the worker's `"msg":"serving"` log line and returns its addr.
func servingAddr(logPath string) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var l struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "serving" && l.Addr != "" {
			return l.Addr
		}
	}
	return ""
}

// MeasureOptions vary one measured run.
type MeasureOptions struct {
	Purpose      string
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
	r := Run{Workload: wl.Name, Mode: srv.Mode, Purpose: o.Purpose, N: srv.N, Writes: wl.Writes,
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

// generatorFor picks wrk for scripted workloads or when autocannon is absent.
func (s *Sweeper) generatorFor(wl Workload) string {
	if s.useAC && wl.WrkScript == "" {
		return "autocannon"
	}
	return "wrk"
}

// genArgv is the generator's command for one run of d.
func (s *Sweeper) genArgv(gen string, wl Workload, srv *Server, conns, threads int, d time.Duration) ([]string, error) {
	url := "http://" + srv.Addr + wl.Path
	secs := strconv.Itoa(int(d / time.Second))
	method := wl.Method
	if method == "" {
		method = "GET"
	}
	if gen == "autocannon" {
		argv := s.autocannonArgv(s.cfg.Autocannon, wl, srv.Addr, conns, threads, d)
		// The generator samples the server's tree beside its load (kept in its report).
		return append(argv[:len(argv)-1], "--server-pid", strconv.Itoa(srv.PID()), argv[len(argv)-1]), nil
	}
	script := filepath.Join(s.cfg.WorkDir, "wrk-"+wl.Name+".lua")
	include := ""
	if wl.WrkScript != "" {
		abs, err := filepath.Abs(wl.WrkScript)
		if err != nil {
			return nil, fmt.Errorf("wrk script: %w", err)
		}
		include = abs
		url = "http://" + srv.Addr + "/"
	}
	if err := os.WriteFile(script, []byte(WrkScript(method, wl.Headers, wl.Body, include)), 0o644); err != nil {
		return nil, fmt.Errorf("write wrk script: %w", err)
	}
	if s.cfg.Pipelining > 1 {
		s.log.Warn("wrk does not pipeline: running with one request in flight per connection", zap.String("workload", wl.Name))
	}
	return []string{s.cfg.Wrk, "-t", strconv.Itoa(threads), "-c", strconv.Itoa(conns), "-d", secs + "s",
		"--timeout", "10s", "-s", script, url}, nil
}

// autocannonArgv is autocannon's command (the binary bin) for one run of d against the
// server at addr, its URL last.
func (s *Sweeper) autocannonArgv(bin string, wl Workload, addr string, conns, threads int, d time.Duration) []string {
	method := wl.Method
	if method == "" {
		method = "GET"
	}
	argv := []string{bin, "-c", strconv.Itoa(conns), "-p", strconv.Itoa(s.cfg.Pipelining),
		"-d", strconv.Itoa(int(d / time.Second)), "-w", strconv.Itoa(threads), "-j", "-n", "-m", method}
	for _, h := range wl.Headers {
		argv = append(argv, "-H", h)
	}
	if wl.Body != "" {
		argv = append(argv, "-b", wl.Body)
	}
	return append(argv, "http://"+addr+wl.Path)
}

type genResult struct {
	outcome Outcome
	cpuS    float64 // the generator's user+system seconds
	stderr  []byte
}

// runGen runs one generator command and parses its report.
func (s *Sweeper) runGen(ctx context.Context, gen string, argv []string) (genResult, error) {
	var res genResult
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(append([]string(nil), s.cfg.Environ...), "TOKENS="+s.cfg.Tokens)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	res.stderr = stderr.Bytes()
	if cmd.ProcessState != nil {
		res.cpuS = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	}
	if err != nil {
		return res, fmt.Errorf("run %s: %w: %s", filepath.Base(argv[0]), err, Tail(append(stdout.Bytes(), stderr.Bytes()...), 400))
	}
	if gen == "autocannon" {
		_, res.outcome, err = ParseAutocannon(stdout.Bytes())
	} else {
		res.outcome, err = ParseWrk(stdout.Bytes())
	}
	if err != nil {
		return res, fmt.Errorf("%w: %s", err, Tail(append(stdout.Bytes(), stderr.Bytes()...), 400))
	}
	return res, nil
}

// probe sends one request of the workload and fails unless it is answered 2xx or 3xx.
func probe(ctx context.Context, addr string, wl Workload) error {
	method := wl.Method
	if method == "" || wl.WrkScript != "" {
		method = "GET"
	}
	var body io.Reader
	if wl.Body != "" && wl.WrkScript == "" {
		body = strings.NewReader(wl.Body)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+wl.Path, body)
	if err != nil {
		return fmt.Errorf("probe %s: %w", wl.Path, err)
	}
	for _, h := range wl.Headers {
		if k, v, ok := strings.Cut(h, ":"); ok {
			req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("probe %s %s: %w", method, wl.Path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		return fmt.Errorf("probe %s %s: %s (route missing in this worker?)", method, wl.Path, resp.Status)
	}
	return nil
}

// errorText collects error lines worth a verdict: the generator's stderr and the server
// log written during the run.
func errorText(genStderr []byte, logPath string, off int64) string {
	var lines []string
	keep := func(b []byte) {
		for _, l := range strings.Split(string(b), "\n") {
			ll := strings.ToLower(l)
			if fdError(ll) != "" || strings.Contains(ll, "error") || strings.Contains(ll, "warn") {
				lines = append(lines, strings.TrimSpace(l))
			}
		}
	}
	keep(genStderr)
	if f, err := os.Open(logPath); err == nil {
		if _, err := f.Seek(off, io.SeekStart); err == nil {
			b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
			keep(b)
		}
		f.Close()
	}
	s := strings.Join(lines, " | ")
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}

func fileSize(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return st.Size()
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
