package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/configs"
	"github.com/onehost/onehost/internal/ceiling"
	"github.com/onehost/onehost/internal/progress"
)

// runFleet is `ceiling fleet`: H hosts × N workers behind each balancer (root). Its steps:
// the flags (parseFleetFlags, resolve), what the run needs from the machine (setup), the
// scratch and results directories, the fleet's run, and its results (writeFleetResults).
func runFleet(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "-log" || args[0] == "--log") { // one database for the fleet (fleetlog.go)
		return runFleetLog(ctx, args[1:], getenv, stdout, stderr)
	}
	f, err := parseFleetFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	if f.replot != "" {
		return replotFleet(f.replot, stdout)
	}
	if err := f.resolve(); err != nil {
		return err
	}
	st, err := f.setup(stderr)
	if err != nil {
		return err
	}
	scratch := f.work
	if scratch == "" {
		if scratch, err = os.MkdirTemp("", "ceiling-fleet-"); err != nil {
			return fmt.Errorf("create scratch directory: %w", err)
		}
		if !f.keep {
			defer os.RemoveAll(scratch)
		}
	}
	dir := filepath.Join(f.out, "fleet")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create results directory: %w", err)
	}
	jsonl, err := os.Create(filepath.Join(dir, "runs.jsonl"))
	if err != nil {
		return fmt.Errorf("create runs.jsonl: %w", err)
	}
	defer jsonl.Close()
	var runs []ceiling.FleetRun
	cfg := f.fleetConfig(st, scratch, dir, func(r ceiling.FleetRun) {
		runs = append(runs, r)
		fmt.Fprintln(stdout, ceiling.FleetLine(r))
		ceiling.AppendJSONLine(jsonl, r)
	})
	fl, err := ceiling.NewFleet(cfg)
	if err != nil {
		return err
	}
	runErr := fl.Run(ctx)
	return errors.Join(runErr, f.writeFleetResults(stdout, dir, runs))
}

// fleetFlags are `ceiling fleet`'s flags, and what resolve makes of them.
type fleetFlags struct {
	out, work, supervisor, worker, autocannon, config, seed, secret string
	workloads, hosts, balancers, hostCPUs, lbCPUs, genCPUs          string
	haTmpl, nftTmpl, logLevel, replot                               string
	n, conns, repeat                                                int
	quota, otherCores                                               float64
	d, warmup                                                       time.Duration
	keep                                                            bool

	hs         []int // -hosts
	hc, bc, gc []int // -host-cpus, -balancer-cpus, -gen-cpus; nil: not pinned
}

