package journey

import (
	"context"
	"fmt"
	"time"
)

// SearchConfig is the challenge's search for the largest number of users that passes.
// Every field but Run's URL and Tokens has a default.
type SearchConfig struct {
	// Run is the template of every trial: URL, Tokens, TimeScale, LocalAddrs and the
	// stages. Its Hold is the hold of the search's trials (shortened holds make a quicker,
	// less certain search); Users is set by the search.
	Run Config
	// Warmup is the users of the first, unjudged trial. Default 1,000; negative: none.
	Warmup int
	// Start is the first judged trial's users; passing trials double it. Default 2,500.
	Start int
	// Step is the resolution of the bisection: the search stops when the largest passing
	// and the smallest failing trial are at most Step apart. Default 250.
	Step int
	// Max caps the doubling. Default 160,000.
	Max int
	// ConfirmHold is the hold of the confirming trial. Default 5m (the challenge's).
	ConfirmHold time.Duration
	// ConfirmTries is how many times a failed confirmation steps down by Step and
	// confirms again. Default 3.
	ConfirmTries int
	// Pause is a rest between trials (connections in TIME_WAIT drain). Default none.
	Pause time.Duration
	// Trial runs one trial. Default Run; a process-splitting caller passes its own.
	Trial func(ctx context.Context, cfg Config) (Result, error)
	// OnStep, if set, is called after each trial.
	OnStep func(SearchStep)
}

// Search phases.
const (
	PhaseWarmup  = "warmup"
	PhaseDouble  = "double"
	PhaseBisect  = "bisect"
	PhaseConfirm = "confirm"
)

// SearchStep is one trial of a search.
type SearchStep struct {
	Phase    string        `json:"phase"`
	Users    int           `json:"users"`
	Ramp     time.Duration `json:"ramp_ns"`
	Hold     time.Duration `json:"hold_ns"`
	RampDown time.Duration `json:"rampdown_ns"`
	Pass     bool          `json:"pass"`
	// Invalid: the trial's generator was saturated (Result.Health), so it measured the
	// generator: it is neither a pass nor a fail, and Pass is false.
	Invalid bool   `json:"invalid,omitempty"`
	Result  Result `json:"result"`
}

// SearchResult is a search's outcome.
type SearchResult struct {
	// Best is the largest number of users that passed (0 if none did). When Confirmed is
	// set it passed the ConfirmHold trial; otherwise every confirmation failed and Best is
	// the largest that passed a search trial.
	Best      int  `json:"best"`
	Confirmed bool `json:"confirmed"`
	// Capped is set when every doubling passed up to Max.
	Capped bool `json:"capped,omitempty"`
	// GeneratorLimit is the fewest users of a trial whose generator was saturated (0:
	// none was). The search climbs no higher than that: above it the generator, not the
	// server, would be measured, so Best is then the server's score only as far as the
	// generator could tell.
	GeneratorLimit int          `json:"generator_limit,omitempty"`
	Steps          []SearchStep `json:"steps"`
}

func (c SearchConfig) withDefaults() SearchConfig {
	if c.Warmup == 0 {
		c.Warmup = 1000
	}
	if c.Start <= 0 {
		c.Start = 2500
	}
	if c.Step <= 0 {
		c.Step = 250
	}
	if c.Max <= 0 {
		c.Max = 160000
	}
	if c.ConfirmHold <= 0 {
		c.ConfirmHold = DefaultHold
	}
	if c.ConfirmTries <= 0 {
		c.ConfirmTries = 3
	}
	if c.Trial == nil {
		c.Trial = Run
	}
	return c
}

// Search runs the challenge's search: a warm-up at Warmup users (not judged); then
// Start users, doubling while trials pass; then bisection between the largest pass and
// the smallest failure, in multiples of Step, until they are at most Step apart; then one
// trial of the largest pass with the full ConfirmHold. A failed confirmation steps down
// by Step (up to ConfirmTries times). A trial whose generator was saturated is invalid:
// not scored, and no trial of as many users or more follows it (a confirmation that is
// invalid steps down as a failed one does). It returns the steps so far with any trial's
// error.
func Search(ctx context.Context, cfg SearchConfig) (SearchResult, error) {
	cfg = cfg.withDefaults()
	var res SearchResult
	first := true
	trial := func(phase string, users int, hold time.Duration) (bool, error) {
		if !first && cfg.Pause > 0 {
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(cfg.Pause):
			}
		}
		first = false
		rc := cfg.Run
		rc.Users = users
		rc.FirstUser, rc.TotalUsers = 0, 0
		rc.StartAt = time.Time{}
		rc.Hold = hold
		r, err := cfg.Trial(ctx, rc)
		if err != nil {
			return false, fmt.Errorf("search: %s trial with %d users: %w", phase, users, err)
		}
		invalid := r.Health.Saturated
		step := SearchStep{Phase: phase, Users: users, Ramp: rc.Ramp, Hold: rc.Hold, RampDown: rc.RampDown,
			Pass: r.Pass && !invalid, Invalid: invalid, Result: r}
		res.Steps = append(res.Steps, step)
		if invalid && phase != PhaseWarmup && (res.GeneratorLimit == 0 || users < res.GeneratorLimit) {
			res.GeneratorLimit = users
		}
		if cfg.OnStep != nil {
			cfg.OnStep(step)
		}
		return step.Pass, nil
	}

	if cfg.Warmup > 0 {
		if _, err := trial(PhaseWarmup, cfg.Warmup, cfg.Run.Hold); err != nil {
			return res, err
		}
	}
	lo, hi := 0, 0 // the largest pass; the smallest failure (0: none yet)
	for n := cfg.Start; ; n *= 2 {
		if n > cfg.Max {
			res.Capped = true
			break
		}
		ok, err := trial(PhaseDouble, n, cfg.Run.Hold)
		if err != nil {
			return res, err
		}
		if !ok {
			hi = n
			break
		}
		lo = n
	}
	for hi > 0 && hi-lo > cfg.Step {
		mid := lo + (hi-lo)/2/cfg.Step*cfg.Step
		if mid <= lo {
			mid = lo + cfg.Step
		}
		ok, err := trial(PhaseBisect, mid, cfg.Run.Hold)
		if err != nil {
			return res, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	res.Best = lo // passed a trial; replaced by the confirmed number below
	for range cfg.ConfirmTries {
		if lo <= 0 {
			break
		}
		ok, err := trial(PhaseConfirm, lo, cfg.ConfirmHold)
		if err != nil {
			return res, err
		}
		if ok {
			res.Best, res.Confirmed = lo, true
			return res, nil
		}
		lo -= cfg.Step
	}
	return res, nil
}
