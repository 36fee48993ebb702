// One database for the fleet, measured (`ceiling fleet -log`): H namespace hosts, each
// `supervisor run` on its own copy of the seed, for H ≥ 2 with `-fleet` (every write through
// the write log, applied on every host), behind HAProxy (the production rendering, checks
// and agents each second); H = 1 is the anchor, the single host without a log. Per H, on a
// fresh fleet: the challenge's mix and likes alone (closed loop, req/s, p50/p99 of reads and
// writes), writes at a fixed rate (write p50/p99 and, H ≥ 2, publish → applied lag per host
// from the hosts' own reports), CPU per read on one host (its process tree, the log node
// apart), and with -faults at the largest H the outages: the stream leader's host killed
// -9, the leader's host stopped by `supervisor kill`, a node killed -9 under its host's
// applier. The generator is this namespace's, in Go (no stickiness, keep-alive).
//
// Files: fleetlog.go holds the configuration, the fleet's start and the phases;
// fleetlogload.go the load and its histograms; fleetlogfaults.go the faults and the lag.

package ceiling

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/balancer"
	"github.com/onehost/onehost/internal/fleetns"
)

// FleetLogConfig configures FleetLog.
type FleetLogConfig struct {
	// Bin is the directory of supervisor, worker and lognode (make build's bin/). Required.
	Bin string
	// SeedDB is the seed every host copies; required. Users and posts are read from it.
	SeedDB string
	// JWTSecret signs the generator's tokens; default a fixed test secret.
	JWTSecret string
	// HAProxyTemplate is configs/haproxy/haproxy.cfg; required.
	HAProxyTemplate []byte
	// Hosts are the fleet sizes; default 1, 2, 3 (1: no log, the anchor).
	Hosts []int
	// N is each host's workers; default 1.
	N int
	// Conns is the generator's connections for the closed-loop phases; default 32.
	Conns int
	// Duration and Warmup of each phase; default 10 s and 2 s; a negative Warmup: none.
	Duration, Warmup time.Duration
	// Rate is the fixed-rate phase's writes per second, over all hosts; default 2000.
	Rate int
	// Repeat: rounds of everything (a fresh fleet each); default 1.
	Repeat int
	// Faults runs the outages at the largest H (3 at least).
	Faults bool
	// Phases are the phases to run, of pairs, mix, likes, rate, reads; default all.
	Phases []string
	// Sync is the fleet's -fleet-sync ("" or "always").
	Sync string
	// WorkDir holds the hosts' files; required.
	WorkDir string
	// Logger; default none.
	Logger *zap.Logger
	// Report receives each result as it is measured.
	Report func(FleetLogRun)
}

// FleetLogRun is one measured phase.
type FleetLogRun struct {
	Phase string `json:"phase"` // pairs, mix, likes, rate, reads, leader-kill, leader-stop, node-kill
	Hosts int    `json:"hosts"`
	Log   bool   `json:"log"`
	Sync  string `json:"sync,omitempty"`
	Round int    `json:"round"`

	Requests  int64              `json:"requests,omitempty"`
	Errors    int64              `json:"errors,omitempty"`
	RPS       float64            `json:"rps,omitempty"`
	ReadP50   float64            `json:"read_p50_ms,omitempty"`
	ReadP99   float64            `json:"read_p99_ms,omitempty"`
	Writes    int64              `json:"writes,omitempty"`
	WritesPS  float64            `json:"writes_per_s,omitempty"`
	WriteP50  float64            `json:"write_p50_ms,omitempty"`
	WriteP99  float64            `json:"write_p99_ms,omitempty"`
	WriteMax  float64            `json:"write_max_ms,omitempty"`
	LagP50    map[string]float64 `json:"lag_p50_ms,omitempty"` // per host: publish → applied
	LagP99    map[string]float64 `json:"lag_p99_ms,omitempty"`
	CPUPerReq float64            `json:"cpu_us_per_req,omitempty"` // the host's tree, its node excluded
	// FleetCPUPerReq: every host's processes (log nodes included) per request through
	// the balancer: what one request costs the whole fleet (HAProxy and the generator not
	// counted).
	FleetCPUPerReq float64 `json:"fleet_cpu_us_per_req,omitempty"`
	NodeCPU        float64 `json:"node_cpu_us_per_req,omitempty"`
	OutageS        float64 `json:"outage_s,omitempty"`
	Stale          int     `json:"stale,omitempty"`
	Pairs          int     `json:"pairs,omitempty"`
	Repeated       int     `json:"repeated_likes,omitempty"`
	Files          string  `json:"files,omitempty"` // "identical", or the digests that differ
	Lost           int     `json:"acked_lost,omitempty"`
	Reused         int     `json:"ids_reused,omitempty"`
	Note           string  `json:"note,omitempty"`
}

