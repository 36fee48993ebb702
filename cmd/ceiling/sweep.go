package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/onehost/onehost/internal/ceiling"
	"github.com/onehost/onehost/internal/ceiling/linkshape"
	"github.com/onehost/onehost/internal/progress"
)

// common are the flags sweep and nic share.
type common struct {
	quick                                   bool
	out, work                               string
	supervisor, worker, autocannon, wrk     string
	config, seed, tokens, mixScript, secret string
	workloads, genCPUs                      string
	compress                                string
	d, warmup                               time.Duration
	connsPerWorker, pipelining, serverCPU0  int
	hostBusyRepeats                         int
	fifo                                    int       // SCHED_FIFO priority of the pinned processes (nic's -fifo); 0: the normal policy
	app                                     *appFlags // the user's app (sweep -app); nil: our worker
	noPin, keep                             bool
	logLevel                                string
}

func addCommon(fs *flag.FlagSet, getenv func(string) string, defWorkloads string) *common {
	c := &common{}
	fs.BoolVar(&c.quick, "quick", false, "a short run for a small machine: N in {1,2}, 2 s per run (flags given explicitly still win)")
	fs.StringVar(&c.out, "out", "data/ceiling", "results directory")
	fs.StringVar(&c.work, "work", "", "scratch directory for database copies and logs (default: a new temporary one, removed afterwards)")
	fs.StringVar(&c.supervisor, "supervisor", sibling("supervisor", "bin/supervisor"), "supervisor binary")
	fs.StringVar(&c.worker, "worker", sibling("worker", "bin/worker"), "worker binary")
	fs.StringVar(&c.autocannon, "autocannon", sibling("autocannon", "bin/autocannon"), "autocannon binary (absent: wrk runs every workload)")
	fs.StringVar(&c.wrk, "wrk", sibling("wrk", "wrk"), "wrk binary (the mix; and every workload without autocannon)")
	fs.StringVar(&c.config, "config", "", "the supervisor's configuration (default: configs/cluster.yaml as built into this binary)")
	fs.StringVar(&c.seed, "seed", "data/seed.db", "seed database (generated into the scratch directory when missing)")
	fs.StringVar(&c.tokens, "tokens", "data/tokens.json", "token file for the mix (written into the scratch directory when missing)")
	fs.StringVar(&c.mixScript, "mix-script", "bench/mix.lua", "wrk script of the challenge mix")
	fs.StringVar(&c.secret, "jwt-secret", getenv("JWT_SECRET"), secretUsage)
	fs.StringVar(&c.workloads, "workloads", defWorkloads, "workloads to run: mix, feed, heavy, hello, static; NAME+gzip, NAME+zstd or NAME+br asks for that content coding (static+br, heavy+gzip)")
	fs.StringVar(&c.compress, "compress", "", "the worker's -compress for its dynamic routes (heavy, products), e.g. zstd,br,gzip:6; default: those three at their default levels when a workload asks for a coding, else off")
	fs.StringVar(&c.genCPUs, "gen-cpus", "", "the generator's cores (default: those the server does not use, else all)")
	fs.DurationVar(&c.d, "d", 3*time.Second, "measured duration per run (whole seconds)")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "warm-up before each measured run (whole seconds; 0 none)")
	fs.IntVar(&c.hostBusyRepeats, "host-busy-repeats", 0, "run a run that other work on the host disturbed (verdict host-busy) again, up to this many times; 0: it is kept, marked and left out of the model")
	fs.IntVar(&c.connsPerWorker, "conns-per-worker", 16, "connections per server worker or core (enough to saturate the mix; see internal/ceiling.SweepConfig)")
	fs.IntVar(&c.pipelining, "p", 1, "requests in flight per connection (autocannon only)")
	fs.IntVar(&c.serverCPU0, "server-cpu0", 0, "the server runs on cores server-cpu0 .. server-cpu0+N-1")
	fs.BoolVar(&c.noPin, "no-pin", false, "pin nothing (server and generator share every core)")
	fs.BoolVar(&c.keep, "keep", false, "keep the scratch directory (server logs)")
	fs.StringVar(&c.logLevel, "log-level", "warn", "debug, info, warn or error")
	return c
}

