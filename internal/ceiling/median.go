package ceiling

import (
	"fmt"
	"sort"
)

// Spread is how the runs behind a cell's median run varied.
type Spread struct {
	Runs   int     `json:"runs"`    // the runs the median was chosen from
	MinRPS float64 `json:"min_rps"` // their slowest
	MaxRPS float64 `json:"max_rps"` // their fastest
	// Disturbed: runs of the cell that measured something else than the server (judged
	// host-busy, generator or fd), left out because the cell has runs that did not.
	Disturbed int `json:"disturbed,omitempty"`
}

// Pct is the range as a share of the median's req/s.
func (s Spread) Pct(median float64) float64 {
	if median <= 0 {
		return 0
	}
	return 100 * (s.MaxRPS - s.MinRPS) / median
}

// Text is the spread for a line: runs=3 rps_range=27134-40426.
func (s Spread) Text() string {
	t := fmt.Sprintf("runs=%d rps_range=%.0f-%.0f", s.Runs, s.MinRPS, s.MaxRPS)
	if s.Disturbed > 0 {
		t += fmt.Sprintf(" left_out=%d", s.Disturbed)
	}
	return t
}

// cellKey is what makes runs repeats of one another: the same source, purpose, workload,
// mode, N, link and connections.
type cellKey struct {
	source, purpose, workload, mode string
	n, conns                        int
	link                            float64
}

// MedianRuns reduces repeated runs of a cell (SweepConfig.Repeat, HostBusyRepeats, or
// results of two sweeps read together) to one: the median by req/s, with its Spread set
// when there were several. Runs that measured something else than the server (judged
// host-busy, generator or fd: the runs the model leaves out) are left out where the cell
// has others; with an even count the slower of the two middle runs stands (a real run, whose
// verdict and CPU belong to it, not an average of two). A cell's runs that were all
// skipped give its first. Cells keep the order of their first run.
func MedianRuns(runs []Run) []Run {
	var keys []cellKey
	groups := make(map[cellKey][]Run)
	for _, r := range runs {
		k := cellKey{r.Source, r.Purpose, r.Workload, r.Mode, r.N, 0, r.LinkBitsPerS}
		if r.Purpose == PurposeImbalance {
			k.conns = r.Connections
		}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], r)
	}
	out := make([]Run, 0, len(keys))
	for _, k := range keys {
		out = append(out, medianRun(groups[k]))
	}
	return out
}

// medianRun is one cell's median run (see MedianRuns).
func medianRun(rs []Run) Run {
	var measured, quiet []Run
	for _, r := range rs {
		if r.Skipped == "" {
			measured = append(measured, r)
			switch r.Verdict {
			case VerdictHostBusy, VerdictGenerator, VerdictFD:
			default:
				quiet = append(quiet, r)
			}
		}
	}
	if len(measured) == 0 {
		return rs[0]
	}
	pool := measured
	if len(quiet) > 0 {
		pool = quiet
	}
	if len(pool) == 1 && len(measured) == 1 {
		return pool[0]
	}
	sorted := append([]Run(nil), pool...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].RPS < sorted[j].RPS })
	m := sorted[(len(sorted)-1)/2]
	m.Spread = &Spread{Runs: len(sorted), MinRPS: sorted[0].RPS, MaxRPS: sorted[len(sorted)-1].RPS,
		Disturbed: len(measured) - len(pool)}
	return m
}
