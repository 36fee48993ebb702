package ceiling

import (
	"fmt"
	"math"
	"sort"
)

// Validation checks the model against measured points three ways, because the in-sample
// error alone says little: with two points per series the fit passes through both.
type Validation struct {
	// FitMaxN is the largest N the extrapolation's fit may use.
	FitMaxN int
	// InSample: every fit point predicted by the fit on all points of its series.
	InSample []Check
	// LeaveOneOut: every fit point predicted by the fit on the other points of its
	// series (see LeaveOneOut).
	LeaveOneOut []Check
	// Extrapolation: every unshaped sweep run with N > FitMaxN, predicted by the fit on
	// the runs with N ≤ FitMaxN (see Extrapolate).
	Extrapolation []Check
	// MaxPoints is the most fit points of any one series.
	MaxPoints int
}

// DefaultFitMaxN is the extrapolation's default: what a 2-core machine measures.
const DefaultFitMaxN = 2

// Validate runs all three checks; fitMaxN ≤ 0 means DefaultFitMaxN.
func Validate(runs []Run, fitMaxN int) Validation {
	if fitMaxN <= 0 {
		fitMaxN = DefaultFitMaxN
	}
	v := Validation{FitMaxN: fitMaxN, LeaveOneOut: LeaveOneOut(runs), Extrapolation: Extrapolate(runs, fitMaxN)}
	for _, c := range CheckModels(Fit(runs), runs) {
		if fitPoint(c.Run) {
			v.InSample = append(v.InSample, c)
		}
	}
	for _, m := range Fit(runs) {
		v.MaxPoints = max(v.MaxPoints, len(m.Points))
	}
	return v
}

// Validates reports whether the points can test the model's shape in n: some series has
// at least three fit points, one more than the model's two parameters per series.
func (v Validation) Validates() bool { return v.MaxPoints >= 3 }

// LeaveOneOut predicts every fit point (see Fit) from the fit on the other points of its
// series, so the prediction never saw the point it is judged against. With two or more
// points left the series fits its own alpha. With one point left alpha cannot be fitted
// and the model's structural assumption stands in for it: the loss per core is a
// property of the host and the mode more than of the route, so alpha is borrowed from
// the other series (BorrowAlpha). A series' only point is not checked.
func LeaveOneOut(runs []Run) []Check {
	full := Fit(runs)
	var out []Check
	rest := make([]Run, 0, len(runs))
	for i, r := range runs {
		if !fitPoint(r) {
			continue
		}
		rest = append(append(rest[:0], runs[:i]...), runs[i+1:]...)
		left := fitPoints(rest, seriesOf(r))
		m, ok := modelOf(Fit(rest), seriesOf(r))
		if !ok || left == 0 {
			continue
		}
		if left == 1 {
			m.Alpha, m.AlphaFrom = BorrowAlpha(full, m)
		}
		out = append(out, check(i, m, r))
	}
	return out
}

// Extrapolate fits on the runs with N ≤ maxN only (every purpose; what a machine with
// maxN cores would have measured) and predicts each unshaped sweep run with N > maxN. A
// series with a single fit point at N ≤ maxN borrows alpha as in LeaveOneOut; one with
// none (only generator-bound runs) is not predicted.
func Extrapolate(runs []Run, maxN int) []Check {
	var small []Run
	for _, r := range runs {
		if r.N <= maxN {
			small = append(small, r)
		}
	}
	models := Fit(small)
	var out []Check
	for i, r := range runs {
		if r.N <= maxN || r.Skipped != "" || r.RPS <= 0 || r.Purpose != PurposeSweep || r.LinkBitsPerS > 0 {
			continue
		}
		left := fitPoints(small, seriesOf(r))
		m, ok := modelOf(models, seriesOf(r))
		if !ok || left == 0 {
			continue
		}
		if left == 1 {
			m.Alpha, m.AlphaFrom = BorrowAlpha(models, m)
		}
		out = append(out, check(i, m, r))
	}
	return out
}

