package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/onehost/onehost/internal/genhealth"
	"github.com/onehost/onehost/internal/journey"
	"github.com/onehost/onehost/internal/procstat"
	"github.com/onehost/onehost/internal/srcaddr"
)

// usersUsage documents `autocannon users`.
const usersUsage = `Usage: autocannon users [flags] URL

Runs the "$12 Server Challenge" user journey (internal/journey) against URL: N virtual
users, each on its own keep-alive connection, ramped up, held and ramped down; prints
requests, req/s, latency percentiles (from each request's due time; also per route, in
the hold), failures, the generator's verdict (ok, or SATURATED: the run is invalid) and
the challenge's verdict (p95 < 500 ms, p99 < 1 s, failures < 1 %), and exits non-zero on
FAIL or on a saturated generator.
With -search, runs the challenge's search for the largest N that passes instead.

More users than one process can hold open files for (its open-file limit less 512) are
split over child processes of this binary, each on its own local-address range; -procs
forces K.

Before each trial it counts the sockets this host holds to the server (the previous
trials' TIME_WAIT among them) and warns where a (source, server) pair would pass the
connect() cliff: the fixes are net.ipv4.tcp_tw_reuse=1, a wider ip_local_port_range,
-local-addrs, or a minute between trials (docs/bench.md).

AUTOCANNON_TRACE=DIR writes a Go execution trace of each child process of a split run to
DIR/child-PID.trace (go tool trace), for finding where a generator lost time.

Flags:
`

// fdReserve is how many of a process's descriptors are kept for what is not a user's
// socket: the runtime's, the token file, the pipes to children, a user's next socket
// dialed while its old one closes.
const fdReserve = 512

// usersPerProcess is how many users one process runs before the run is split: each user
// holds one socket, so it is the open-file limit (which Go's runtime raised to the hard
// limit at start) less fdReserve. Splitting is for descriptors only: one process already
// runs on every core it may, and two that share one core held 16,000 users worse than one
// did (docs/bench.md).
func usersPerProcess() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < 2*fdReserve {
		return fdReserve // an odd limit: split early rather than fail to dial
	}
	return int(min(lim.Cur, 1<<30) - fdReserve)
}

// usersChildEnv marks a child process of a split run; its value is the child's part
// (usersChildSpec as JSON).
const usersChildEnv = "AUTOCANNON_USERS_CHILD"

// usersOptions is the parsed command line.
type usersOptions struct {
	url        string
	engine     string
	users      int
	ramp       time.Duration
	hold       time.Duration
	rampDown   time.Duration
	tokens     string
	timeScale  float64
	procs      int // 0: as many as the open-file limit requires
	localAddrs []netip.Addr
	timeout    time.Duration
	seed       uint64
	json       bool
	progress   time.Duration
	histLog    string               // -hist-log: the hold's latencies per route and second as an interval log
	saturation genhealth.Thresholds // -saturation: the generator verdict's thresholds
	// A share of a run over several hosts (ceiling challenge -load-hosts): this host's
	// users are firstUser.. of totalUsers, all hosts starting at startAt.
	firstUser, totalUsers int
	startAt               time.Time

	search      bool
	warmup      int
	start       int
	step        int
	max         int
	confirmHold time.Duration
	pause       time.Duration
}

