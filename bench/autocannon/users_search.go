package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/onehost/onehost/internal/journey"
	"github.com/onehost/onehost/internal/procstat"
)

// search runs the challenge's search for the largest number of users that passes
// (journey.Search), each trial by c.trial, then prints the score and its verdict.
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
		printSearchResult(c.stdout, o, res, sum)
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

// printSearchResult prints the search's score, whether it was confirmed or capped, and the
// generator's verdict and CPU.
func printSearchResult(w io.Writer, o usersOptions, res journey.SearchResult, sum procstat.Summary) {
	switch {
	case res.Best == 0:
		fmt.Fprintf(w, "\nno number of users passed\n")
	case res.Confirmed:
		fmt.Fprintf(w, "\nscore: %d users (%s user-equivalents), confirmed with a %v hold\n",
			res.Best, usersNum(float64(res.Best)*o.timeScale), o.confirmHold)
	default:
		fmt.Fprintf(w, "\nscore: %d users passed the search's trials, but no confirmation with a %v hold passed\n",
			res.Best, o.confirmHold)
	}
	if res.Capped {
		fmt.Fprintf(w, "(stopped doubling at -max %d)\n", o.max)
	}
	if res.GeneratorLimit > 0 {
		fmt.Fprintf(w, "generator: SATURATED from %d users on: no trial of as many was scored, and the score is this generator's limit, not the server's\n", res.GeneratorLimit)
	}
	fmt.Fprintf(w, "generator CPU: user %.1f s, sys %.1f s\n", sum.UserSec, sum.SysSec)
}
