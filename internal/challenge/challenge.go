// Package challenge measures servers the way the "$12 Server Challenge" scores them: the
// most simulated users (internal/journey) a server holds with p95 < 500 ms, p99 < 1 s and
// under 1 % failures, found by the challenge's search (journey.Search), while the server's
// CPU is held to a fraction of one core as the published entries were measured
// (`systemd-run --scope -p CPUQuota=20%`). Beside each trial's verdict it records the
// server's CPU time per request, from /proc (internal/procstat), so a score can be read as
// a cost.
//
// The package runs servers one after the other (ours, then a peer) through functions its
// caller provides: how to start a server (in its quota, on its cores) and how to run one
// trial of users against it (the load generator, on other cores). It knows no command line.
//
// A score is the server's only on a quiet host. During each trial it also measures the
// host's other work, as the ceiling sweep does (procstat: the host's busy CPU less that of
// this process and everything it started, the servers and the generator among them;
// otherwork.go). A judged trial beside other work of Config.OtherCores or more is
// host-busy: it scores nothing, the search stops there, and the report says so with the
// other work's cores instead of a number, and asks for a quiet run.
//
// Non-goals: choosing cores or making the quota (the caller's), a server's correctness
// (the 42 checks are elsewhere).
package challenge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/onehost/onehost/internal/journey"
	"github.com/onehost/onehost/internal/procstat"
)

// Server is one server to score.
type Server struct {
	// Name labels it in the report: "worker", "cluster of 2", "node peer".
	Name string
	// Start starts the server and returns the pid of its root process (CPU is counted for
	// it and its descendants), its base URL, and a function that stops it and waits.
	Start func(ctx context.Context) (pid int, url string, stop func() error, err error)
}

// Config says what to measure. Servers and Search.Trial are required.
type Config struct {
	Servers []Server
	// Search is the template of every search: its Run carries the stages, time scale and
	// tokens (Run.URL is set per server), its Trial runs one trial (the load generator).
	Search journey.SearchConfig
	// Users, when > 0, runs one trial of that many users per server instead of a search.
	Users int
	// Logf, when set, receives a line per trial.
	Logf func(format string, args ...any)
	// OtherCores: a judged trial during which the host's other work (its busy CPU less
	// this process's and its descendants': the servers, the generator) reached this many
	// cores on average is host-busy and scores nothing. Default 0.1, the ceiling sweep's
	// (internal/ceiling.Thresholds.OtherCores).
	OtherCores float64

	// otherWork starts measuring the host's other work over one trial; its stop returns
	// the cores. Default measureOtherWork; tests replace it.
	otherWork func() (stop func() (float64, error), err error)
}

// Trial is one trial against one server, with the server's CPU.
type Trial struct {
	journey.SearchStep
	// CPU is the server's CPU time (user and system, all its processes) over the trial,
	// ramps included; PerRequest is CPU over the trial's requests.
	CPU        time.Duration `json:"cpu_ns"`
	PerRequest time.Duration `json:"cpu_per_request_ns"`
	// OtherCores is the host's other work over the trial, in cores (OtherCores' rule);
	// -1 when it could not be measured.
	OtherCores float64 `json:"other_cores"`
	// HostBusy: a judged trial beside other work of Config.OtherCores or more; it is not
	// scored, whatever its verdict (Pass is false).
	HostBusy bool `json:"host_busy,omitempty"`
}

// Score is one server's outcome.
type Score struct {
	Server string `json:"server"`
	// Users is the largest number of users that passed: confirmed with the confirmation's
	// hold when Confirmed, else the largest that passed a search trial (0: none passed).
	Users     int  `json:"users"`
	Confirmed bool `json:"confirmed"`
	// UserEquivalents is Users × the time scale: the challenge's users that many users offer.
	UserEquivalents float64 `json:"user_equivalents"`
	// GeneratorLimit is the fewest users of a trial whose generator was saturated (that
	// trial was not scored; 0: none was): the score is then the generator's limit, and the
	// server's may be higher.
	GeneratorLimit int `json:"generator_limit,omitempty"`
	// HostBusy, when set, is the trial that ran beside other work (Config.OtherCores): the
	// server was not measured alone, so Users is 0 and the search stopped there.
	HostBusy *BusyTrial `json:"host_busy,omitempty"`
	Trials   []Trial    `json:"trials"`
	// Err is why the measurement stopped early, if it did.
	Err string `json:"error,omitempty"`
}

