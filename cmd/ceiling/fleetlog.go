package main

// `ceiling fleet -log`: one database for the fleet, measured (internal/ceiling's
// fleetlog.go): the mix, the likes, writes at a fixed rate with the publish → applied lag
// of every host, CPU per read, through H = 1 (the single host, no log: the anchor), 2 and
// 3 hosts behind HAProxy, and with -faults the outages at the largest H. Root (namespaces).

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/onehost/onehost/configs"
	"github.com/onehost/onehost/internal/ceiling"
)

func runFleetLog(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ceiling fleet -log", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bin := fs.String("bin", "bin", "directory of supervisor, worker and lognode (make build)")
	seed := fs.String("seed", "data/seed.db", "seed database (make seed); every host gets a copy")
	hosts := fs.String("hosts", "1,2,3", "fleet sizes (1: the single host without the log, the anchor)")
	n := fs.Int("n", 1, "workers per host")
	conns := fs.Int("conns", 32, "the generator's connections in the closed-loop phases (mix, likes, reads)")
	d := fs.Duration("d", 10*time.Second, "each phase's measured time")
	warmup := fs.Duration("warmup", 2*time.Second, "each phase's warm-up (0: the default, 2 s; a negative one, e.g. -1s: none)")
	rate := fs.Int("rate", 2000, "writes per second of the fixed-rate phase, over all hosts")
	repeat := fs.Int("repeat", 1, "rounds (a fresh fleet each); quote medians")
	faults := fs.Bool("faults", false, "at the largest H (3 at least): the leader's host killed -9 and stopped, a log node killed -9")
	sync := fs.String("sync", "", "the fleet's -fleet-sync: always = fsync every write")
	out := fs.String("out", "results", "results directory: fleetlog/runs.jsonl")
	work := fs.String("work", "", "scratch directory for the hosts' files (default a temporary one, removed)")
	haTmpl := fs.String("haproxy-template", "", "HAProxy's template (default: configs/haproxy/haproxy.cfg as built into this binary)")
	phases := fs.String("phases", "pairs,mix,likes,rate,reads", "the phases to run on each fleet (none: \"\", with -faults for the outages alone)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	hs, err := parseInts(*hosts)
	if err != nil {
		return fmt.Errorf("hosts: %w", err)
	}
	tmpl, err := configs.Read(*haTmpl, configs.HAProxy)
	if err != nil {
		return fmt.Errorf("haproxy-template: %w", err)
	}
	scratch := *work
	if scratch == "" {
		if scratch, err = os.MkdirTemp("", "ceiling-fleetlog-"); err != nil {
			return err
		}
		defer os.RemoveAll(scratch)
	}
	dir := filepath.Join(*out, "fleetlog")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	jsonl, err := os.Create(filepath.Join(dir, "runs.jsonl"))
	if err != nil {
		return err
	}
	defer jsonl.Close()
	absBin, _ := filepath.Abs(*bin)
	ph := []string{}
	if *phases != "" {
		ph = strings.Split(*phases, ",")
	}
	fl, err := ceiling.NewFleetLog(ceiling.FleetLogConfig{
		Bin: absBin, SeedDB: *seed, HAProxyTemplate: tmpl, Hosts: hs, N: *n, Conns: *conns,
		Duration: *d, Warmup: *warmup, Rate: *rate, Repeat: *repeat, Faults: *faults, Sync: *sync, WorkDir: scratch, Phases: ph,
		Report: func(r ceiling.FleetLogRun) {
			fmt.Fprintln(stdout, r.Line())
			ceiling.AppendJSONLine(jsonl, r)
		},
	})
	if err != nil {
		return err
	}
	return fl.Run(ctx)
}