// parseUsersArgs reads the command line; flags may come before or after the URL.
func parseUsersArgs(args []string, stderr io.Writer) (usersOptions, error) {
	var o usersOptions
	fs := flag.NewFlagSet("autocannon users", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usersUsage)
		fs.PrintDefaults()
	}
	fs.IntVar(&o.users, "n", 1000, "virtual users")
	fs.DurationVar(&o.ramp, "ramp", journey.DefaultRamp, "ramp-up: the users start evenly over this time")
	fs.DurationVar(&o.hold, "hold", journey.DefaultHold, "hold: all users run this long (with -search: each trial's hold)")
	fs.DurationVar(&o.rampDown, "rampdown", journey.DefaultRampDown, "ramp-down: the users stop evenly over this time")
	fs.StringVar(&o.tokens, "tokens", "", "token file written by `worker seed -tokens FILE` (required)")
	fs.Float64Var(&o.timeScale, "time-scale", 1, "divide every think time by this: N users offer the load of N×X")
	fs.IntVar(&o.procs, "procs", 0, "split the users over this many processes (default: as the open-file limit requires)")
	addrs := fs.String("local-addrs", "", "spread connections over these source addresses: A-B (a range) or A,B,…")
	fs.DurationVar(&o.timeout, "timeout", journey.DefaultTimeout, "per-request timeout")
	fs.StringVar(&o.engine, "engine", journey.DefaultEngine, "how the users run: loop (event loops, one per core) or goroutine (one each)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the users' random choices (default: from the clock)")
	fs.BoolVar(&o.json, "j", false, "print the result as JSON")
	fs.IntVar(&o.firstUser, "first-user", 0, "number of this run's first user (a share of a run over several hosts; default 1)")
	fs.IntVar(&o.totalUsers, "total-users", 0, "users of the whole run this share belongs to (default: first-user-1+n)")
	startAt := fs.Int64("start-at", 0, "start the ramp at this wall-clock time, in Unix milliseconds (every host of a shared run waits for it)")
	fs.StringVar(&o.histLog, "hist-log", "", "write the hold's latencies per route and per second as an HdrHistogram interval log (autocannon merge adds logs)")
	fs.DurationVar(&o.progress, "progress", 10*time.Second, "print a progress line this often (0: never)")
	fs.Func("saturation", "thresholds of the generator's verdict: hiccup=50ms,send-lag=100ms,cpu=0.95,connect=5ms,min-late=5 (docs/bench.md)", func(v string) (err error) {
		o.saturation, err = genhealth.ParseThresholds(v)
		return err
	})
	fs.BoolVar(&o.search, "search", false, "search for the largest passing number of users (the challenge's score)")
	fs.IntVar(&o.warmup, "warmup", 1000, "search: users of the unjudged warm-up trial (0: none)")
	fs.IntVar(&o.start, "start", 2500, "search: users of the first judged trial, doubled while trials pass")
	fs.IntVar(&o.step, "step", 250, "search: resolution of the bisection")
	fs.IntVar(&o.max, "max", 160000, "search: stop doubling above this")
	fs.DurationVar(&o.confirmHold, "confirm-hold", journey.DefaultHold, "search: hold of the confirming trial")
	fs.DurationVar(&o.pause, "pause", 0, "search: rest between trials")

	var urls []string
	for {
		if err := fs.Parse(args); err != nil {
			return o, err
		}
		if fs.NArg() == 0 {
			break
		}
		urls = append(urls, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch {
	case len(urls) != 1:
		return o, fmt.Errorf("users: want one URL, got %d (autocannon users [flags] http://HOST:PORT)", len(urls))
	case o.tokens == "":
		return o, errors.New("users: -tokens FILE is required (`worker seed -db DB -tokens FILE` writes one)")
	case o.users < 1 && !o.search:
		return o, fmt.Errorf("users: -n %d: give at least 1 user", o.users)
	case o.timeScale <= 0:
		return o, fmt.Errorf("users: -time-scale %v: give a positive factor", o.timeScale)
	case o.procs < 0:
		return o, fmt.Errorf("users: -procs %d: give a positive count, or 0 for automatic", o.procs)
	case o.ramp < 0 || o.hold < 0 || o.rampDown < 0:
		return o, errors.New("users: -ramp, -hold and -rampdown must not be negative")
	}
	o.url = urls[0]
	if !strings.Contains(o.url, "://") {
		o.url = "http://" + o.url
	}
	if o.warmup == 0 {
		o.warmup = -1 // journey.SearchConfig: negative means no warm-up
	}
	if *startAt > 0 {
		o.startAt = time.UnixMilli(*startAt)
	}
	var err error
	if o.localAddrs, err = srcaddr.ParseList(*addrs); err != nil {
		return o, fmt.Errorf("users: -local-addrs: %w", err)
	}
	return o, nil
}

// runUsers is `autocannon users`: a run, a search, or (with usersChildEnv set) one child
// process's part of a split run.
func runUsers(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := &usersCmd{
		getenv:     getenv,
		stdout:     stdout,
		stderr:     &lockedWriter{w: stderr},
		lead:       2 * time.Second,
		perProcess: usersPerProcess(),
		command: func(ctx context.Context) (*exec.Cmd, error) {
			exe, err := os.Executable()
			if err != nil {
				return nil, fmt.Errorf("find own binary: %w", err)
			}
			return exec.CommandContext(ctx, exe, "users"), nil
		},
	}
	if spec := getenv(usersChildEnv); spec != "" {
		return c.child(ctx, spec)
	}
	return c.run(ctx, args)
}

// usersCmd is one invocation; its fields are the seams the tests replace.
type usersCmd struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer // safe for concurrent use
	// lead is how far ahead of now a split run's children are told to start, so that they
	// all start together however long each takes to load.
	lead time.Duration
	// perProcess is how many users one process runs (usersPerProcess).
	perProcess int
	// command makes the command that runs a child: this binary's `users` mode.
	command func(ctx context.Context) (*exec.Cmd, error)
}

