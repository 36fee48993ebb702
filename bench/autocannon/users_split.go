package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/trace"
	"sync"
	"syscall"
	"time"

	"github.com/onehost/onehost/internal/genhealth"
	"github.com/onehost/onehost/internal/journey"
)

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

// runTrial runs one trial in this process or, past usersPerProcess, in child processes:
// start each child on its part (childSpec), collect them, merge their results
// (mergeOutcomes).
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
	outcomes := make([]childOutcome, k)
	var wg sync.WaitGroup
	first := max(cfg.FirstUser, 1)
	total := cfg.TotalUsers
	if total == 0 {
		total = first - 1 + cfg.Users
	}
	for i := range k {
		n := journey.Share(cfg.Users, k, i)
		spec := childSpec(o, cfg, n, first, total, start, i, k)
		first += n
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

	return mergeOutcomes(ctx, outcomes)
}

// childOutcome is what one child of a split run reported: its result, if it got one, and
// its error.
type childOutcome struct {
	res journey.Result
	got bool
	err error
}

// childSpec is child i of k's part of a split run: n users from first (of total), all
// children starting at start.
func childSpec(o usersOptions, cfg journey.Config, n, first, total int, start time.Time, i, k int) usersChildSpec {
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
	if spec.Seed == 0 {
		spec.Seed = uint64(start.UnixNano()) // one seed for all: user n's choices stay its own
	}
	return spec
}

// mergeOutcomes merges the children's results into one, with every child's error; with
// none at all it fails, and when ctx ended its error wins.
func mergeOutcomes(ctx context.Context, outcomes []childOutcome) (journey.Result, error) {
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
