// The fleet's ceiling (`ceiling fleet`): H hosts, each a network namespace with its own
// address and its own cluster (the sweep's cluster mode, StartServer) in a CPU quota or on
// cores of its own, behind a balancer (HAProxy, nftables DNAT, or none: the clients spread
// over the hosts' addresses as DNS round robin would), the generator in this namespace.
// Per run: req/s, p99, the servers' CPU per request summed over the hosts' process trees,
// the balancer's (HAProxy's process tree; the kernel's softirq time on every core, which
// is where DNAT and the veth hops run), the bytes through the balancer's link, and the
// verdict (Judge, which says balancer when HAProxy's cores are full).

package ceiling

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/balancer"
	"github.com/onehost/onehost/internal/cpuquota"
	"github.com/onehost/onehost/internal/fleetns"
	"github.com/onehost/onehost/internal/progress"
)

// The balancers a fleet runs behind.
const (
	BalancerHAProxy = "haproxy"
	BalancerNft     = "nftables"
	BalancerNone    = "none" // the clients spread over the hosts' addresses (DNS round robin)
)

// FleetConfig configures Fleet. Sweep gives the servers, the generator, the workloads
// and the durations as for a sweep (its Ns, Modes, NoPin, ListenHost are set per host).
type FleetConfig struct {
	Sweep SweepConfig
	// Hosts are the fleet sizes H to run; default 1, 2.
	Hosts []int
	// N is each host's workers; default 1.
	N int
	// Balancers: BalancerHAProxy, BalancerNft, BalancerNone; default all three.
	Balancers []string
	// HostQuota is each host's CPU quota in cores (a cgroup each, internal/cpuquota); 0:
	// none. Where cores are few (2 here) this stands for each host's own machine.
	HostQuota float64
	// HostCPUs, BalancerCPUs and GenCPUs are the cores of every host, of HAProxy and of
	// the generator; nil: not pinned.
	HostCPUs, BalancerCPUs, GenCPUs []int
	// Pin returns argv run on cpus (nil: any) inside the cgroup directory cgroup ("":
	// none), and must exec argv: `ceiling pin -cpus LIST -cgroup DIR -- argv`. Required.
	Pin func(cpus []int, cgroup string, argv []string) []string
	// HAProxyTemplate and NftTemplate are configs/haproxy/haproxy.cfg and
	// configs/nftables/balancer.nft; required for those balancers.
	HAProxyTemplate, NftTemplate []byte
	// Port is every host's port (the same on all, as DNAT needs); default 3000.
	Port int
	// ConnsPerHost: the generator's connections per host; default Sweep.ConnsPerWorker × N.
	ConnsPerHost int
	// Repeat: rounds of every (H, balancer, workload); default 1.
	Repeat int
	// Report receives each run as it finishes; may be nil.
	Report func(FleetRun)
	// Progress is the path of the progress file (progress.json, Kind fleet) kept while the
	// fleet runs, as a sweep's (SweepConfig.Progress): the supervisor's dashboard shows it.
	// "": none.
	Progress string
	// Quota makes a host's cgroup; default cpuquota.Create (tests: the same).
	Quota func(name string, cores float64) (*cpuquota.Quota, error)
}

// FleetRun is one measured run of a fleet.
type FleetRun struct {
	Workload string    `json:"workload"`
	Balancer string    `json:"balancer"`
	Hosts    int       `json:"hosts"`
	N        int       `json:"n"` // workers per host
	Round    int       `json:"round,omitempty"`
	Started  time.Time `json:"started"`
	Skipped  string    `json:"skipped,omitempty"`

	Connections int     `json:"connections"`
	DurationS   float64 `json:"duration_s"`
	Requests    int64   `json:"requests"`
	Errors      int64   `json:"errors"`
	Connect     int64   `json:"connect_errors"`
	Timeouts    int64   `json:"timeouts"`
	Non2xx      int64   `json:"non2xx"`
	RPS         float64 `json:"rps"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`

	// The servers: every host's cluster (supervisor and workers), summed.
	ServerBusyCores float64 `json:"server_busy_cores"`
	ServerCoreLimit float64 `json:"server_core_limit"` // H × quota, or the hosts' cores
	ServerUsPerReq  float64 `json:"server_cpu_us_per_req"`
	// The balancer: HAProxy's process tree (master and workers); 0 for nftables and none.
	BalancerBusyCores float64 `json:"balancer_busy_cores"`
	BalancerCores     float64 `json:"balancer_cores"` // the cores it was given; 0: no process
	BalancerUsPerReq  float64 `json:"balancer_cpu_us_per_req"`
	// SoftIRQ: the kernel's softirq time on every core (not only the balancer's: a veth
	// delivers on the sending core), where nftables' DNAT and conntrack run, and every
	// run's forwarding through the balancer's namespace, whichever the balancer.
	SoftIRQCores    float64 `json:"softirq_cores"`
	SoftIRQUsPerReq float64 `json:"softirq_us_per_req"`
	GenBusyCores    float64 `json:"gen_busy_cores"`
	// LinkBytes: both directions on the clients' link to the balancer's namespace.
	LinkBytesPerS   float64 `json:"link_bytes_per_s"`
	LinkBytesPerReq float64 `json:"link_bytes_per_req"`
	HostCores       int     `json:"host_cores"`
	Host            HostCPU `json:"host_cpu"`
	OtherCores      float64 `json:"other_cores"`

	Verdict    string   `json:"verdict"`
	Evidence   string   `json:"evidence"`
	GenCommand []string `json:"gen_command,omitempty"`
}