func (c *usersCmd) run(ctx context.Context, args []string) error {
	o, err := parseUsersArgs(args, c.stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	tokensPath, err := filepath.Abs(o.tokens)
	if err != nil {
		return fmt.Errorf("users: %w", err)
	}
	o.tokens = tokensPath
	toks, err := journey.LoadTokens(o.tokens)
	if err != nil {
		return fmt.Errorf("users: %w", err)
	}
	base := journey.Config{
		URL:        o.url,
		Users:      o.users,
		Ramp:       orNone(o.ramp),
		Hold:       orNone(o.hold),
		RampDown:   orNone(o.rampDown),
		Tokens:     toks,
		TimeScale:  o.timeScale,
		LocalAddrs: o.localAddrs,
		Timeout:    o.timeout,
		Seed:       o.seed,
		FirstUser:  o.firstUser,
		TotalUsers: o.totalUsers,
		StartAt:    o.startAt,
		Saturation: o.saturation,
		Engine:     o.engine,
	}

	// The generator's own CPU, children included: it must stay well below the machine's,
	// or the latencies measure the generator.
	gen, err := procstat.Start(procstat.Config{PID: os.Getpid()})
	if err != nil {
		return fmt.Errorf("users: sample own CPU: %w", err)
	}
	if o.search {
		return c.search(ctx, o, base, gen)
	}
	if !o.json {
		fmt.Fprintf(c.stdout, "Running the user journey @ %s\n%d users (%s user-equivalents at time scale %s) in %d process(es); ramp %v, hold %v, ramp-down %v\n\n",
			o.url, o.users, usersNum(float64(o.users)*o.timeScale), usersNum(o.timeScale),
			c.procsFor(o.users, o.procs), o.ramp, o.hold, o.rampDown)
	}
	res, runErr := c.trial(ctx, o, base)
	sum := gen.Stop()
	if o.histLog != "" && runErr == nil {
		if err := writeHistLog(o.histLog, usersLog(res, time.Now())); err != nil {
			return fmt.Errorf("users: %w", err)
		}
	}
	out := usersOutput{Result: res, Generator: usersGenerator(sum, res.Elapsed)}
	if o.json {
		if err := json.NewEncoder(c.stdout).Encode(out); err != nil {
			return err
		}
	} else {
		printUsersResult(c.stdout, out)
	}
	if runErr != nil {
		return fmt.Errorf("users: %w", runErr)
	}
	if res.Health.Saturated {
		return fmt.Errorf("INVALID: the generator was SATURATED (%s): it, not the server, was measured (docs/bench.md, \"The generator's verdict\")", res.Health.Reason())
	}
	if !res.Pass {
		return fmt.Errorf("FAIL: %s", strings.Join(res.Reasons, "; "))
	}
	return nil
}

// orNone maps a zero flag duration to journey's "none" (negative); the zero value there
// means the default.
func orNone(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func (c *usersCmd) search(ctx context.Context, o usersOptions, base journey.Config, gen *procstat.Sampler) error {
	if !o.json {
		fmt.Fprintf(c.stdout, "Searching for the largest passing number of users @ %s\nwarm-up %d, start %d, doubling, bisecting to %d; trials ramp %v, hold %v, ramp-down %v; confirmation hold %v; time scale %s\n\n",
			o.url, max(o.warmup, 0), o.start, o.step, o.ramp, o.hold, o.rampDown, o.confirmHold, usersNum(o.timeScale))
	}
	sc := journey.SearchConfig{
		Run:         base,
		Warmup:      o.warmup,
		Start:       o.start,
		Step:        o.step,
		Max:         o.max,
		ConfirmHold: o.confirmHold,
		Pause:       o.pause,
		Trial: func(ctx context.Context, cfg journey.Config) (journey.Result, error) {
			return c.trial(ctx, o, cfg)
		},
		OnStep: func(s journey.SearchStep) {
			if !o.json {
				printSearchStep(c.stdout, s)
			}
		},
	}
	res, err := journey.Search(ctx, sc)
	sum := gen.Stop()
	if o.json {
		out := struct {
			journey.SearchResult
			Generator usersGeneratorCPU `json:"generator"`
		}{res, usersGenerator(sum, 0)}
		if err := json.NewEncoder(c.stdout).Encode(out); err != nil {
			return err
		}
	} else {
		switch {
		case res.Best == 0:
			fmt.Fprintf(c.stdout, "\nno number of users passed\n")
		case res.Confirmed:
			fmt.Fprintf(c.stdout, "\nscore: %d users (%s user-equivalents), confirmed with a %v hold\n",
				res.Best, usersNum(float64(res.Best)*o.timeScale), o.confirmHold)
		default:
			fmt.Fprintf(c.stdout, "\nscore: %d users passed the search's trials, but no confirmation with a %v hold passed\n",
				res.Best, o.confirmHold)
		}
		if res.Capped {
			fmt.Fprintf(c.stdout, "(stopped doubling at -max %d)\n", o.max)
		}
		if res.GeneratorLimit > 0 {
			fmt.Fprintf(c.stdout, "generator: SATURATED from %d users on: no trial of as many was scored, and the score is this generator's limit, not the server's\n", res.GeneratorLimit)
		}
		fmt.Fprintf(c.stdout, "generator CPU: user %.1f s, sys %.1f s\n", sum.UserSec, sum.SysSec)
	}
	if err != nil {
		return err
	}
	if res.GeneratorLimit > 0 {
		return fmt.Errorf("INVALID: the generator was SATURATED from %d users on: the search measured it, not the server, above that", res.GeneratorLimit)
	}
	if res.Best == 0 {
		return errors.New("FAIL: no number of users passed")
	}
	return nil
}

// procsFor is how many processes run users: the -procs flag, or enough to keep each
// within perProcess.
func (c *usersCmd) procsFor(users, flagProcs int) int {
	if flagProcs > 0 {
		return min(flagProcs, max(users, 1))
	}
	per := max(c.perProcess, 1)
	return max(1, (users+per-1)/per)
}

// trial runs cfg.Users users, in this process or split over children.
func (c *usersCmd) trial(ctx context.Context, o usersOptions, cfg journey.Config) (journey.Result, error) {
	// Checked here, once for all child processes: they share this host's ports.
	var warnings []string
	for _, w := range journey.CheckPorts(cfg) {
		warnings = append(warnings, w.String())
		fmt.Fprintf(c.stderr, "autocannon users: warning: %s\n", w)
	}
	res, err := c.runTrial(ctx, o, cfg)
	res.PortWarnings = warnings
	return res, err
}

// runTrial runs one trial in this process or, past usersPerProcess, in child processes.
func (c *usersCmd) runTrial(ctx context.Context, o usersOptions, cfg journey.Config) (journey.Result, error) {
	k := c.procsFor(cfg.Users, o.procs)
	prog := &usersProgress{w: c.stderr, parts: make([]journey.Progress, k)}
	if k == 1 {
		if o.progress > 0 && !o.json {
			cfg.ProgressEvery = o.progress
			cfg.Progress = func(p journey.Progress) { prog.update(0, p, true) }
		}
		return journey.Run(ctx, cfg)
	}

	// Ending this context stops every child started so far (SIGTERM), for instance when a
	// later one fails to start.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now().Add(c.lead)
	if !cfg.StartAt.IsZero() {
		start = cfg.StartAt // a share of a run over several hosts: the agreed time
	}
	type outcome struct {
		res journey.Result
		got bool
		err error
	}
	outcomes := make([]outcome, k)
	var wg sync.WaitGroup
	first := max(cfg.FirstUser, 1)
	total := cfg.TotalUsers
	if total == 0 {
		total = first - 1 + cfg.Users
	}
	for i := range k {
		n := journey.Share(cfg.Users, k, i)
		spec := usersChildSpec{
			URL:           cfg.URL,
			Tokens:        o.tokens,
			Users:         n,
			FirstUser:     first,
			TotalUsers:    total,
			Ramp:          cfg.Ramp,
			Hold:          cfg.Hold,
			RampDown:      cfg.RampDown,
			TimeScale:     cfg.TimeScale,
			Timeout:       cfg.Timeout,
			Seed:          cfg.Seed,
			StartAt:       start,
			LocalAddrs:    splitAddrs(cfg.LocalAddrs, i, k),
			ProgressEvery: o.progress,
			Saturation:    cfg.Saturation,
			Engine:        cfg.Engine,
		}
		first += n
		if spec.Seed == 0 {
			spec.Seed = uint64(start.UnixNano()) // one seed for all: user n's choices stay its own
		}
		ch, err := c.startChild(cctx, spec)
		if err != nil {
			outcomes[i].err = err
			cancel()
			break
		}
		wg.Add(1)
		go func() { // owned by trial: ends when the child exits
			defer wg.Done()
			oc := &outcomes[i]
			oc.res, oc.got, oc.err = c.collectChild(ch, i, prog, !o.json)
		}()
	}
	wg.Wait()

	var parts []journey.Result
	var errs []error
	for i, oc := range outcomes {
		if oc.got {
			parts = append(parts, oc.res)
		}
		if oc.err != nil {
			errs = append(errs, fmt.Errorf("child %d: %w", i, oc.err))
		}
	}
	if len(parts) == 0 {
		return journey.Result{}, errors.Join(append(errs, errors.New("no child reported a result"))...)
	}
	merged := journey.Merge(parts...)
	if ctx.Err() != nil {
		return merged, ctx.Err()
	}
	return merged, errors.Join(errs...)
}

// splitAddrs gives child i of k its share of the local addresses: a contiguous slice, or
// one address if there are fewer addresses than children.
func splitAddrs(addrs []netip.Addr, i, k int) []netip.Addr {
	if len(addrs) == 0 {
		return nil
	}
	if len(addrs) < k {
		return []netip.Addr{addrs[i%len(addrs)]}
	}
	return addrs[i*len(addrs)/k : (i+1)*len(addrs)/k]
}

// usersChildSpec is a child's part of a split run, passed in usersChildEnv.
type usersChildSpec struct {
	URL           string               `json:"url"`
	Tokens        string               `json:"tokens"` // the token file's absolute path
	Users         int                  `json:"users"`
	FirstUser     int                  `json:"first_user"`
	TotalUsers    int                  `json:"total_users"`
	Ramp          time.Duration        `json:"ramp"`
	Hold          time.Duration        `json:"hold"`
	RampDown      time.Duration        `json:"rampdown"`
	TimeScale     float64              `json:"time_scale"`
	Timeout       time.Duration        `json:"timeout"`
	Seed          uint64               `json:"seed"`
	StartAt       time.Time            `json:"start_at"`
	LocalAddrs    []netip.Addr         `json:"local_addrs"`
	ProgressEvery time.Duration        `json:"progress_every"`
	Saturation    genhealth.Thresholds `json:"saturation"`
	Engine        string               `json:"engine"`
}

// usersChildMessage is one line a child writes to its stdout: progress while it runs,
// its result at the end.
type usersChildMessage struct {
	Progress *journey.Progress `json:"progress,omitempty"`
	Result   *journey.Result   `json:"result,omitempty"`
}

// startChild starts one child process with its part.
func (c *usersCmd) startChild(ctx context.Context, spec usersChildSpec) (*usersChild, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("start child: %w", err)
	}
	cmd, err := c.command(ctx)
	if err != nil {
		return nil, fmt.Errorf("start child: %w", err)
	}
	cmd.Env = append(os.Environ(), usersChildEnv+"="+string(b))
	cmd.Stderr = c.stderr
	// On the end of ctx, children get SIGTERM, end their run and still report what they
	// measured; WaitDelay bounds how long that may take.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start child: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start child: %w", err)
	}
	return &usersChild{cmd: cmd, out: out}, nil
}