// Line is the run in one line for a terminal.
func (r FleetLogRun) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-11s H=%d log=%-5v", r.Phase, r.Hosts, r.Log)
	if r.RPS > 0 {
		fmt.Fprintf(&b, " %8.0f req/s (%d errors)", r.RPS, r.Errors)
	}
	if r.ReadP99 > 0 {
		fmt.Fprintf(&b, " read p50/p99 %.2f/%.2f ms", r.ReadP50, r.ReadP99)
	}
	if r.WritesPS > 0 {
		fmt.Fprintf(&b, " writes %.0f/s p50/p99 %.2f/%.2f ms", r.WritesPS, r.WriteP50, r.WriteP99)
	}
	for h, v := range r.LagP50 {
		fmt.Fprintf(&b, " lag[%s] %.2f/%.2f", h, v, r.LagP99[h])
	}
	if r.FleetCPUPerReq > 0 {
		fmt.Fprintf(&b, " fleet cpu %.0f µs/req", r.FleetCPUPerReq)
	}
	if r.CPUPerReq > 0 {
		fmt.Fprintf(&b, " cpu %.1f µs/req (node %.1f)", r.CPUPerReq, r.NodeCPU)
	}
	if r.OutageS > 0 && r.Phase == "node-kill" {
		fmt.Fprintf(&b, " applier stalled %.2f s", r.OutageS)
	} else if r.OutageS > 0 {
		fmt.Fprintf(&b, " outage %.2f s, %d writes acknowledged: lost %d, ids reused %d", r.OutageS, r.Writes, r.Lost, r.Reused)
	}
	if r.Pairs > 0 {
		fmt.Fprintf(&b, " %d of %d POST→GET pairs stale, ids reused %d, repeated likes accepted %d, files %s", r.Stale, r.Pairs, r.Reused, r.Repeated, r.Files)
	}
	if r.Note != "" {
		b.WriteString(" — " + r.Note)
	}
	return b.String()
}

// FleetLog runs the measurement.
type FleetLog struct {
	cfg          FleetLogConfig
	log          *zap.Logger
	users, posts int64
}