// Fleet runs fleets of hosts behind balancers.
type Fleet struct {
	cfg      FleetConfig
	gen      *Sweeper // the generator's settings and runner; its servers are the hosts'
	log      *zap.Logger
	progress *progressWriter // nil: no progress file
}

// NewFleet checks cfg.
func NewFleet(cfg FleetConfig) (*Fleet, error) {
	if cfg.Hosts == nil {
		cfg.Hosts = []int{1, 2}
	}
	if cfg.N <= 0 {
		cfg.N = 1
	}
	if cfg.Balancers == nil {
		cfg.Balancers = []string{BalancerHAProxy, BalancerNft, BalancerNone}
	}
	for _, b := range cfg.Balancers {
		switch b {
		case BalancerHAProxy:
			if len(cfg.HAProxyTemplate) == 0 {
				return nil, errors.New("fleet config: HAProxyTemplate is empty: read configs/haproxy/haproxy.cfg")
			}
		case BalancerNft:
			if len(cfg.NftTemplate) == 0 {
				return nil, errors.New("fleet config: NftTemplate is empty: read configs/nftables/balancer.nft")
			}
		case BalancerNone:
		default:
			return nil, fmt.Errorf("fleet config: balancer %q: want %s, %s or %s", b, BalancerHAProxy, BalancerNft, BalancerNone)
		}
	}
	for _, h := range cfg.Hosts {
		if h < 1 || h > 60 {
			return nil, fmt.Errorf("fleet config: %d hosts: want 1 to 60", h)
		}
	}
	if cfg.Pin == nil {
		return nil, errors.New("fleet config: Pin is nil: give `ceiling pin` (it runs each host in its quota)")
	}
	if cfg.Port <= 0 {
		cfg.Port = 3000
	}
	if cfg.Quota == nil {
		cfg.Quota = func(name string, cores float64) (*cpuquota.Quota, error) {
			return cpuquota.Create(cpuquota.Config{}, name, cores)
		}
	}
	sc := cfg.Sweep
	sc.NoPin, sc.Ns, sc.Modes = true, []int{cfg.N}, []string{ModeCluster}
	if sc.Autocannon == "" {
		return nil, errors.New("fleet config: Sweep.Autocannon is empty: the fleet's generator is bench/autocannon")
	}
	gen, err := NewSweeper(sc)
	if err != nil {
		return nil, err
	}
	if !gen.useAC {
		return nil, fmt.Errorf("fleet config: autocannon %s not found (go build -o bin/ ./bench/autocannon)", sc.Autocannon)
	}
	cfg.Sweep = gen.cfg
	if cfg.ConnsPerHost <= 0 {
		cfg.ConnsPerHost = cfg.Sweep.ConnsPerWorker * cfg.N
	}
	for _, w := range cfg.Sweep.Workloads {
		if w.WrkScript != "" {
			return nil, fmt.Errorf("fleet config: workload %s is a wrk script: the fleet runs autocannon workloads only (hello, static, feed, heavy)", w.Name)
		}
	}
	f := &Fleet{cfg: cfg, gen: gen, log: cfg.Sweep.Logger}
	if f.progress = newProgressWriter(cfg.Progress, f.log, time.Now); f.progress != nil {
		f.progress.p.Kind = progress.KindFleet
	}
	return f, nil
}