type usersChild struct {
	cmd *exec.Cmd
	out io.Reader
}

// collectChild reads a child's messages until it exits, and waits for it.
func (c *usersCmd) collectChild(ch *usersChild, i int, prog *usersProgress, show bool) (journey.Result, bool, error) {
	var res journey.Result
	got := false
	sc := bufio.NewScanner(ch.out)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var m usersChildMessage
		if err := json.Unmarshal(line, &m); err != nil {
			continue
		}
		if m.Progress != nil {
			prog.update(i, *m.Progress, show)
		}
		if m.Result != nil {
			res, got = *m.Result, true
		}
	}
	io.Copy(io.Discard, ch.out) // a line too long for the scanner: let the child finish
	err := ch.cmd.Wait()
	if err != nil && got {
		// A child interrupted by the end of the run reports its result and then its error.
		return res, got, nil
	}
	if err == nil && !got {
		err = errors.New("exited without a result")
	}
	return res, got, err
}

// child runs one part of a split run and writes its messages to stdout.
func (c *usersCmd) child(ctx context.Context, specJSON string) error {
	var spec usersChildSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return fmt.Errorf("users child: read %s: %w", usersChildEnv, err)
	}
	toks, err := journey.LoadTokens(spec.Tokens)
	if err != nil {
		return fmt.Errorf("users child: %w", err)
	}
	enc := json.NewEncoder(c.stdout)
	var mu sync.Mutex // the progress goroutine and the final write share enc
	cfg := journey.Config{
		URL:        spec.URL,
		Users:      spec.Users,
		FirstUser:  spec.FirstUser,
		TotalUsers: spec.TotalUsers,
		Ramp:       spec.Ramp,
		Hold:       spec.Hold,
		RampDown:   spec.RampDown,
		Tokens:     toks,
		TimeScale:  spec.TimeScale,
		LocalAddrs: spec.LocalAddrs,
		Timeout:    spec.Timeout,
		StartAt:    spec.StartAt,
		Seed:       spec.Seed,
		Saturation: spec.Saturation,
		Engine:     spec.Engine,
	}
	if spec.ProgressEvery > 0 {
		cfg.ProgressEvery = spec.ProgressEvery
		cfg.Progress = func(p journey.Progress) {
			mu.Lock()
			defer mu.Unlock()
			enc.Encode(usersChildMessage{Progress: &p})
		}
	}
	if dir := c.getenv("AUTOCANNON_TRACE"); dir != "" {
		// A diagnostic: the run goes on without it, and says so.
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("child-%d.trace", os.Getpid())))
		if err == nil {
			if err = trace.Start(f); err != nil {
				f.Close()
			}
		}
		if err != nil {
			fmt.Fprintf(c.stderr, "autocannon users: AUTOCANNON_TRACE: %v\n", err)
		} else {
			defer func() { trace.Stop(); f.Close() }()
		}
	}
	res, runErr := journey.Run(ctx, cfg)
	mu.Lock()
	defer mu.Unlock()
	if err := enc.Encode(usersChildMessage{Result: &res}); err != nil {
		return fmt.Errorf("users child: write result: %w", err)
	}
	return runErr
}