// publicSecret is the challenge's JWT secret, published with it: the workers accept it on
// a non-loopback -server-host only when told this is the challenge (ALLOW_CHALLENGE_SECRET).
const publicSecret = "twelve-dollar-challenge"

// secretFile holds the secret `make run` and `make seed` made, which signed data/tokens.json.
const secretFile = "data/jwt_secret"

const secretUsage = "HS256 secret (env JWT_SECRET; default: the one in " + secretFile + " when it exists, which signed data/tokens.json, else the challenge's " + publicSecret + ")"

// orDefaultSecret is -jwt-secret when given, else the secret in secretFile, else the
// challenge's. Resolved after parsing, so -h never prints a secret.
func orDefaultSecret(secret string) string {
	if secret != "" {
		return secret
	}
	if b, err := os.ReadFile(secretFile); err == nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			return s
		}
	}
	return publicSecret
}

// secretEnv is the environment that lets a worker serve secret: with the public one it
// may listen on a non-loopback -server-host (the load hosts reach it there), as in the
// challenge's own checks.
func secretEnv(secret string) []string {
	env := []string{"JWT_SECRET=" + secret}
	if secret == publicSecret {
		env = append(env, "ALLOW_CHALLENGE_SECRET=1")
	}
	return env
}

// sibling is the program name beside this executable when it exists there, else def.
func sibling(name, def string) string {
	exe, err := os.Executable()
	if err != nil {
		return def
	}
	p := filepath.Join(filepath.Dir(exe), name)
	if st, err := os.Stat(p); err == nil && !st.IsDir() {
		return p
	}
	return def
}

// explicit reports which flags were given on the command line.
func explicit(fs *flag.FlagSet) map[string]bool {
	m := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { m[f.Name] = true })
	return m
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("parse list %q: %q is not a positive integer", s, f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("parse list %q: empty", s)
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func newLogger(w io.Writer, level string) (*zap.Logger, error) {
	lvl, err := zap.ParseAtomicLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log-level: %w", err)
	}
	enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), lvl)), nil
}

// prepared is what a sweep or nic run needs beyond its flags.
type prepared struct {
	cfg     ceiling.SweepConfig
	sweep   *ceiling.Sweep
	dir     string // results subdirectory
	jsonl   *os.File
	cleanup func()
}

