package journey

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestSearch runs the search against a fake server whose capacity is a number of users:
// a trial passes if it asks for at most that many (the confirmation may have its own).
func TestSearch(t *testing.T) {
	tests := []struct {
		name        string
		cfg         SearchConfig
		capacity    int
		confirmCap  int // capacity under the long confirmation hold; 0: the same
		wantTrials  string
		wantBest    int
		wantConfirm bool
	}{
		{"official, 3000", SearchConfig{}, 3000, 0,
			"warmup 1000, double 2500, double 5000, bisect 3750, bisect 3000, bisect 3250, confirm 3000", 3000, true},
		{"exact power", SearchConfig{}, 5000, 0,
			"warmup 1000, double 2500, double 5000, double 10000, bisect 7500, bisect 6250, bisect 5500, bisect 5250, confirm 5000", 5000, true},
		{"fails at the start", SearchConfig{}, 1100, 0,
			"warmup 1000, double 2500, bisect 1250, bisect 500, bisect 750, bisect 1000, confirm 1000", 1000, true},
		{"nothing passes", SearchConfig{}, 100, 0,
			"warmup 1000, double 2500, bisect 1250, bisect 500, bisect 250", 0, false},
		{"capped", SearchConfig{Warmup: -1, Max: 10000}, 1 << 30, 0,
			"double 2500, double 5000, double 10000, confirm 10000", 10000, true},
		{"confirmation fails once", SearchConfig{Warmup: -1}, 3000, 2800, // 3000 short, 2750 long
			"double 2500, double 5000, bisect 3750, bisect 3000, bisect 3250, confirm 3000, confirm 2750", 2750, true},
		{"confirmation never passes", SearchConfig{Warmup: -1, ConfirmTries: 2}, 3000, 1,
			"double 2500, double 5000, bisect 3750, bisect 3000, bisect 3250, confirm 3000, confirm 2750", 3000, false},
		{"custom steps", SearchConfig{Warmup: -1, Start: 100, Step: 10}, 130, 0,
			"double 100, double 200, bisect 150, bisect 120, bisect 130, bisect 140, confirm 130", 130, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Run = Config{Hold: time.Minute}
			var trials []string
			cfg.Trial = func(ctx context.Context, c Config) (Result, error) {
				capacity := tc.capacity
				confirm := c.Hold == DefaultHold
				if confirm && tc.confirmCap > 0 {
					capacity = tc.confirmCap
				}
				if !confirm && c.Hold != time.Minute {
					t.Errorf("trial of %d users held %v, want the search's 1m", c.Users, c.Hold)
				}
				return Result{Users: c.Users, Pass: c.Users <= capacity}, nil
			}
			cfg.OnStep = func(s SearchStep) { trials = append(trials, fmt.Sprintf("%s %d", s.Phase, s.Users)) }
			res, err := Search(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := joinSteps(trials); got != tc.wantTrials {
				t.Errorf("trials:\n got %s\nwant %s", got, tc.wantTrials)
			}
			if res.Best != tc.wantBest || res.Confirmed != tc.wantConfirm {
				t.Errorf("best %d confirmed %v, want %d %v", res.Best, res.Confirmed, tc.wantBest, tc.wantConfirm)
			}
			if len(res.Steps) != len(trials) {
				t.Errorf("result lists %d steps, OnStep saw %d", len(res.Steps), len(trials))
			}
		})
	}
}

func joinSteps(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}

func TestSearchTrialError(t *testing.T) {
	boom := errors.New("boom")
	calls := 0
	_, err := Search(context.Background(), SearchConfig{Trial: func(ctx context.Context, c Config) (Result, error) {
		calls++
		if calls == 2 {
			return Result{}, boom
		}
		return Result{Pass: true}, nil
	}})
	if !errors.Is(err, boom) || calls != 2 {
		t.Errorf("Search error = %v after %d trials, want boom after 2", err, calls)
	}
}
