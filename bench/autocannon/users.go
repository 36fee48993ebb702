package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/onehost/onehost/internal/journey"
	"github.com/onehost/onehost/internal/procstat"
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

// run parses the command line, loads the tokens and runs one trial or the search, then
// prints the result and its verdict.
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
	base := journeyConfig(o, toks)

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
	return usersVerdict(res, runErr)
}

// journeyConfig is the journey run the command line asks for; toks are the users' tokens.
func journeyConfig(o usersOptions, toks []journey.Token) journey.Config {
	return journey.Config{
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
}

// usersVerdict is the run's outcome as the command's error: the run's own error, an
// invalid (saturated) generator, or the challenge's FAIL; nil when it passed.
func usersVerdict(res journey.Result, runErr error) error {
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