// prepare makes the scratch directory, finds or generates the seed and tokens, and opens
// the results files under out/sub.
func (c *common) prepare(ctx context.Context, sub string, log *zap.Logger, stdout, stderr io.Writer) (*prepared, error) {
	c.secret = orDefaultSecret(c.secret)
	p := &prepared{cleanup: func() {}}
	work := c.work
	if work == "" {
		d, err := os.MkdirTemp("", "ceiling-")
		if err != nil {
			return nil, fmt.Errorf("create scratch directory: %w", err)
		}
		work = d
		if !c.keep {
			p.cleanup = func() { os.RemoveAll(d) }
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, fmt.Errorf("create scratch directory: %w", err)
	}
	fail := func(err error) (*prepared, error) { p.cleanup(); return nil, err }
	seedDB, tokens := c.seed, c.tokens
	if c.app != nil {
		// The user's app has no use for our seed.
	} else if _, err := os.Stat(seedDB); err != nil {
		seedDB = filepath.Join(work, "seed.db")
		tokens = filepath.Join(work, "tokens.json")
		fmt.Fprintf(stderr, "ceiling: no seed at %s: generating %s (~15 s)\n", c.seed, seedDB)
		if err := c.seedCmd(ctx, seedDB, tokens, stderr); err != nil {
			return fail(err)
		}
	} else if _, err := os.Stat(tokens); err != nil {
		tokens = filepath.Join(work, "tokens.json")
		if err := c.seedCmd(ctx, seedDB, tokens, stderr); err != nil {
			return fail(err)
		}
	}
	all := ceiling.DefaultWorkloads(c.mixScript)
	var wls []ceiling.Workload
	var err error
	if c.app != nil {
		wls = []ceiling.Workload{c.app.workload()}
		seedDB = ""
	} else if wls, err = ceiling.SelectWorkloads(all, splitList(c.workloads)); err != nil {
		return fail(err)
	}
	var gen []int
	if c.genCPUs != "" {
		if gen, err = ceiling.ParseCPUList(c.genCPUs); err != nil {
			return fail(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fail(fmt.Errorf("find this executable (for pinning): %w", err))
	}
	p.dir = filepath.Join(c.out, sub)
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return fail(fmt.Errorf("create results directory: %w", err))
	}
	if p.jsonl, err = os.OpenFile(filepath.Join(p.dir, "runs.jsonl"), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644); err != nil {
		return fail(fmt.Errorf("create results: %w", err))
	}
	prev := p.cleanup
	p.cleanup = func() { p.jsonl.Close(); prev() }
	p.sweep = &ceiling.Sweep{Command: os.Args, Started: time.Now().UTC().Truncate(time.Second), Machine: ceiling.ReadMachine()}
	resultPath := filepath.Join(p.dir, ceiling.ResultFile)
	p.cfg = ceiling.SweepConfig{
		Supervisor: c.supervisor, Worker: c.worker, Autocannon: c.autocannon, Wrk: c.wrk,
		ClusterConfig: c.config, SeedDB: seedDB, Tokens: tokens, JWTSecret: c.secret, WorkDir: work,
		Workloads: wls, Duration: c.d, Warmup: c.warmup, ConnsPerWorker: c.connsPerWorker, HostBusyRepeats: c.hostBusyRepeats,
		Pipelining: c.pipelining, ServerCPU0: c.serverCPU0, GenCPUs: gen, NoPin: c.noPin, Compress: c.compress,
		Pin: selfPinFIFO(self, c.fifo), Logger: log, Progress: filepath.Join(p.dir, progress.FileName),
		Report: func(r ceiling.Run) {
			fmt.Fprintln(stdout, r.Line())
			ceiling.AppendJSONLine(p.jsonl, r)
			p.sweep.Runs = append(p.sweep.Runs, r)
			if err := p.sweep.WriteJSON(resultPath); err != nil {
				log.Warn("write results", zap.Error(err))
			}
		},
	}
	if c.warmup == 0 {
		p.cfg.Warmup = -1
	}
	if c.secret == publicSecret {
		p.cfg.Environ = append(os.Environ(), "ALLOW_CHALLENGE_SECRET=1") // secretEnv's, for every server
	}
	return p, nil
}

// seedCmd runs `worker seed` to write the seed (when missing) and the token file.
func (c *common) seedCmd(ctx context.Context, db, tokens string, stderr io.Writer) error {
	cmd := exec.CommandContext(ctx, c.worker, "seed", "-db", db, "-tokens", tokens)
	cmd.Env = append(os.Environ(), "JWT_SECRET="+c.secret)
	cmd.Stderr = stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("generate seed with %s: %w", c.worker, err)
	}
	return nil
}

// finish writes the results file once more (with the notes) and says where it is.
func (p *prepared) finish(s *ceiling.Sweeper, stderr io.Writer) error {
	p.sweep.Notes = append(p.sweep.Notes, s.Notes()...)
	path := filepath.Join(p.dir, ceiling.ResultFile)
	if err := p.sweep.WriteJSON(path); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "ceiling: %d runs written to %s\n", len(p.sweep.Runs), path)
	return nil
}

// runSweep is `ceiling sweep`: its flags (parseSweepFlags), the estimate of its length,
// the scratch and results directories (prepare), the sweep, and its summary.
func runSweep(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f, err := parseSweepFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	c := f.c
	log, err := newLogger(stderr, c.logLevel)
	if err != nil {
		return err
	}
	defer log.Sync()
	f.announce(stderr)

	p, err := c.prepare(ctx, "sweep", log, stdout, stderr)
	if err != nil {
		return err
	}
	defer p.cleanup()
	f.configure(p)
	s, err := ceiling.NewSweeper(p.cfg)
	if err != nil {
		return err
	}
	for _, n := range s.Notes() {
		fmt.Fprintln(stderr, "ceiling sweep:", n)
	}
	f.reannounce(s, stderr)
	err = s.Sweep(ctx)
	medians := ceiling.MedianRuns(p.sweep.Runs)
	if *f.repeat > 1 || len(medians) < len(p.sweep.Runs) {
		fmt.Fprintln(stdout, "# medians (by req/s) of each cell's runs, with their range:")
		for _, r := range medians {
			fmt.Fprintln(stdout, "median "+r.Line())
		}
	}
	for _, c := range ceiling.ComparePeers(medians) {
		fmt.Fprintln(stdout, c.Line())
	}
	if ferr := p.finish(s, stderr); err == nil {
		err = ferr
	}
	fmt.Fprintln(stderr, nextStep(p.dir, medians, *f.repeat, c.hostBusyRepeats))
	return err
}

