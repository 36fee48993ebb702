package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/onehost/onehost/internal/genhealth"
	"github.com/onehost/onehost/internal/journey"
	"github.com/onehost/onehost/internal/srcaddr"
)

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
