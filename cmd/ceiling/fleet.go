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

	"github.com/onehost/onehost/internal/ceiling"
)

// runFleet is `ceiling fleet`: H hosts × N workers behind each balancer (root).
func runFleet(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ceiling fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "data/ceiling", "results directory (DIR/fleet/ceiling.json, runs.jsonl)")
	work := fs.String("work", "", "scratch directory (default: a new temporary one, removed afterwards)")
	supervisor := fs.String("supervisor", sibling("supervisor", "bin/supervisor"), "supervisor binary")
	worker := fs.String("worker", sibling("worker", "bin/worker"), "worker binary")
	autocannon := fs.String("autocannon", sibling("autocannon", "bin/autocannon"), "autocannon binary")
	config := fs.String("config", "configs/cluster.yaml", "the supervisor's configuration (every host runs it)")
	seed := fs.String("seed", "data/seed.db", "seed database (`make seed`); every host gets a copy")
	secret := fs.String("jwt-secret", getenv("JWT_SECRET"), secretUsage)
	workloads := fs.String("workloads", "hello,static,heavy,feed", "workloads: hello, static, heavy, feed")
	hostsFlag := fs.String("hosts", "1,2", "fleet sizes H (hosts, each a network namespace)")
	n := fs.Int("n", 1, "workers per host")
	balancers := fs.String("balancers", "haproxy,nftables,none", "haproxy, nftables (DNAT), none (clients spread over the hosts' addresses)")
	quota := fs.Float64("host-quota", 0.4, "each host's CPU quota in cores (a cgroup each); 0: none")
	hostCPUs := fs.String("host-cpus", "0", "the hosts' cores (all hosts); empty: not pinned")
	lbCPUs := fs.String("balancer-cpus", "1", "HAProxy's cores (its nbthread is their count); empty: not pinned")
	genCPUs := fs.String("gen-cpus", "1", "the generator's cores; empty: not pinned")
	d := fs.Duration("d", 3*time.Second, "measured duration per run (whole seconds)")
	warmup := fs.Duration("warmup", time.Second, "warm-up before each run (whole seconds; 0 none)")
	conns := fs.Int("conns-per-host", 0, "the generator's connections per host (default: 16 per worker)")
	repeat := fs.Int("repeat", 1, "rounds of every (H, balancer, workload); the table uses each cell's median")
	otherCores := fs.Float64("other-cores", 0, "host-busy threshold: other work on the machine, in cores (default 0.1, internal/ceiling.Thresholds)")
	haTmpl := fs.String("haproxy-template", "configs/haproxy/haproxy.cfg", "HAProxy's template")
	nftTmpl := fs.String("nft-template", "configs/nftables/balancer.nft", "the nftables balancer's template")
	keep := fs.Bool("keep", false, "keep the scratch directory (server and HAProxy logs)")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	replot := fs.String("replot", "", "draw the plots of an earlier run's DIR/fleet/ceiling.json into its directory, and run nothing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *replot != "" {
		return replotFleet(*replot, stdout)
	}
	hs, err := parseInts(*hostsFlag)
	if err != nil {
		return fmt.Errorf("-hosts: %w", err)
	}
	if *repeat < 1 || *n < 1 {
		return fmt.Errorf("-repeat %d, -n %d: want at least 1 each", *repeat, *n)
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
	hc, err := cpus("host-cpus", *hostCPUs)
	if err != nil {
		return err
	}
	bc, err := cpus("balancer-cpus", *lbCPUs)
	if err != nil {
		return err
	}
	gc, err := cpus("gen-cpus", *genCPUs)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("fleet: needs root (network namespaces, cgroups, nftables)")
	}
	if _, err := os.Stat(*seed); err != nil {
		return fmt.Errorf("fleet: -seed %s: %w (make seed writes data/seed.db)", *seed, err)
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("fleet: find this executable for pinning: %w", err)
	}
	var tmpls [2][]byte
	for i, p := range []string{*haTmpl, *nftTmpl} {
		if tmpls[i], err = os.ReadFile(p); err != nil {
			return fmt.Errorf("fleet: read template: %w", err)
		}
	}
	wls, err := ceiling.SelectWorkloads(ceiling.DefaultWorkloads(""), splitList(*workloads))
	if err != nil {
		return err
	}
	scratch := *work
	if scratch == "" {
		if scratch, err = os.MkdirTemp("", "ceiling-fleet-"); err != nil {
			return fmt.Errorf("create scratch directory: %w", err)
		}
		if !*keep {
			defer os.RemoveAll(scratch)
		}
	}
	dir := filepath.Join(*out, "fleet")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create results directory: %w", err)
	}
	jsonl, err := os.Create(filepath.Join(dir, "runs.jsonl"))
	if err != nil {
		return fmt.Errorf("create runs.jsonl: %w", err)
	}
	defer jsonl.Close()
	var runs []ceiling.FleetRun
	jwt := orDefaultSecret(*secret)
	// The hosts listen on their namespace addresses, not loopback: with the challenge's
	// public secret the workers want to be told (the addresses reach nothing outside).
	environ := append(os.Environ(), secretEnv(jwt)[1:]...)
	cfg := ceiling.FleetConfig{
		Sweep: ceiling.SweepConfig{Supervisor: *supervisor, Worker: *worker, Autocannon: *autocannon, ClusterConfig: *config,
			SeedDB: *seed, JWTSecret: jwt, Environ: environ, WorkDir: scratch, Workloads: wls, Duration: *d, Warmup: *warmup,
			Logger: log, Thresholds: ceiling.Thresholds{OtherCores: *otherCores}},
		Hosts: hs, N: *n, Balancers: splitList(*balancers), HostQuota: *quota,
		HostCPUs: hc, BalancerCPUs: bc, GenCPUs: gc, ConnsPerHost: *conns, Repeat: *repeat,
		HAProxyTemplate: tmpls[0], NftTemplate: tmpls[1], Progress: filepath.Join(dir, ceiling.ProgressFile),
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
		Report: func(r ceiling.FleetRun) {
			runs = append(runs, r)
			fmt.Fprintln(stdout, ceiling.FleetLine(r))
			b, _ := json.Marshal(r)
			jsonl.Write(append(b, '\n'))
		},
	}
	if *warmup == 0 {
		cfg.Sweep.Warmup = -1
	}
	f, err := ceiling.NewFleet(cfg)
	if err != nil {
		return err
	}
	runErr := f.Run(ctx)
	cells, limits := ceiling.SummarizeFleet(runs)
	fmt.Fprintln(stdout)
	ceiling.WriteFleetReport(stdout, cells, limits)
	res := fleetResults{ceiling.ReadMachine(), os.Args, fleetNotes(*quota, *hostCPUs, *lbCPUs, *genCPUs), cells, limits, runs}
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
	return errors.Join(runErr, err)
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