// sweepFlags are `ceiling sweep`'s flags beyond the common ones, and the worker counts
// they resolve to.
type sweepFlags struct {
	c                                                       *common
	ns, modes, peerHeavy, pm2, nginx, nginxConf, staticRoot *string
	repeat, imbN, imbConns, hostThreads, singleProcs        *int
	hosts                                                   *loadHostFlags
	app                                                     *appFlags
	nlist                                                   []int // the worker counts N
}

// parseSweepFlags parses and checks `ceiling sweep`'s flags, and resolves what they leave
// to the machine or to -quick: the worker counts, the duration, the imbalance run's N.
func parseSweepFlags(args []string, getenv func(string) string, stderr io.Writer) (*sweepFlags, error) {
	fs := flag.NewFlagSet("ceiling sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &sweepFlags{c: addCommon(fs, getenv, "hello,static,feed,heavy,mix")}
	c := f.c
	f.ns = fs.String("n", "", "worker counts (default: 1, 2, 4, ... up to the cores this process may use, and that count)")
	f.modes = fs.String("modes", "cluster,single,pm2,nginx,pm2-compress,nginx-gzip", "cluster (the supervisor), single (one GOMAXPROCS=N worker), and the peers: pm2 (PM2 cluster mode running the Fastify heavy PATCH), nginx (the static page; gzip_static for static+gzip), and for the workloads asking for a coding pm2-compress (the same with @fastify/compress: heavy+gzip, +br, +zstd) and nginx-gzip (gzip on, level 6: static+gzip); a missing peer is skipped")
	f.peerHeavy = fs.String("peer-heavy", "", "the Fastify heavy peer for -modes pm2 and pm2-compress: a directory with heavy.js and node_modules (fastify; @fastify/compress@"+ceiling.PeerCompressVersion+" for pm2-compress; docs/ceiling.md); empty: both skipped")
	f.pm2 = fs.String("pm2", "pm2", "pm2 binary (pm2 mode)")
	f.nginx = fs.String("nginx", "", "nginx binary (nginx mode; default: nginx on PATH, else /usr/sbin/nginx)")
	f.nginxConf = fs.String("nginx-conf", "configs/nginx/static.conf", "nginx template for the nginx mode")
	f.staticRoot = fs.String("static-root", "internal/shop/static", "directory nginx serves at /static/")
	f.singleProcs = fs.Int("single-procs", 1, "the single mode's GOMAXPROCS as a multiple of its N cores (2: twice the cores, which kept one process's cores busy on a 2-core host it shared with the generator; docs/supervisor.md)")
	f.repeat = fs.Int("repeat", 1, "rounds: every (N, mode, workload) once per round, round after round; the model, tables and plots use each cell's median run, the spread beside it")
	f.imbN = fs.Int("imbalance-n", -1, "run the few-connection imbalance run on the cluster of this N (default: the largest N; 0: none)")
	f.imbConns = fs.Int("imbalance-conns", 0, "connections of the imbalance run (default: N)")
	f.hosts = addLoadHostFlags(fs, "bin/autocannon is")
	f.app = addAppFlags(fs)
	f.hostThreads = fs.Int("load-threads", 0, "with -load-hosts: autocannon's worker threads on each host (default: the cores the server leaves on this one, at least 1)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("sweep: unexpected argument %q", fs.Arg(0))
	}
	app, modes, imbN := f.app, f.modes, f.imbN
	if *f.singleProcs < 1 || *f.singleProcs > 64 {
		return nil, fmt.Errorf("sweep: -single-procs %d: want a multiple of N from 1 (GOMAXPROCS=N, the default) to 64", *f.singleProcs)
	}
	set := explicit(fs)
	if (app.app != "" || app.config != "") && !set["modes"] {
		*modes = ceiling.ModeCluster + "," + ceiling.ModePM2
	}
	if err := app.check(set, splitList(*modes)); err != nil {
		return nil, err
	}
	if app.argv != nil || app.config != "" {
		c.workloads = ceiling.AppWorkload
		c.app = app
	}
	if *f.repeat < 1 {
		return nil, fmt.Errorf("sweep: -repeat %d: want at least 1 (rounds of the whole sweep)", *f.repeat)
	}
	nlist, err := workerCounts(*f.ns, c.quick, ceiling.ReadMachine())
	if err != nil {
		return nil, err
	}
	f.nlist = nlist
	if c.quick && !set["d"] {
		c.d = 2 * time.Second
	}
	if *imbN < 0 && c.app != nil {
		// An app's workers do not report their requests to the supervisor, as ours do:
		// the shares would read 0. -imbalance-n still asks for the run.
		*imbN = 0
	}
	if *imbN < 0 {
		*imbN = nlist[len(nlist)-1]
	}
	return f, nil
}

// workerCounts are the sweep's N: those of -n, else 1 and 2 with -quick, else 1, 2, 4, ...
// below the cores this process may use, and that count.
func workerCounts(ns string, quick bool, machine ceiling.Machine) ([]int, error) {
	var nlist []int
	switch {
	case ns != "":
		return parseInts(ns)
	case quick:
		nlist = []int{1}
		if machine.Allowed >= 2 {
			nlist = append(nlist, 2)
		}
	default:
		for n := 1; n < machine.Allowed; n *= 2 {
			nlist = append(nlist, n)
		}
		nlist = append(nlist, machine.Allowed)
	}
	return nlist, nil
}

// configure adds the sweep's own settings to the prepared configuration.
func (f *sweepFlags) configure(p *prepared) {
	app, hosts := f.app, f.hosts
	p.cfg.Ns = f.nlist
	p.cfg.Modes = splitList(*f.modes)
	p.cfg.Repeat = *f.repeat
	p.cfg.SingleProcs = *f.singleProcs
	p.cfg.ImbalanceN, p.cfg.ImbalanceConns = *f.imbN, *f.imbConns
	p.cfg.PeerHeavyDir, p.cfg.PM2, p.cfg.Nginx = *f.peerHeavy, *f.pm2, *f.nginx
	p.cfg.NginxTemplate, p.cfg.StaticRoot = *f.nginxConf, *f.staticRoot
	if app.argv != nil || app.config != "" {
		p.cfg.App, p.cfg.AppConfig = app.argv, app.config
		p.cfg.AppPM2Script, p.cfg.AppPM2Args = app.script, app.scriptArgs
		if app.pm2Unavailable != "" {
			p.sweep.Notes = append(p.sweep.Notes, "peer pm2 (the same app): "+app.pm2Unavailable)
		}
	}
	p.cfg.ListenHost = hosts.serverHost
	p.cfg.LoadHosts = ceiling.LoadHosts{Hosts: hosts.hosts, SSH: hosts.ssh(), Lead: hosts.lead, Threads: *f.hostThreads}
}

// nextStep is the sweep's last line: the command that models its results, and how to
// measure again where runs could not carry a prediction.
func nextStep(dir string, medians []ceiling.Run, repeat, hostBusyRepeats int) string {
	line := "ceiling sweep: next: `ceiling model -results " + dir + "` (predictions only from series with a run limited by the server's own CPU)"
	busy, judged := 0, 0
	for _, r := range medians {
		if r.Purpose != ceiling.PurposeSweep || r.Skipped != "" {
			continue
		}
		judged++
		if r.Verdict == ceiling.VerdictHostBusy {
			busy++
		}
	}
	if busy > 0 {
		line += fmt.Sprintf("; %d of %d cells host-busy: measure again with -repeat %d -host-busy-repeats %d on a quieter host",
			busy, judged, max(repeat, 3), max(hostBusyRepeats, 2))
	} else if repeat < 2 {
		line += "; one run a cell: -repeat 3 gives medians and their spread"
	}
	return line
}

// insideEnv marks the nic command re-executed inside its private network namespace.
const insideEnv = "CEILING_IN_NETNS"

func runNIC(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ceiling nic", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := addCommon(fs, getenv, "heavy,static")
	n := fs.Int("n", 1, "workers (cluster) or GOMAXPROCS (single)")
	mode := fs.String("mode", "cluster", "cluster or single")
	rates := fs.String("rates", "100mbit,1gbit,10gbit", "link rates to emulate")
	fs.IntVar(&c.fifo, "fifo", 0, "run the server and the generator at this SCHED_FIFO real-time priority (1-99): other work on a busy host cannot delay them, so the link is what the runs measure (docs/ceiling.md); 0: the normal policy")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("nic: unexpected argument %q", fs.Arg(0))
	}
	if c.fifo < 0 || c.fifo > 99 {
		return fmt.Errorf("nic: -fifo %d: want 1-99 (SCHED_FIFO priority), or 0 for the normal policy", c.fifo)
	}
	set := explicit(fs)
	if c.quick && !set["d"] {
		c.d = 2 * time.Second
	}
	var rs []float64
	for _, s := range splitList(*rates) {
		r, err := ceiling.ParseBits(s)
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	if getenv(insideEnv) != "1" {
		return reexecInNetns(ctx, args, stdout, stderr, len(rs)*len(splitList(c.workloads)), c)
	}

	// Inside the namespace: only its own loopback exists, so nothing can leave the host.
	if err := linkshape.LoopbackUp(); err != nil {
		return err
	}
	log, err := newLogger(stderr, c.logLevel)
	if err != nil {
		return err
	}
	defer log.Sync()
	p, err := c.prepare(ctx, "nic", log, stdout, stderr)
	if err != nil {
		return err
	}
	defer p.cleanup()
	p.cfg.Ns, p.cfg.Modes = []int{*n}, []string{*mode}
	p.sweep.Notes = append(p.sweep.Notes,
		"loopback of a private network namespace shaped by a tbf qdisc: requests, responses and ACKs share the token bucket (lo_bytes_per_s counts them all)")
	if c.fifo > 0 {
		p.sweep.Notes = append(p.sweep.Notes, fmt.Sprintf("the server and the generator ran at SCHED_FIFO priority %d (-fifo)", c.fifo))
	}
	s, err := ceiling.NewSweeper(p.cfg)
	if err != nil {
		return err
	}
	err = s.NIC(ctx, *mode, *n, rs, func(bits float64) (string, error) {
		t := linkshape.TBF{BitsPerS: bits}
		return t.TC("lo"), linkshape.Replace("lo", t)
	})
	if ferr := p.finish(s, stderr); err == nil {
		err = ferr
	}
	return err
}

// reexecInNetns runs this command again in a new network namespace, or explains why not.
func reexecInNetns(ctx context.Context, args []string, stdout, stderr io.Writer, runs int, c *common) error {
	if os.Geteuid() != 0 {
		fmt.Fprintf(stderr, "ceiling nic: skipped: emulating a NIC needs root (a private network namespace and a qdisc on its loopback); euid is %d\n", os.Geteuid())
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("nic: find this executable: %w", err)
	}
	fmt.Fprintf(stderr, "ceiling nic: %d runs of %v (+%v warm-up) in a private network namespace: about %.0f s\n",
		runs, c.d, c.warmup, float64(runs)*(c.d.Seconds()+c.warmup.Seconds()+0.6)+3)
	cmd := exec.CommandContext(ctx, self, append([]string{"nic"}, args...)...)
	cmd.Env = append(os.Environ(), insideEnv+"=1")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && errors.Is(err, syscall.EPERM) {
		fmt.Fprintf(stderr, "ceiling nic: skipped: cannot create a network namespace here: %v\n", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("nic: %w", err)
	}
	return nil
}