// BorrowAlpha is the alpha for model m when its own series cannot fit one: the median
// alpha of the models of the same source and mode, other workloads, that were fitted
// from at least two points; 0 (linear scaling, the optimistic end) when there is none.
// The second result says which.
//
// Alphas are compared as losses relative to one core (the universal scaling law's
// contention term, rps(n) = n λ / (1 + α (n − 1))) and returned relative to m.N1, so a
// series whose one remaining point is at N1 = 2 gets the same curve through that point
// as one anchored at a single core: the model's form relative to N1,
// 1 + α'(n − N1), equals (1 + α(N1 − 1)) (1 + α'(n − N1)) / (1 + α(N1 − 1)) with
// α' = α / (1 + α (N1 − 1)). Without the rebasing a loss near 1 per core fitted from
// n = 1 would put the curve's pole just below N1 and predict n = 1 as many times the
// measured rate.
func BorrowAlpha(models []Model, m Model) (float64, string) {
	var as []float64
	for _, o := range models {
		if o.Source == m.Source && o.Mode == m.Mode && o.Workload != m.Workload && len(o.Points) >= 2 && o.AlphaFrom == "" {
			if a, ok := alphaFromOne(o.Alpha, o.N1); ok {
				as = append(as, a)
			}
		}
	}
	if len(as) == 0 {
		return 0, "default 0: no other series to borrow from"
	}
	a := median(as)
	from := fmt.Sprintf("median of %d other %s series", len(as), m.Mode)
	if m.N1 > 1 {
		from += fmt.Sprintf(", %.3f per core from n=1 rebased to n1=%d", a, m.N1)
	}
	return alphaAt(a, m.N1), from
}

// alphaFromOne turns a loss per core relative to n1 into one relative to a single core;
// false when the curve has its pole at or above one core (it cannot be expressed so).
func alphaFromOne(alpha float64, n1 int) (float64, bool) {
	d := 1 - alpha*float64(n1-1)
	if n1 <= 1 {
		return alpha, true
	}
	if d <= 0 {
		return 0, false
	}
	return alpha / d, true
}

// alphaAt turns a loss per core relative to a single core into one relative to n1.
func alphaAt(alpha float64, n1 int) float64 {
	if n1 <= 1 {
		return alpha
	}
	return alpha / (1 + alpha*float64(n1-1))
}

// fitPoints counts the fit points of series k (Fit falls back on generator-bound runs
// when a series has none; the checks do not predict from those).
func fitPoints(runs []Run, k series) int {
	n := 0
	for _, r := range runs {
		if fitPoint(r) && seriesOf(r) == k {
			n++
		}
	}
	return n
}

func modelOf(models []Model, k series) (Model, bool) {
	for _, m := range models {
		if m.series() == k {
			return m, true
		}
	}
	return Model{}, false
}

// MeanAbsErr is the mean absolute error of the checks without a note (the others
// compare with a lower bound, or with a limit the model cannot know), and their count.
func MeanAbsErr(cs []Check) (float64, int) {
	var sum float64
	var n int
	for _, c := range cs {
		if c.Note != "" || math.IsNaN(c.ErrPct) || math.IsInf(c.ErrPct, 0) {
			continue
		}
		sum += math.Abs(c.ErrPct)
		n++
	}
	if n == 0 {
		return 0, 0
	}
	return sum / float64(n), n
}

// CPUBound is the checks whose run the server's CPU limited (verdict cpu): there the
// measured rate is the ceiling the model predicts, where elsewhere a lock, the generator
// or idle cores held it below.
func CPUBound(cs []Check) []Check {
	var out []Check
	for _, c := range cs {
		if c.Run.Verdict == VerdictCPU {
			out = append(out, c)
		}
	}
	return out
}

// seriesChecks groups checks by series, in series order.
func seriesChecks(cs []Check) ([]series, map[series][]Check) {
	by := make(map[series][]Check)
	var keys []series
	for _, c := range cs {
		k := seriesOf(c.Run)
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], c)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].less(keys[j]) })
	return keys, by
}
