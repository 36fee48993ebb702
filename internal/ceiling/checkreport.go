package ceiling

import (
	"bufio"
	"fmt"
	"sort"
	"strings"
)

// writeChecks is the model against every measured run: the in-sample prediction, the
// leave-one-out prediction where there is one, both mean errors, and a plain warning
// when the points cannot validate the model.
func writeChecks(b *bufio.Writer, models []Model, runs []Run, v Validation) {
	loo := make(map[int]Check)
	for _, c := range v.LeaveOneOut {
		loo[c.Index] = c
	}
	fmt.Fprintf(b, "\n## The model against every measured run\n\n")
	fmt.Fprintln(b, "In-sample: the fit on all points of the series; leave-one-out: the fit on the series' other points only (so it never saw the point it predicts).")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| workload | mode | purpose | n | link | measured req/s | in-sample | error | leave-one-out | error | verdict | note |")
	fmt.Fprintln(b, "|---|---|---|---:|---|---:|---:|---:|---:|---:|---|---|")
	var shaped []Check
	for _, c := range CheckModels(models, runs) {
		l := "-"
		if c.Run.LinkBitsPerS > 0 {
			l = FormatBits(c.Run.LinkBitsPerS)
			shaped = append(shaped, c)
		}
		lp, le, note := "-", "-", c.Note
		if o, ok := loo[c.Index]; ok {
			lp, le = fmt.Sprintf("%.0f", o.Predicted.RPS), fmt.Sprintf("%+.1f%%", o.ErrPct)
			if o.Model.AlphaFrom != "" {
				note = joinNote(note, fmt.Sprintf("leave-one-out alpha %.3f (%s)", o.Model.Alpha, o.Model.AlphaFrom))
			}
		}
		measured := fmt.Sprintf("%.0f", c.Run.RPS)
		if sp := c.Run.Spread; sp != nil && sp.Runs > 1 {
			measured += fmt.Sprintf(" (%.0f-%.0f, %d runs, %.0f%%)", sp.MinRPS, sp.MaxRPS, sp.Runs, sp.Pct(c.Run.RPS))
		}
		if sp := c.Run.Spread; sp != nil && sp.Disturbed > 0 {
			measured += fmt.Sprintf(" (%d run(s) left out: host-busy, generator or fd)", sp.Disturbed)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %d | %s | %s | %.0f | %+.1f%% | %s | %s | %s | %s |\n", seriesName(c.Run.Source, c.Run.Workload),
			c.Run.Mode, c.Run.Purpose, c.Run.N, l, measured, c.Predicted.RPS, c.ErrPct, lp, le, or(c.Run.Verdict, "-"), note)
	}
	fmt.Fprintln(b)
	in, nin := MeanAbsErr(v.InSample)
	lo, nlo := MeanAbsErr(v.LeaveOneOut)
	fmt.Fprintf(b, "- In-sample mean absolute error: %.1f%% over %d fit points (the fit saw each point it predicts).\n", in, nin)
	fmt.Fprintf(b, "- Leave-one-out mean absolute error: %.1f%% over %d points (each predicted from the other points of its series; with one point left, alpha is borrowed: the median of the other workloads of the same mode and source).\n", lo, nlo)
	if e, n := MeanAbsErr(shaped); n > 0 {
		fmt.Fprintf(b, "- Shaped-link runs (predicted from the unshaped fit and the link): %.1f%% over %d runs.\n", e, n)
	}
	if !v.Validates() {
		fmt.Fprintf(b, "\n**These points cannot validate the model.** No series has more than %d fit point(s), and the model has two parameters per series "+
			"(CPU per request × e1 at n1, and alpha), so the fit passes through both points and the in-sample error is 0 by construction "+
			"(unless a superlinear step clamped alpha to 0). Leave-one-out then predicts each point from the other one alone with a borrowed alpha: "+
			"it tests whether one loss per core fits every workload of a mode, not how throughput bends as cores are added. "+
			"Only a series with three or more N can test that; see the extrapolation test below and docs/ceiling.md.\n", v.MaxPoints)
	}
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// extrapolationNs are the N the extrapolation predicted, ascending.
func extrapolationNs(cs []Check) []int {
	seen := make(map[int]bool)
	var ns []int
	for _, c := range cs {
		if !seen[c.Run.N] {
			seen[c.Run.N] = true
			ns = append(ns, c.Run.N)
		}
	}
	sort.Ints(ns)
	return ns
}

// writeExtrapolation is the extrapolation test: per series the error at each larger N,
// and the mean errors overall, on CPU-bound points, per mode and per N.
func writeExtrapolation(b *bufio.Writer, v Validation) {
	fmt.Fprintf(b, "\n## Extrapolation: fit on N ≤ %d, predict the larger N\n\n", v.FitMaxN)
	if len(v.Extrapolation) == 0 {
		fmt.Fprintf(b, "No run has N > %d: these results cannot test how the model extrapolates to more cores (docs/ceiling.md, \"Does the model extrapolate?\", tests it against 16-vCPU measurements).\n", v.FitMaxN)
		return
	}
	fmt.Fprintf(b, "Each series is fitted only on its runs with N ≤ %d (what a %d-core machine measures) and asked for the larger N measured. "+
		"Cells: error (predicted / measured req/s). * the server was not CPU-bound there (verdict not cpu: a lock, idle cores or the generator held the rate); "+
		"g generator-bound (a lower bound, left out of the means). alpha (all) and the last two columns are the fit on every point, for comparison.\n\n", v.FitMaxN, v.FitMaxN)
	ns := extrapolationNs(v.Extrapolation)
	head, sep := "| workload | mode | alpha (N ≤ "+fmt.Sprint(v.FitMaxN)+") | alpha (all) |", "|---|---|---:|---:|"
	for _, n := range ns {
		head += fmt.Sprintf(" n=%d |", n)
		sep += "---:|"
	}
	fmt.Fprintln(b, head+" extrapolation MAE | in-sample MAE (all) | leave-one-out MAE (all) |")
	fmt.Fprintln(b, sep+"---:|---:|---:|")
	all := make(map[series]Model)
	for _, c := range v.InSample {
		all[seriesOf(c.Run)] = c.Model
	}
	_, inBy := seriesChecks(v.InSample)
	_, looBy := seriesChecks(v.LeaveOneOut)
	keys, by := seriesChecks(v.Extrapolation)
	for _, k := range keys {
		cs := by[k]
		row := fmt.Sprintf("| %s | %s | %.3f", seriesName(k.source, k.workload), k.mode, cs[0].Model.Alpha)
		if cs[0].Model.AlphaFrom != "" {
			row += " (borrowed)"
		}
		if m, ok := all[k]; ok {
			row += fmt.Sprintf(" | %.3f |", m.Alpha)
		} else {
			row += " | - |"
		}
		for _, n := range ns {
			cell := " - |"
			for _, c := range cs {
				if c.Run.N == n {
					cell = fmt.Sprintf(" %+.0f%% (%s / %s)%s |", c.ErrPct, kilo(c.Predicted.RPS), kilo(c.Run.RPS), checkMark(c))
				}
			}
			row += cell
		}
		row += " " + maeText(cs) + " | " + maeText(inBy[k]) + " | " + maeText(looBy[k]) + " |"
		fmt.Fprintln(b, row)
	}
	fmt.Fprintln(b)
	for _, l := range extrapolationLines(v) {
		fmt.Fprintln(b, "- "+l)
	}
}

// kilo prints a rate to three significant digits or so: 53.3k, 1.06M.
func kilo(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func checkMark(c Check) string {
	switch {
	case c.Run.Verdict == VerdictGenerator:
		return " g"
	case c.Run.Verdict != VerdictCPU:
		return " *"
	}
	return ""
}

func maeText(cs []Check) string {
	e, n := MeanAbsErr(cs)
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", e)
}

// extrapolationLines are the extrapolation's mean errors in words: overall, on CPU-bound
// points, per mode and per N.
func extrapolationLines(v Validation) []string {
	e, n := MeanAbsErr(v.Extrapolation)
	ec, nc := MeanAbsErr(CPUBound(v.Extrapolation))
	lines := []string{fmt.Sprintf("Mean absolute extrapolation error: %.1f%% over %d points; CPU-bound points only: %.1f%% over %d.", e, n, ec, nc)}
	var modes []string
	byMode := make(map[string][]Check)
	byN := make(map[int][]Check)
	for _, c := range v.Extrapolation {
		if _, ok := byMode[c.Run.Mode]; !ok {
			modes = append(modes, c.Run.Mode)
		}
		byMode[c.Run.Mode] = append(byMode[c.Run.Mode], c)
		byN[c.Run.N] = append(byN[c.Run.N], c)
	}
	sort.Strings(modes)
	var parts []string
	for _, m := range modes {
		e, n := MeanAbsErr(byMode[m])
		parts = append(parts, fmt.Sprintf("%s %.1f%% (%d)", m, e, n))
	}
	lines = append(lines, "By mode: "+strings.Join(parts, ", ")+".")
	parts = parts[:0]
	for _, n := range extrapolationNs(v.Extrapolation) {
		e, k := MeanAbsErr(byN[n])
		parts = append(parts, fmt.Sprintf("n=%d %.1f%% (%d)", n, e, k))
	}
	lines = append(lines, "By N: "+strings.Join(parts, ", ")+".")
	var under, over Check
	for _, c := range v.Extrapolation {
		if c.Note != "" {
			continue
		}
		if c.ErrPct < under.ErrPct {
			under = c
		}
		if c.ErrPct > over.ErrPct {
			over = c
		}
	}
	var worst []string
	for _, c := range []Check{under, over} {
		if c.Run.N > 0 {
			worst = append(worst, fmt.Sprintf("%+.0f%% (%s %s n=%d)", c.ErrPct, seriesName(c.Run.Source, c.Run.Workload), c.Run.Mode, c.Run.N))
		}
	}
	if len(worst) > 0 {
		lines = append(lines, "Worst: "+strings.Join(worst, ", ")+".")
	}
	return lines
}

// ValidationSummary is the model check in a few key=value lines for the command's
// output: in-sample and leave-one-out error, whether the points can validate the model,
// and the extrapolation error overall and per series.
func ValidationSummary(v Validation) []string {
	in, nin := MeanAbsErr(v.InSample)
	lo, nlo := MeanAbsErr(v.LeaveOneOut)
	out := []string{fmt.Sprintf("model_check in_sample_mae=%.1f%% in_sample_points=%d loo_mae=%.1f%% loo_points=%d max_points_per_series=%d validates=%t",
		in, nin, lo, nlo, v.MaxPoints, v.Validates())}
	if !v.Validates() {
		out = append(out, fmt.Sprintf("model_check: at most %d point(s) per series: the in-sample error is 0 by construction and cannot validate the model", v.MaxPoints))
	}
	e, n := MeanAbsErr(v.Extrapolation)
	if n == 0 {
		return append(out, fmt.Sprintf("model_extrapolation fit_max_n=%d points=0 (no run has N > %d: not testable here)", v.FitMaxN, v.FitMaxN))
	}
	ec, nc := MeanAbsErr(CPUBound(v.Extrapolation))
	out = append(out, fmt.Sprintf("model_extrapolation fit_max_n=%d points=%d mae=%.1f%% cpu_bound_points=%d cpu_bound_mae=%.1f%%", v.FitMaxN, n, e, nc, ec))
	keys, by := seriesChecks(v.Extrapolation)
	for _, k := range keys {
		l := fmt.Sprintf("model_extrapolation workload=%s mode=%s", seriesName(k.source, k.workload), k.mode)
		cs := append([]Check(nil), by[k]...)
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].Run.N < cs[j].Run.N })
		for _, c := range cs {
			l += fmt.Sprintf(" n%d=%+.1f%%%s", c.Run.N, c.ErrPct, strings.TrimSpace(checkMark(c)))
		}
		out = append(out, l+" mae="+maeText(by[k]))
	}
	return out
}