// NewFleetLog checks cfg.
func NewFleetLog(cfg FleetLogConfig) (*FleetLog, error) {
	if cfg.Bin == "" || cfg.SeedDB == "" || cfg.WorkDir == "" || len(cfg.HAProxyTemplate) == 0 {
		return nil, errors.New("fleet log config: Bin, SeedDB, WorkDir and HAProxyTemplate are required")
	}
	for _, p := range []string{"supervisor", "worker", "lognode"} {
		if _, err := os.Stat(filepath.Join(cfg.Bin, p)); err != nil {
			return nil, fmt.Errorf("fleet log: %w (make build)", err)
		}
	}
	if cfg.Hosts == nil {
		cfg.Hosts = []int{1, 2, 3}
	}
	if cfg.Phases == nil {
		cfg.Phases = []string{"pairs", "mix", "likes", "rate", "reads"}
	}
	for _, p := range cfg.Phases {
		switch p {
		case "pairs", "mix", "likes", "rate", "reads":
		default:
			return nil, fmt.Errorf("fleet log config: phase %q: want pairs, mix, likes, rate or reads", p)
		}
	}
	if cfg.N <= 0 {
		cfg.N = 1
	}
	if cfg.Conns <= 0 {
		cfg.Conns = 32
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.Warmup < 0 {
		cfg.Warmup = 0
	} else if cfg.Warmup == 0 {
		cfg.Warmup = 2 * time.Second
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 2000
	}
	if cfg.JWTSecret == "" {
		cfg.JWTSecret = "ceiling-fleet-log-secret-0123456789abcdef"
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	users, posts, err := seedSize(cfg.SeedDB)
	if err != nil {
		return nil, err
	}
	return &FleetLog{cfg: cfg, log: cfg.Logger, users: users, posts: posts}, nil
}

// logHost is one running host.
type logHost struct {
	name, addr, ns, dir, db string
	cmd                     *exec.Cmd
	done                    chan struct{}
}

func (h *logHost) url() string { return "http://" + net.JoinHostPort(h.addr, "3000") }

// logFleet is one running fleet.
type logFleet struct {
	net   *fleetns.Net
	hosts []*logHost
	list  string // the -fleet list every host runs with: hI=ADDR,...
	hp    *balancer.HAProxy
	lb    string // http://ADDR:PORT
	log   bool
}

// Run runs every round and fleet size.
func (f *FleetLog) Run(ctx context.Context) error {
	for round := 1; round <= max(f.cfg.Repeat, 1); round++ {
		for i, h := range f.cfg.Hosts {
			faults := f.cfg.Faults && i == len(f.cfg.Hosts)-1 && h >= 3
			if err := f.runFleet(ctx, round, h, faults); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *FleetLog) report(r FleetLogRun) {
	f.log.Info("measured", zap.String("line", r.Line()))
	if f.cfg.Report != nil {
		f.cfg.Report(r)
	}
}

func (f *FleetLog) runFleet(ctx context.Context, round, n int, faults bool) error {
	nw, cleanup, err := fleetns.Make(n)
	defer cleanup()
	if err != nil {
		return err
	}
	fl, err := f.start(ctx, nw, round, n > 1)
	defer f.stop(fl)
	if err != nil {
		return err
	}
	base := FleetLogRun{Hosts: n, Log: fl.log, Round: round}
	if fl.log {
		base.Sync = f.cfg.Sync
	}
	tok := newTokens(f.cfg.JWTSecret, f.users)
	for _, phase := range f.cfg.Phases {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r := base
		r.Phase = phase
		if err := f.phase(ctx, fl, tok, &r); err != nil {
			return fmt.Errorf("fleet log: H=%d %s: %w", n, phase, err)
		}
		f.report(r)
	}
	if faults {
		return f.faults(ctx, fl, tok, base)
	}
	return nil
}

// start starts the hosts (the seed copied for each), HAProxy in front, and waits until
// every host is UP.
func (f *FleetLog) start(ctx context.Context, nw *fleetns.Net, round int, withLog bool) (*logFleet, error) {
	fl := &logFleet{net: nw, log: withLog}
	var list []string
	for i, h := range nw.Hosts {
		list = append(list, fmt.Sprintf("h%d=%s", i+1, h.Addr))
	}
	fl.list = strings.Join(list, ",")
	for i, ns := range nw.Hosts {
		dir := filepath.Join(f.cfg.WorkDir, fmt.Sprintf("r%d-h%d-of-%d", round, i+1, len(nw.Hosts)))
		os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fl, err
		}
		h := &logHost{name: fmt.Sprintf("h%d", i+1), addr: ns.Addr, ns: ns.Name, dir: dir, db: filepath.Join(dir, "feed.db")}
		if err := CopyFile(f.cfg.SeedDB, h.db); err != nil {
			return fl, err
		}
		fl.hosts = append(fl.hosts, h)
		if err := f.startHost(fl, h); err != nil {
			return fl, err
		}
	}
	for _, h := range fl.hosts {
		if err := waitHealth(ctx, h.url(), 120*time.Second); err != nil {
			return fl, fmt.Errorf("host %s: %w (its log: %s)", h.name, err, filepath.Join(h.dir, "sup.log"))
		}
	}
	var servers []balancer.Server
	for _, h := range fl.hosts {
		servers = append(servers, balancer.Server{Addr: net.JoinHostPort(h.addr, "3000")})
	}
	addr := net.JoinHostPort(nw.LB.Addr, "8080")
	hp, err := startHAProxy(ctx, f.cfg.HAProxyTemplate, haproxyAt{
		dir:    filepath.Join(f.cfg.WorkDir, fmt.Sprintf("haproxy-r%d-h%d", round, len(nw.Hosts))),
		log:    filepath.Join(f.cfg.WorkDir, fmt.Sprintf("haproxy-r%d-h%d.log", round, len(nw.Hosts))),
		listen: addr, servers: servers, threads: 1, wrap: fleetns.Wrap(nw.LB.Name)})
	if err != nil {
		return fl, err
	}
	fl.hp, fl.lb = hp, "http://"+addr
	if err := waitUp(ctx, hp, len(servers)); err != nil {
		return fl, err
	}
	return fl, nil
}

// startHost starts h's supervisor (again, with the same files, after a kill).
func (f *FleetLog) startHost(fl *logFleet, h *logHost) error {
	args := []string{filepath.Join(f.cfg.Bin, "supervisor"), "run", "-socket", filepath.Join(h.dir, "sup.sock"),
		"-listen", net.JoinHostPort(h.addr, "3000"), "-instances", strconv.Itoa(f.cfg.N),
		"-agent", net.JoinHostPort(h.addr, strconv.Itoa(balancer.DefaultAgentPort)),
		"-log-format", "json", "-log-file", filepath.Join(h.dir, "sup.log"), "-log-level", "warn"}
	if fl.log {
		args = append(args, "-fleet", fl.list, "-fleet-self", h.name, "-fleet-dir", filepath.Join(h.dir, "log"))
		if f.cfg.Sync != "" {
			args = append(args, "-fleet-sync", f.cfg.Sync)
		}
	}
	h.cmd = fleetns.Command(h.ns, args...)
	// No snapshots during a measurement (a 250 MB VACUUM INTO and its upload would be
	// measured with the writes): ONEHOST_FLEET_SNAPSHOT_EVERY=0.
	h.cmd.Env = append(os.Environ(), "SQLITE_PATH="+h.db, "JWT_SECRET="+f.cfg.JWTSecret, "LOG_LEVEL=warn",
		"PRODUCTS_PATH="+filepath.Join(h.dir, "products.db"), "ONEHOST_FLEET_SNAPSHOT_EVERY=0")
	if err := h.cmd.Start(); err != nil {
		return err
	}
	h.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(h.cmd, h.done) // reaps it
	return nil
}

// killHost kills -9 every process of the host's namespace (its power cut).
func killHost(h *logHost) {
	fleetns.KillAll(h.ns, 50, 20*time.Millisecond)
	if h.done != nil {
		<-h.done
	}
}

// supervisorKill runs `supervisor kill` on h: its supervisor stops its apps and exits.
func (f *FleetLog) supervisorKill(h *logHost) {
	exec.Command(filepath.Join(f.cfg.Bin, "supervisor"), "kill", "-socket", filepath.Join(h.dir, "sup.sock")).Run()
}

func (f *FleetLog) stop(fl *logFleet) {
	if fl == nil {
		return
	}
	if fl.hp != nil {
		fl.hp.Stop()
	}
	for _, h := range fl.hosts {
		if h.cmd != nil {
			f.supervisorKill(h)
			select {
			case <-h.done:
			case <-time.After(15 * time.Second):
			}
			killHost(h)
		}
	}
}

// waitHealth waits until url's /health answers 200.
func waitHealth(ctx context.Context, url string, within time.Duration) error {
	c := newLoadClient(1)
	for deadline := time.Now().Add(within); time.Now().Before(deadline); {
		if st, _, err := c.do(ctx, "GET", url+"/health", "", ""); err == nil && st == 200 {
			return nil
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("%s/health not 200 after %v", url, within)
}

// pid is the pid of h's supervisor, 0 before it started.
func (h *logHost) pid() int {
	if h.cmd == nil || h.cmd.Process == nil {
		return 0
	}
	return h.cmd.Process.Pid
}

// hostCPU reads the CPU time of h's processes: its whole tree and its log node's.
func hostCPU(h *logHost) (all, node time.Duration) {
	pid := h.pid()
	if pid == 0 {
		return 0, 0
	}
	all = treeCPU(pid)
	if pid, err := nodePID(h); err == nil {
		node = treeCPU(pid)
	}
	return all, node
}

// treeCPU is the CPU time of the process trees under pids, each process counted once; 0
// when they cannot be read (none given, all exited).
func treeCPU(pids ...int) time.Duration {
	if len(pids) == 0 {
		return 0
	}
	t, err := serverTree(pids)
	if err != nil {
		return 0
	}
	u, err := t.Read()
	if err != nil {
		return 0
	}
	return u.CPU
}

// nodePID is the pid of h's log node, from the pid file it writes in its log directory
// (cmd/lognode's takeover.go).
func nodePID(h *logHost) (int, error) {
	b, err := os.ReadFile(filepath.Join(h.dir, "log", "lognode.pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