// Run runs every round, fleet size, balancer and workload: per (round, H) one fleet of
// fresh hosts, then each balancer in front of it in turn, each workload through it.
func (f *Fleet) Run(ctx context.Context) (err error) {
	defer func() { f.progress.end(err) }()
	for round := 1; round <= max(f.cfg.Repeat, 1); round++ {
		for _, h := range f.cfg.Hosts {
			if err := f.runFleet(ctx, round, h); err != nil {
				return err
			}
		}
	}
	return nil
}

// fleetHosts are a fleet's running hosts.
type fleetHosts struct {
	net     *fleetns.Net
	servers []*Server
	quotas  []*cpuquota.Quota
}

func (fh *fleetHosts) stop(log *zap.Logger) {
	for _, s := range fh.servers {
		if err := s.Stop(); err != nil {
			log.Warn("stop host", zap.Error(err))
		}
	}
	for _, q := range fh.quotas {
		for i := 0; i < 50 && q.Remove() != nil; i++ { // removable once its processes are gone
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func (f *Fleet) runFleet(ctx context.Context, round, h int) error {
	nw, cleanup, err := fleetns.Make(h)
	defer cleanup()
	if err != nil {
		return err
	}
	fh := &fleetHosts{net: nw}
	defer fh.stop(f.log)
	for i, host := range nw.Hosts {
		cgroup := ""
		if f.cfg.HostQuota > 0 {
			q, err := f.cfg.Quota(fmt.Sprintf("onehost-fleet-%d-%d", os.Getpid(), i), f.cfg.HostQuota)
			if err != nil {
				return fmt.Errorf("fleet: host %d's quota: %w", i, err)
			}
			fh.quotas = append(fh.quotas, q)
			cgroup = q.Dir
		}
		sc := f.cfg.Sweep
		sc.ListenHost, sc.ListenPort = host.Addr, f.cfg.Port
		// Each host's supervisor is its agent, as in production: HAProxy's agent-check
		// (configs/haproxy) asks it; the nftables and none runs do not.
		sc.Agent = net.JoinHostPort(host.Addr, strconv.Itoa(balancer.DefaultAgentPort))
		sc.WorkDir = filepath.Join(f.cfg.Sweep.WorkDir, fmt.Sprintf("fleet-r%d-h%d-%d", round, h, i))
		if err := os.MkdirAll(sc.WorkDir, 0o755); err != nil {
			return fmt.Errorf("fleet: %w", err)
		}
		pinned, ns := f.cfg.HostCPUs != nil || cgroup != "", host.Name
		sc.Wrap = func(argv []string) []string {
			if pinned {
				argv = f.cfg.Pin(f.cfg.HostCPUs, cgroup, argv)
			}
			return fleetns.Wrap(ns)(argv)
		}
		sw, err := NewSweeper(sc)
		if err != nil {
			return err
		}
		srv, err := sw.StartServer(ctx, ModeCluster, f.cfg.N)
		if err != nil {
			return fmt.Errorf("fleet: host %d: %w", i, err)
		}
		fh.servers = append(fh.servers, srv)
	}
	for _, b := range f.cfg.Balancers {
		if err := f.behind(ctx, round, fh, b); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// haproxyAt is where and how startHAProxy runs HAProxy: its files in dir, its messages to
// the file log, listening on listen in front of servers with threads threads, its command
// line rewritten by wrap (run in the balancer's namespace, pinned).
type haproxyAt struct {
	dir, log, listen string
	servers          []balancer.Server
	threads          int
	wrap             func(argv []string) []string
}

// startHAProxy starts HAProxy for `ceiling fleet` and `ceiling fleet -log` with the
// production rendering: the HTTP check on /health and the agent-check on every host's
// supervisor (-agent at DefaultAgentPort), each once a second. Its errors are the file
// system's and balancer.StartHAProxy's: the caller says which fleet.
func startHAProxy(ctx context.Context, tmpl []byte, at haproxyAt) (*balancer.HAProxy, error) {
	if err := os.MkdirAll(at.dir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(at.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // HAProxy has its own descriptor of it (an *os.File is passed as is)
	return balancer.StartHAProxy(ctx, tmpl, balancer.HAProxyOptions{
		Dir: at.dir, Stderr: logf,
		Params: balancer.HAProxyParams{Listen: at.listen, Servers: at.servers, Threads: at.threads,
			AgentPort: balancer.DefaultAgentPort, CheckInter: time.Second, AgentInter: time.Second},
		Wrap: at.wrap,
	})
}

// behind puts balancer b in front of the hosts and runs every workload through it.
func (f *Fleet) behind(ctx context.Context, round int, fh *fleetHosts, b string) error {
	nw := fh.net
	lb := nw.LB
	var targets []string // the generator's addresses: the balancer's, or every host's
	var lbPID int
	var stop func()
	switch b {
	case BalancerHAProxy:
		var servers []balancer.Server
		for _, s := range fh.servers {
			servers = append(servers, balancer.Server{Addr: s.Addr})
		}
		dir := filepath.Join(f.cfg.Sweep.WorkDir, fmt.Sprintf("haproxy-r%d-h%d", round, len(fh.servers)))
		addr := net.JoinHostPort(lb.Addr, "8080")
		hp, err := startHAProxy(ctx, f.cfg.HAProxyTemplate, haproxyAt{dir: dir, log: filepath.Join(dir, "haproxy.log"),
			listen: addr, servers: servers, threads: max(len(f.cfg.BalancerCPUs), 1),
			wrap: func(argv []string) []string {
				if f.cfg.BalancerCPUs != nil {
					argv = f.cfg.Pin(f.cfg.BalancerCPUs, "", argv)
				}
				return fleetns.Wrap(lb.Name)(argv)
			}})
		if err != nil {
			return fmt.Errorf("fleet: %w", err)
		}
		stop = func() { hp.Stop() }
		if err := waitUp(ctx, hp, len(servers)); err != nil {
			stop()
			return fmt.Errorf("fleet: %w", err)
		}
		lbPID, targets = hp.Pid(), []string{addr}
	case BalancerNft:
		var live []balancer.NftHost
		for _, h := range nw.Hosts {
			live = append(live, balancer.NftHost{Addr: h.Addr})
		}
		rs, err := balancer.RenderNft(f.cfg.NftTemplate, balancer.NftParams{VIP: lb.Addr, Port: 80, HostPort: f.cfg.Port, Live: live})
		if err != nil {
			return fmt.Errorf("fleet: %w", err)
		}
		bin, err := balancer.LookNft()
		if err != nil {
			return fmt.Errorf("fleet: %w", err)
		}
		nft := fleetns.Wrap(lb.Name)([]string{bin})
		if err := balancer.LoadNft(ctx, nft, rs); err != nil {
			return fmt.Errorf("fleet: %w", err)
		}
		stop = func() {
			del := append(slices.Clone(nft), "delete", "table", "ip", "onehost_lb")
			if out, err := exec.Command(del[0], del[1:]...).CombinedOutput(); err != nil {
				f.log.Warn("remove the nftables balancer", zap.Error(err), zap.ByteString("out", out))
			}
		}
		targets = []string{net.JoinHostPort(lb.Addr, "80")}
	case BalancerNone:
		stop = func() {}
		for _, s := range fh.servers {
			targets = append(targets, s.Addr)
		}
	}
	defer stop()
	for _, wl := range f.cfg.Sweep.Workloads {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		f.progress.beginFleet(FleetRun{Workload: wl.Name, Balancer: b, Hosts: len(fh.servers), N: f.cfg.N,
			Started: time.Now().UTC().Truncate(time.Millisecond)}, max(f.cfg.Sweep.Warmup, 0)+f.cfg.Sweep.Duration)
		r := f.measure(ctx, fh, b, lbPID, targets, wl)
		if f.cfg.Repeat > 1 {
			r.Round = round
		}
		f.progress.finishFleet(r)
		if f.cfg.Report != nil {
			f.cfg.Report(r)
		}
	}
	return nil
}

// waitUp waits until HAProxy's show stat has n servers UP with their agent answering.
func waitUp(ctx context.Context, hp *balancer.HAProxy, n int) error {
	var last []balancer.ServerStat
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		st, err := hp.Stat()
		if err == nil {
			up := 0
			for _, s := range st {
				// UP by the HTTP check, and the host's agent heard (the runs are behind the
				// production config: agent-check on every host's supervisor).
				if s.Status == "UP" && s.AgentStatus == "L7OK" {
					up++
				}
			}
			if up == n {
				return nil
			}
			last = st
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("haproxy: not %d servers UP with their agent answering (agent_status L7OK) after 15 s: %+v", n, last)
}