// usersProgress prints one line for all processes' progress together.
type usersProgress struct {
	w     io.Writer
	mu    sync.Mutex
	parts []journey.Progress
}

func (p *usersProgress) update(i int, pr journey.Progress, show bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parts[i] = pr
	if !show || i != 0 {
		return // one line per interval, when the first process reports, with the others' latest
	}
	var sum journey.Progress
	for _, x := range p.parts {
		sum.Elapsed = max(sum.Elapsed, x.Elapsed)
		sum.Active += x.Active
		sum.Requests += x.Requests
		sum.Failures += x.Failures
	}
	fmt.Fprintf(p.w, "%6s: %d users active, %d requests, %d failures\n",
		sum.Elapsed.Round(time.Second), sum.Active, sum.Requests, sum.Failures)
}

// lockedWriter serializes writes: children's stderr and the progress lines share it.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// usersOutput is the -j output of a run.
type usersOutput struct {
	journey.Result
	Generator usersGeneratorCPU `json:"generator"`
}

// usersGeneratorCPU is the load generator's own CPU over the run (all its processes).
type usersGeneratorCPU struct {
	UserSec  float64 `json:"cpu_user_s"`
	SysSec   float64 `json:"cpu_sys_s"`
	AvgCores float64 `json:"avg_cores"`
	PeakRSS  int64   `json:"peak_rss_bytes"`
}