// BusyTrial is the trial that made a score host-busy.
type BusyTrial struct {
	Phase      string  `json:"phase"`
	Users      int     `json:"users"`
	OtherCores float64 `json:"other_cores"`
	Threshold  float64 `json:"threshold"`
}

// Best is the trial of Users (the confirmation when there was one), or nil.
func (s Score) Best() *Trial {
	var best *Trial
	for i := range s.Trials {
		t := &s.Trials[i]
		if t.Pass && t.Users == s.Users && t.Phase != journey.PhaseWarmup {
			best = t // the last one: the confirmation comes last
		}
	}
	return best
}

// Run scores every server in turn. A server that fails to start, or whose trial fails
// (not a failed verdict: an error of the generator), ends its score with Err; the next
// server is still measured. Run returns ctx's error if ctx ends.
func Run(ctx context.Context, cfg Config) ([]Score, error) {
	if cfg.Search.Trial == nil {
		return nil, errors.New("run challenge: Search.Trial is nil")
	}
	if cfg.OtherCores <= 0 {
		cfg.OtherCores = procstat.DefaultOtherCores
	}
	if cfg.otherWork == nil {
		cfg.otherWork = measureOtherWork
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	var scores []Score
	for _, srv := range cfg.Servers {
		sc, err := score(ctx, cfg, srv, logf)
		if err != nil {
			sc.Err = err.Error()
			logf("%s: %v", srv.Name, err)
		}
		scores = append(scores, sc)
		if ctx.Err() != nil {
			return scores, ctx.Err()
		}
	}
	return scores, nil
}

// score measures one server.
func score(ctx context.Context, cfg Config, srv Server, logf func(string, ...any)) (Score, error) {
	ts := cfg.Search.Run.TimeScale
	if ts <= 0 {
		ts = 1
	}
	sc := Score{Server: srv.Name}
	pid, url, stop, err := srv.Start(ctx)
	if err != nil {
		return sc, fmt.Errorf("start %s: %w", srv.Name, err)
	}
	defer func() {
		if err := stop(); err != nil {
			logf("%s: stop: %v", srv.Name, err)
		}
	}()
	// One of each per trial, in order, paired with the steps by OnStep.
	var cpus []time.Duration
	var others []float64
	search := cfg.Search
	search.Run.URL = url
	inner := search.Trial
	search.Trial = func(ctx context.Context, rc journey.Config) (journey.Result, error) {
		if sc.HostBusy != nil {
			// The last trial ran beside other work: the search ends without a score.
			return journey.Result{}, errHostBusy
		}
		s, err := procstat.Start(procstat.Config{PID: pid})
		if err != nil {
			return journey.Result{}, fmt.Errorf("sample %s: %w", srv.Name, err)
		}
		stopOther, err := cfg.otherWork()
		if err != nil {
			s.Stop()
			return journey.Result{}, fmt.Errorf("measure the host's other work: %w", err)
		}
		r, err := inner(ctx, rc)
		sum := s.Stop()
		other, oerr := stopOther()
		if oerr != nil {
			logf("%s: measure the host's other work: %v", srv.Name, oerr)
			other = -1
		}
		cpus = append(cpus, time.Duration((sum.UserSec+sum.SysSec)*float64(time.Second)))
		others = append(others, other)
		return r, err
	}
	search.OnStep = func(step journey.SearchStep) {
		t := Trial{SearchStep: step, OtherCores: -1}
		if n := len(cpus); n > 0 {
			t.CPU, t.OtherCores = cpus[n-1], others[n-1]
			if step.Result.Requests > 0 {
				t.PerRequest = t.CPU / time.Duration(step.Result.Requests)
			}
		}
		if step.Phase != journey.PhaseWarmup && t.OtherCores >= cfg.OtherCores {
			t.HostBusy, t.Pass = true, false
			if sc.HostBusy == nil {
				sc.HostBusy = &BusyTrial{Phase: step.Phase, Users: step.Users, OtherCores: t.OtherCores, Threshold: cfg.OtherCores}
			}
		}
		sc.Trials = append(sc.Trials, t)
		logf("%s: %s %d users (%s user-equivalents): %s", srv.Name, step.Phase, step.Users,
			groupDigits(float64(step.Users)*ts), trialLine(t, cfg.OtherCores))
	}
	err = runTrials(ctx, cfg, search, &sc)
	if sc.HostBusy != nil {
		// No number from a host that was not quiet, not even that of a trial that passed
		// before the other work began: the search did not finish.
		sc.Users, sc.Confirmed, sc.GeneratorLimit = 0, false, 0
	}
	sc.UserEquivalents = float64(sc.Users) * ts
	return sc, err
}

// runTrials runs the one trial of cfg.Users, or the search, through search (whose Trial
// and OnStep record into sc), and records the outcome in sc. A search that a host-busy
// trial ended is no error.
func runTrials(ctx context.Context, cfg Config, search journey.SearchConfig, sc *Score) error {
	if cfg.Users > 0 {
		rc := search.Run
		rc.Users = cfg.Users
		r, err := search.Trial(ctx, rc)
		if err != nil {
			return err
		}
		invalid := r.Health.Saturated
		search.OnStep(journey.SearchStep{Phase: "trial", Users: cfg.Users, Ramp: rc.Ramp, Hold: rc.Hold,
			RampDown: rc.RampDown, Pass: r.Pass && !invalid, Invalid: invalid, Result: r})
		if invalid {
			sc.GeneratorLimit = cfg.Users
		} else if r.Pass {
			sc.Users = cfg.Users // one trial: nothing to confirm
		}
		return nil
	}
	res, err := journey.Search(ctx, search)
	sc.Users, sc.Confirmed, sc.GeneratorLimit = res.Best, res.Confirmed, res.GeneratorLimit
	if errors.Is(err, errHostBusy) {
		return nil // the report says why there is no score
	}
	return err
}

// trialLine is one trial's verdict and figures; threshold is Config.OtherCores.
func trialLine(t Trial, threshold float64) string {
	r := t.Result
	verdict := "PASS"
	switch {
	case t.HostBusy:
		verdict = fmt.Sprintf("HOST-BUSY, not scored: other work %.2f cores (threshold %.2f)", t.OtherCores, threshold)
	case t.Invalid:
		verdict = "INVALID, not scored: generator SATURATED (" + r.Health.Reason() + ")"
	case !t.Pass:
		verdict = "FAIL (" + strings.Join(r.Reasons, ", ") + ")"
	}
	hold := holdStage(r)
	line := fmt.Sprintf("%s; hold %s req/s, p95 %s, p99 %s, failures %d of %d; server CPU %s per request; %s",
		verdict, groupDigits(hold.RPS), ms(r.Latency.P95), ms(r.Latency.P99), r.Failures, r.Requests, us(t.PerRequest), r.Health)
	if !t.HostBusy && t.OtherCores >= 0 {
		line += fmt.Sprintf("; other work %.2f cores", t.OtherCores)
	}
	for _, w := range r.PortWarnings { // the likely cause of a SATURATED verdict, said before it is guessed
		line += "; generator ports: " + w
	}
	return line
}

func holdStage(r journey.Result) journey.Stage {
	for _, s := range r.Stages {
		if s.Name == "hold" {
			return s
		}
	}
	return journey.Stage{}
}

// Published is the Node entry's own figure, from the challenge's write-up: 20,000 users
// at about 2,100 req/s on 20 % of one core.
const Published = "Node entry (published): 20,000 users at ~2,100 req/s on 20 % of one core"

// WriteReport prints the scores side by side, with the published figure.
func WriteReport(w io.Writer, scores []Score, search journey.SearchConfig, cores float64, note string) {
	ts := search.Run.TimeScale
	if ts <= 0 {
		ts = 1
	}
	fmt.Fprintf(w, "\nThe challenge's score: the most users held with p95 < 500 ms, p99 < 1 s, < 1 %% failures.\n")
	quota := "no CPU limit"
	if cores > 0 {
		// 3 × 0.2 is 0.6000000000000001 in floating point: print what was asked for.
		quota = fmt.Sprintf("%g of one core each", math.Round(cores*1e6)/1e6)
	}
	fmt.Fprintf(w, "Servers: %s. Trials: ramp %v, hold %v, ramp-down %v (the challenge: 60s, 5m, 30s); confirmation hold %v; time scale %g (one user offers %g users' requests).\n",
		quota, search.Run.Ramp, search.Run.Hold, search.Run.RampDown, search.ConfirmHold, ts, ts)
	if note != "" {
		fmt.Fprintln(w, note)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "server\tscore (user-equivalents)\tconfirmed\thold req/s\tp95\tp99\tCPU per request\t")
	for _, s := range scores {
		b := s.Best()
		if s.HostBusy != nil {
			fmt.Fprintf(tw, "%s\thost-busy\t-\t-\t-\t-\t-\t\n", s.Server)
			continue
		}
		if b == nil {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t\n", s.Server, groupDigits(s.UserEquivalents))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\t%s\t\n", s.Server, groupDigits(s.UserEquivalents), s.Confirmed,
			groupDigits(holdStage(b.Result).RPS), ms(b.Result.Latency.P95), ms(b.Result.Latency.P99), us(b.PerRequest))
	}
	tw.Flush()
	fmt.Fprintln(w, Published)
	for _, s := range scores {
		if s.Err != "" {
			fmt.Fprintf(w, "%s stopped early: %s\n", s.Server, s.Err)
		}
		if b := s.HostBusy; b != nil {
			fmt.Fprintf(w, "%s: HOST-BUSY, no score: other work on this host took %.2f cores during the trial of %s users (%s user-equivalents), "+
				"at or above the %.2f the score allows (the servers, the generator and this command not counted): the trial measured the host, not the server. "+
				"Run again on a quiet host: stop what else runs there (top shows it).\n",
				s.Server, b.OtherCores, groupDigits(float64(b.Users)), groupDigits(float64(b.Users)*ts), b.Threshold)
			continue
		}
		if s.GeneratorLimit > 0 {
			// The score is the generator's limit only if the server failed no judged trial
			// below it: else the server's own failure bounds the score.
			failed := 0
			for _, tr := range s.Trials {
				if tr.Phase != journey.PhaseWarmup && !tr.Pass && !tr.Invalid && tr.Users < s.GeneratorLimit && (failed == 0 || tr.Users < failed) {
					failed = tr.Users
				}
			}
			if failed > 0 {
				fmt.Fprintf(w, "%s: the generator was SATURATED from %s users (%s user-equivalents) on (not scored); the score is the server's: it failed at %s users with its generator ok\n",
					s.Server, groupDigits(float64(s.GeneratorLimit)), groupDigits(float64(s.GeneratorLimit)*ts), groupDigits(float64(failed)))
			} else {
				fmt.Fprintf(w, "%s: the generator was SATURATED from %s users (%s user-equivalents) on; those trials were not scored, so the score is the generator's limit: the server may hold more\n",
					s.Server, groupDigits(float64(s.GeneratorLimit)), groupDigits(float64(s.GeneratorLimit)*ts))
			}
		}
	}
	if len(scores) > 1 && scores[0].HostBusy == nil && scores[1].UserEquivalents > 0 {
		fmt.Fprintf(w, "%s ÷ %s: %.2f× the users\n", scores[0].Server, scores[1].Server, scores[0].UserEquivalents/scores[1].UserEquivalents)
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
func us(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond)) }

// groupDigits writes a whole number with thousands separators: 40,000.
func groupDigits(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}