// parseFleetFlags parses `ceiling fleet`'s flags.
func parseFleetFlags(args []string, getenv func(string) string, stderr io.Writer) (*fleetFlags, error) {
	f := &fleetFlags{}
	fs := flag.NewFlagSet("ceiling fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.out, "out", "data/ceiling", "results directory (DIR/fleet/ceiling.json, runs.jsonl)")
	fs.StringVar(&f.work, "work", "", "scratch directory (default: a new temporary one, removed afterwards)")
	fs.StringVar(&f.supervisor, "supervisor", sibling("supervisor", "bin/supervisor"), "supervisor binary")
	fs.StringVar(&f.worker, "worker", sibling("worker", "bin/worker"), "worker binary")
	fs.StringVar(&f.autocannon, "autocannon", sibling("autocannon", "bin/autocannon"), "autocannon binary")
	fs.StringVar(&f.config, "config", "", "the supervisor's configuration, every host runs it (default: configs/cluster.yaml as built into this binary)")
	fs.StringVar(&f.seed, "seed", "data/seed.db", "seed database (`make seed`); every host gets a copy")
	fs.StringVar(&f.secret, "jwt-secret", getenv("JWT_SECRET"), secretUsage)
	fs.StringVar(&f.workloads, "workloads", "hello,static,heavy,feed", "workloads: hello, static, heavy, feed")
	fs.StringVar(&f.hosts, "hosts", "1,2", "fleet sizes H (hosts, each a network namespace)")
	fs.IntVar(&f.n, "n", 1, "workers per host")
	fs.StringVar(&f.balancers, "balancers", "haproxy,nftables,none", "haproxy, nftables (DNAT), none (clients spread over the hosts' addresses)")
	fs.Float64Var(&f.quota, "host-quota", 0.4, "each host's CPU quota in cores (a cgroup each); 0: none")
	fs.StringVar(&f.hostCPUs, "host-cpus", "0", "the hosts' cores (all hosts); empty: not pinned")
	fs.StringVar(&f.lbCPUs, "balancer-cpus", "1", "HAProxy's cores (its nbthread is their count); empty: not pinned")
	fs.StringVar(&f.genCPUs, "gen-cpus", "1", "the generator's cores; empty: not pinned")
	fs.DurationVar(&f.d, "d", 3*time.Second, "measured duration per run (whole seconds)")
	fs.DurationVar(&f.warmup, "warmup", time.Second, "warm-up before each run (whole seconds; 0 none)")
	fs.IntVar(&f.conns, "conns-per-host", 0, "the generator's connections per host (default: 16 per worker)")
	fs.IntVar(&f.repeat, "repeat", 1, "rounds of every (H, balancer, workload); the table uses each cell's median")
	fs.Float64Var(&f.otherCores, "other-cores", 0, "host-busy threshold: other work on the machine, in cores (default 0.1, internal/ceiling.Thresholds)")
	fs.StringVar(&f.haTmpl, "haproxy-template", "", "HAProxy's template (default: configs/haproxy/haproxy.cfg as built into this binary)")
	fs.StringVar(&f.nftTmpl, "nft-template", "", "the nftables balancer's template (default: configs/nftables/balancer.nft as built into this binary)")
	fs.BoolVar(&f.keep, "keep", false, "keep the scratch directory (server and HAProxy logs)")
	fs.StringVar(&f.logLevel, "log-level", "warn", "debug, info, warn or error")
	fs.StringVar(&f.replot, "replot", "", "draw the plots of an earlier run's DIR/fleet/ceiling.json into its directory, and run nothing")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return f, nil
}

// resolve checks the flags and parses their lists: the fleet sizes and the cores.
func (f *fleetFlags) resolve() error {
	hs, err := parseInts(f.hosts)
	if err != nil {
		return fmt.Errorf("-hosts: %w", err)
	}
	f.hs = hs
	if f.repeat < 1 || f.n < 1 {
		return fmt.Errorf("-repeat %d, -n %d: want at least 1 each", f.repeat, f.n)
	}
	cpus := func(name, s string) ([]int, error) {
		if s == "" {
			return nil, nil
		}
		c, err := ceiling.ParseCPUList(s)
		if err != nil {
			return nil, fmt.Errorf("-%s: %w", name, err)
		}
		return c, nil
	}
	if f.hc, err = cpus("host-cpus", f.hostCPUs); err != nil {
		return err
	}
	if f.bc, err = cpus("balancer-cpus", f.lbCPUs); err != nil {
		return err
	}
	if f.gc, err = cpus("gen-cpus", f.genCPUs); err != nil {
		return err
	}
	return nil
}

// fleetSetup is what a fleet run needs from the machine beyond its flags.
type fleetSetup struct {
	log   *zap.Logger
	self  string    // this executable, which pins the fleet's processes
	tmpls [2][]byte // HAProxy's and the nftables balancer's templates
	wls   []ceiling.Workload
}

// setup checks that the run can start here (root, the seed) and gathers what it needs:
// the logger, this executable, the balancers' templates and the workloads.
func (f *fleetFlags) setup(stderr io.Writer) (fleetSetup, error) {
	var st fleetSetup
	if os.Geteuid() != 0 {
		return st, fmt.Errorf("fleet: needs root (network namespaces, cgroups, nftables)")
	}
	if _, err := os.Stat(f.seed); err != nil {
		return st, fmt.Errorf("fleet: -seed %s: %w (make seed writes data/seed.db)", f.seed, err)
	}
	var err error
	if st.log, err = newLogger(stderr, f.logLevel); err != nil {
		return st, err
	}
	if st.self, err = os.Executable(); err != nil {
		return st, fmt.Errorf("fleet: find this executable for pinning: %w", err)
	}
	for i, t := range []struct{ path, builtIn string }{{f.haTmpl, configs.HAProxy}, {f.nftTmpl, configs.NftBalancer}} {
		if st.tmpls[i], err = configs.Read(t.path, t.builtIn); err != nil {
			return st, fmt.Errorf("fleet: read template: %w", err)
		}
	}
	if st.wls, err = ceiling.SelectWorkloads(ceiling.DefaultWorkloads(""), splitList(f.workloads)); err != nil {
		return st, err
	}
	return st, nil
}

// fleetConfig is the fleet's configuration: its processes pinned through `ceiling pin` by this
// executable, its scratch in scratch, its progress in dir, each run passed to report.
func (f *fleetFlags) fleetConfig(st fleetSetup, scratch, dir string, report func(ceiling.FleetRun)) ceiling.FleetConfig {
	jwt := orDefaultSecret(f.secret)
	// The hosts listen on their namespace addresses, not loopback: with the challenge's
	// public secret the workers want to be told (the addresses reach nothing outside).
	environ := append(os.Environ(), secretEnv(jwt)[1:]...)
	self := st.self
	cfg := ceiling.FleetConfig{
		Sweep: ceiling.SweepConfig{Supervisor: f.supervisor, Worker: f.worker, Autocannon: f.autocannon, ClusterConfig: f.config,
			SeedDB: f.seed, JWTSecret: jwt, Environ: environ, WorkDir: scratch, Workloads: st.wls, Duration: f.d, Warmup: f.warmup,
			Logger: st.log, Thresholds: ceiling.Thresholds{OtherCores: f.otherCores}},
		Hosts: f.hs, N: f.n, Balancers: splitList(f.balancers), HostQuota: f.quota,
		HostCPUs: f.hc, BalancerCPUs: f.bc, GenCPUs: f.gc, ConnsPerHost: f.conns, Repeat: f.repeat,
		HAProxyTemplate: st.tmpls[0], NftTemplate: st.tmpls[1], Progress: filepath.Join(dir, progress.FileName),
		Pin: func(cpus []int, cgroup string, argv []string) []string {
			if cpus == nil { // pin needs a list: every core, a quota alone
				for c := range runtime.NumCPU() {
					cpus = append(cpus, c)
				}
			}
			a := []string{self, "pin", "-cpus", ceiling.FormatCPUList(cpus)}
			if cgroup != "" {
				a = append(a, "-cgroup", cgroup)
			}
			return append(append(a, "--"), argv...)
		},
		Report: report,
	}
	if f.warmup == 0 {
		cfg.Sweep.Warmup = -1
	}
	return cfg
}

// writeFleetResults prints the fleet's table and writes DIR/fleet/ceiling.json and its
// plots.
func (f *fleetFlags) writeFleetResults(stdout io.Writer, dir string, runs []ceiling.FleetRun) error {
	cells, limits := ceiling.SummarizeFleet(runs)
	fmt.Fprintln(stdout)
	ceiling.WriteFleetReport(stdout, cells, limits)
	res := fleetResults{ceiling.ReadMachine(), os.Args, fleetNotes(f.quota, f.hostCPUs, f.lbCPUs, f.genCPUs), cells, limits, runs}
	b, err := json.MarshalIndent(res, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ceiling.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write ceiling.json: %w", err)
	}
	names, err := ceiling.WriteFleetPlots(dir, cells, limits, ceiling.FleetProvenance(runs, res.Machine))
	for _, n := range names {
		fmt.Fprintln(stdout, "plot", filepath.Join(dir, n))
	}
	return err
}

// fleetResults is DIR/fleet/ceiling.json.
type fleetResults struct {
	Machine ceiling.Machine      `json:"machine"`
	Command []string             `json:"command"`
	Notes   []string             `json:"notes"`
	Cells   []ceiling.FleetCell  `json:"cells"`
	Limits  []ceiling.FleetLimit `json:"limits"`
	Runs    []ceiling.FleetRun   `json:"runs"`
}

// replotFleet draws the plots of the ceiling.json at path into its directory (results
// written before `ceiling fleet` drew plots, or plots drawn anew after a change).
func replotFleet(path string, stdout io.Writer) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("replot: %w", err)
	}
	var res fleetResults
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("replot: read %s: %w", path, err)
	}
	if len(res.Cells) == 0 {
		return fmt.Errorf("replot: %s has no cells: is it a `ceiling fleet` ceiling.json?", path)
	}
	// The limits are derived again: the model may have changed since (an older file's
	// limits lack it).
	cells, limits := ceiling.SummarizeFleet(res.Runs)
	if len(cells) == 0 {
		cells, limits = res.Cells, res.Limits
	}
	dir := filepath.Dir(path)
	names, err := ceiling.WriteFleetPlots(dir, cells, limits, ceiling.FleetProvenance(res.Runs, res.Machine))
	for _, n := range names {
		fmt.Fprintln(stdout, "plot", filepath.Join(dir, n))
	}
	return err
}

func fleetNotes(quota float64, host, lb, gen string) []string {
	return []string{
		fmt.Sprintf("each host: a network namespace and its own `supervisor run` of the same config, in a CPU quota of %g cores (0: none), on cores %q; HAProxy on cores %q; the generator (this namespace) on cores %q", quota, host, lb, gen),
		"balancer µs/req: HAProxy's process tree (master and workers); softirq µs/req: the kernel's softirq time on every core, where nftables' DNAT and conntrack run and every balancer's forwarding through the balancer namespace (none included)",
		"none: one autocannon per host address at once, the connections split, latencies merged from their histogram logs",
		"verdict balancer: HAProxy's CPU at least 90% of its cores",
	}
}