func usersGenerator(s procstat.Summary, elapsed time.Duration) usersGeneratorCPU {
	g := usersGeneratorCPU{UserSec: s.UserSec, SysSec: s.SysSec, PeakRSS: s.PeakRSS}
	if elapsed > 0 {
		g.AvgCores = (s.UserSec + s.SysSec) / elapsed.Seconds()
	}
	return g
}

// offeredRate is the request rate the journey's users offer: an iteration lasts 20.5 s
// on average (2.5 s of first-iteration spread aside) and makes 2.17 requests.
func offeredRate(userEquivalents float64) float64 { return userEquivalents * 2.17 / 20.5 }

func printUsersResult(w io.Writer, out usersOutput) {
	r := out.Result
	var b strings.Builder
	fmt.Fprintf(&b, "users: %d (%s user-equivalents)", r.Users, usersNum(r.UserEquivalents))
	if r.Engine != "" {
		fmt.Fprintf(&b, " on the %s engine", r.Engine)
	}
	b.WriteString("\n")
	b.WriteString(spreadLine(r.Spread, 0, nil))
	fmt.Fprintf(&b, "requests: %d in %v: %s req/s", r.Requests, r.Elapsed.Round(time.Millisecond), usersNum(r.RPS))
	if len(r.Stages) > 1 && r.Stages[1].Duration > 0 {
		fmt.Fprintf(&b, " (hold: %s req/s; the users offer ~%s)", usersNum(r.Stages[1].RPS), usersNum(offeredRate(r.UserEquivalents)))
	}
	b.WriteString("\n")
	l := r.Latency
	fmt.Fprintf(&b, "latency: p50 %s, p90 %s, p95 %s, p99 %s, max %s (from each request's due time)\n",
		usersMs(l.P50), usersMs(l.P90), usersMs(l.P95), usersMs(l.P99), usersMs(l.Max))
	rate := 0.0
	if r.Requests > 0 {
		rate = 100 * float64(r.Failures) / float64(r.Requests)
	}
	fmt.Fprintf(&b, "failures: %d (%.2f%%)\n", r.Failures, rate)
	codes := make([]int, 0, len(r.Status))
	for code := range r.Status {
		codes = append(codes, code)
	}
	slices.Sort(codes)
	b.WriteString("status:")
	for _, code := range codes {
		fmt.Fprintf(&b, " %d×%d", code, r.Status[code])
	}
	if len(codes) == 0 {
		b.WriteString(" none")
	}
	b.WriteString("\n")
	if len(r.Errors) > 0 {
		kinds := make([]string, 0, len(r.Errors))
		for k := range r.Errors {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		b.WriteString("errors:")
		for _, k := range kinds {
			fmt.Fprintf(&b, " %s×%d", k, r.Errors[k])
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "requests by route: feed %d, post %d, like %d, create %d; iterations %d (%d restarted on the feed)\n",
		r.Routes[journey.RouteFeed].Requests, r.Routes[journey.RoutePost].Requests,
		r.Routes[journey.RouteLike].Requests, r.Routes[journey.RouteCreate].Requests, r.Iterations, r.FeedRetries)
	for _, s := range r.Stages {
		if s.Duration == 0 && s.Requests == 0 {
			continue
		}
		fmt.Fprintf(&b, "  %-9s %8v: %7d requests, %8s req/s, p95 %s, p99 %s, %d failures\n",
			s.Name, s.Duration, s.Requests, usersNum(s.RPS), usersMs(s.Latency.P95), usersMs(s.Latency.P99), s.Failures)
	}
	printRouteLatencies(&b, r)
	g := out.Generator
	fmt.Fprintf(&b, "generator CPU: %.2f cores on average (user %.1f s, sys %.1f s), peak RSS %d MiB\n",
		g.AvgCores, g.UserSec, g.SysSec, g.PeakRSS>>20)
	b.WriteString(r.Health.String())
	if r.Health.Parts > 1 {
		fmt.Fprintf(&b, " [%d processes]", r.Health.Parts)
	}
	b.WriteString("\n")
	if r.Health.Saturated {
		b.WriteString("INVALID: the generator, not the server, was measured; neither PASS nor FAIL\n")
	} else if r.Pass {
		b.WriteString("PASS (p95 < 500 ms, p99 < 1 s, failures < 1 %)\n")
	} else {
		fmt.Fprintf(&b, "FAIL: %s\n", strings.Join(r.Reasons, "; "))
	}
	io.WriteString(w, b.String())
}

// routeOrder is the order the journey's routes are reported in: its steps' order.
var routeOrder = []string{journey.RouteFeed, journey.RoutePost, journey.RouteLike, journey.RouteCreate}

// printRouteLatencies writes each route's latency in the hold, for the routes with
// requests there. The result counts a route's failures over the whole run only, so
// those come with the whole run's requests, labelled as such.
func printRouteLatencies(b *strings.Builder, r journey.Result) {
	header := false
	for _, name := range routeOrder {
		c := r.Routes[name]
		if c.Hist.Histogram == nil || c.Hist.TotalCount() == 0 {
			continue
		}
		if !header {
			b.WriteString("latency by route in the hold:\n")
			header = true
		}
		l := c.Latency
		fmt.Fprintf(b, "  %-6s %7d requests, p50 %s, p99 %s, max %s (whole run: %d requests, %d failures)\n",
			name, c.Hist.TotalCount(), usersMs(l.P50), usersMs(l.P99), usersMs(l.Max), c.Requests, c.Failures)
	}
}

func printSearchStep(w io.Writer, s journey.SearchStep) {
	r := s.Result
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL (" + strings.Join(r.Reasons, "; ") + ")"
	}
	rate := 0.0
	if r.Requests > 0 {
		rate = 100 * float64(r.Failures) / float64(r.Requests)
	}
	if s.Invalid {
		verdict = "INVALID, not scored (generator SATURATED: " + r.Health.Reason() + ")"
	}
	if s.Phase == journey.PhaseWarmup {
		verdict = "done (not judged)"
		if s.Invalid {
			verdict += "; generator SATURATED: " + r.Health.Reason()
		}
	}
	fmt.Fprintf(w, "%-7s %6d users (ramp %v, hold %v, ramp-down %v): %d requests, %s req/s in the hold, p95 %s, p99 %s, failures %.2f%%: %s\n",
		s.Phase, s.Users, s.Ramp, s.Hold, s.RampDown, r.Requests, usersNum(holdRPS(r)),
		usersMs(r.Latency.P95), usersMs(r.Latency.P99), rate, verdict)
}

func holdRPS(r journey.Result) float64 {
	if len(r.Stages) > 1 {
		return r.Stages[1].RPS
	}
	return r.RPS
}

// usersMs formats a latency in milliseconds.
func usersMs(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// usersNum formats a rate or count without trailing zeros.
func usersNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
