package ceiling

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
)

// exactRuns are sweep runs that the model with c1 µs per request at one core and the
// given alpha reproduces exactly: rps(n) = n × 1e6 / c1 / (1 + alpha (n − 1)).
func exactRuns(workload, mode string, c1, alpha float64, ns ...int) []Run {
	var runs []Run
	for _, n := range ns {
		rps := float64(n) * 1e6 / c1 / (1 + alpha*float64(n-1))
		runs = append(runs, Run{Workload: workload, Mode: mode, Purpose: PurposeSweep, N: n, Requests: int64(rps * 3), RPS: rps,
			ServerCPUUsPerReq: c1 * (1 + alpha*float64(n-1)), ServerBusyCores: float64(n), ServerCores: n, Verdict: VerdictCPU})
	}
	return runs
}

func cat(rs ...[]Run) []Run {
	var out []Run
	for _, r := range rs {
		out = append(out, r...)
	}
	return out
}

// errsOf maps "workload/n" to each check's error.
func errsOf(cs []Check) map[string]float64 {
	m := make(map[string]float64)
	for _, c := range cs {
		m[fmt.Sprintf("%s/%d", c.Run.Workload, c.Run.N)] = c.ErrPct
	}
	return m
}

func wantErrs(t *testing.T, got []Check, want map[string]float64) {
	t.Helper()
	g := errsOf(got)
	if len(g) != len(want) {
		t.Errorf("got checks %v, want %v", g, want)
	}
	for k, w := range want {
		if e, ok := g[k]; !ok || math.Abs(e-w) > 1e-6 {
			t.Errorf("%s: got error %.6f%% (checked: %t), want %.6f%%", k, e, ok, w)
		}
	}
}

func TestLeaveOneOut(t *testing.T) {
	gen := Run{Workload: "a", Mode: ModeCluster, Purpose: PurposeSweep, N: 4, Requests: 1, RPS: 1, Verdict: VerdictGenerator}
	for _, tc := range []struct {
		name         string
		runs         []Run
		want         map[string]float64 // workload/n -> error %
		wantBorrowed bool
	}{
		{"three points or more: each series fits itself",
			exactRuns("a", ModeCluster, 50, 0.1, 1, 2, 4, 8),
			map[string]float64{"a/1": 0, "a/2": 0, "a/4": 0, "a/8": 0}, false},
		{"two points, the same alpha elsewhere: the borrowed alpha is exact both ways",
			cat(exactRuns("a", ModeCluster, 50, 0.2, 1, 2), exactRuns("b", ModeCluster, 10, 0.2, 1, 2)),
			map[string]float64{"a/1": 0, "a/2": 0, "b/1": 0, "b/2": 0}, true},
		{"two points, different alphas: the error shows",
			cat(exactRuns("a", ModeCluster, 50, 0.1, 1, 2), exactRuns("b", ModeCluster, 50, 0.3, 1, 2)),
			// a/2 from a/1 with b's 0.3: 2/1.3 against 2/1.1. a/1 from a/2 with 0.3 rebased to
			// n1 = 2: r1 = rps(2) (1 + 0.3) / 2 = 1.3/1.1 of the measured.
			map[string]float64{"a/2": (1.1/1.3 - 1) * 100, "a/1": (1.3/1.1 - 1) * 100, "b/2": (1.3/1.1 - 1) * 100, "b/1": (1.1/1.3 - 1) * 100}, true},
		{"one series alone: alpha 0 by default",
			exactRuns("a", ModeCluster, 50, 0.25, 1, 2),
			map[string]float64{"a/2": 25, "a/1": -20}, true},
		{"a series' only point is not checked", exactRuns("a", ModeCluster, 50, 0.1, 1), map[string]float64{}, false},
		{"nor one whose other points the generator limited",
			cat(exactRuns("a", ModeCluster, 50, 0.1, 1), []Run{gen}), map[string]float64{}, false},
		{"generator-bound runs are neither fitted nor checked",
			cat(exactRuns("a", ModeCluster, 50, 0.1, 1, 2, 8), []Run{gen}),
			map[string]float64{"a/1": 0, "a/2": 0, "a/8": 0}, false},
		{"other modes and sources are other series",
			cat(exactRuns("a", ModeCluster, 50, 0.1, 1, 2, 4), exactRuns("a", ModeSingle, 50, 0.5, 1, 2, 4),
				func() []Run {
					rs := exactRuns("a", ModeCluster, 50, 0.9, 1, 2, 4)
					for i := range rs {
						rs[i].Source = "csv"
					}
					return rs
				}()),
			nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := LeaveOneOut(tc.runs)
			if tc.want != nil {
				wantErrs(t, cs, tc.want)
			} else {
				for _, c := range cs {
					if math.Abs(c.ErrPct) > 1e-6 {
						t.Errorf("%s %s/%s n=%d: got error %.4f%%, want 0 (each series is exact on its own)", c.Run.Source, c.Run.Workload, c.Run.Mode, c.Run.N, c.ErrPct)
					}
				}
				if len(cs) != 9 {
					t.Errorf("got %d checks, want 9", len(cs))
				}
			}
			for _, c := range cs {
				if borrowed := c.Model.AlphaFrom != ""; borrowed != tc.wantBorrowed {
					t.Errorf("%s n=%d: got alpha from %q, want borrowed %t", c.Run.Workload, c.Run.N, c.Model.AlphaFrom, tc.wantBorrowed)
				}
				if c.Index < 0 || c.Index >= len(tc.runs) || c.Run.N != tc.runs[c.Index].N {
					t.Errorf("got index %d for n=%d, want the run's position", c.Index, c.Run.N)
				}
			}
		})
	}
}

func TestBorrowAlpha(t *testing.T) {
	fitted := func(w, mode, source string, n1 int, alpha float64) Model {
		return Model{Workload: w, Mode: mode, Source: source, N1: n1, Alpha: alpha, Points: []int{n1, n1 + 1}}
	}
	me := Model{Workload: "me", Mode: ModeCluster, N1: 1, Points: []int{1}}
	for _, tc := range []struct {
		name     string
		models   []Model
		m        Model
		want     float64
		wantFrom string
	}{
		{"nothing to borrow", []Model{me}, me, 0, "default 0"},
		{"the median of the others", []Model{fitted("a", ModeCluster, "", 1, 0.1), fitted("b", ModeCluster, "", 1, 0.9),
			fitted("c", ModeCluster, "", 1, 0.2), me}, me, 0.2, "median of 3 other cluster series"},
		{"other modes, sources and one-point series are not borrowed from", []Model{fitted("a", ModeSingle, "", 1, 0.5),
			fitted("b", ModeCluster, "csv", 1, 0.5), {Workload: "c", Mode: ModeCluster, N1: 1, Alpha: 0.5, Points: []int{1}},
			fitted("d", ModeCluster, "", 1, 0.3)}, me, 0.3, "median of 1 other"},
		{"rebased to n1 = 2", []Model{fitted("a", ModeCluster, "", 1, 0.5)}, Model{Workload: "me", Mode: ModeCluster, N1: 2},
			0.5 / 1.5, "rebased to n1=2"},
		{"a loss relative to n1 = 2 counts from one core", []Model{fitted("a", ModeCluster, "", 2, 0.5/1.5)}, me, 0.5, "median of 1"},
		{"a curve with its pole above one core is left out", []Model{fitted("a", ModeCluster, "", 3, 0.6)}, me, 0, "default 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from := BorrowAlpha(tc.models, tc.m)
			if !near(got, tc.want, 1e-12) || !strings.Contains(from, tc.wantFrom) {
				t.Errorf("got %v (%q), want %v (%q)", got, from, tc.want, tc.wantFrom)
			}
		})
	}
}

func TestExtrapolate(t *testing.T) {
	shaped := Run{Workload: "a", Mode: ModeCluster, Purpose: PurposeNIC, N: 8, Requests: 10, RPS: 10, LinkBitsPerS: 1e9}
	genBound := exactRuns("a", ModeCluster, 50, 0.1, 12)
	genBound[0].RPS /= 2
	genBound[0].Verdict = VerdictGenerator
	for _, tc := range []struct {
		name    string
		runs    []Run
		maxN    int
		want    map[string]float64
		wantMAE float64
		wantN   int
	}{
		{"the model's own curve extrapolates exactly", exactRuns("a", ModeCluster, 50, 0.1, 1, 2, 4, 8, 12), 2,
			map[string]float64{"a/4": 0, "a/8": 0, "a/12": 0}, 0, 3},
		{"fit on N ≤ 4 predicts 8 and 12 only", exactRuns("a", ModeCluster, 50, 0.1, 1, 2, 4, 8, 12), 4,
			map[string]float64{"a/8": 0, "a/12": 0}, 0, 2},
		{"a loss that sets in later is missed", cat(exactRuns("a", ModeCluster, 50, 0, 1, 2), exactRuns("a", ModeCluster, 50, 0.1, 8)), 2,
			map[string]float64{"a/8": 70}, 70, 1},
		{"a generator-bound point is predicted but left out of the mean", cat(exactRuns("a", ModeCluster, 50, 0.1, 1, 2, 4), genBound), 2,
			map[string]float64{"a/4": 0, "a/12": 100}, 0, 1},
		{"one point at N ≤ 2 borrows alpha", cat(exactRuns("a", ModeCluster, 50, 0.1, 1, 8), exactRuns("b", ModeCluster, 20, 0.1, 1, 2)), 2,
			map[string]float64{"a/8": 0}, 0, 1},
		{"no prediction from generator-bound runs alone", cat(func() []Run {
			rs := exactRuns("a", ModeCluster, 50, 0.1, 1, 2)
			rs[0].Verdict, rs[1].Verdict = VerdictGenerator, VerdictGenerator
			return rs
		}(), exactRuns("a", ModeCluster, 50, 0.1, 4)), 2, map[string]float64{}, 0, 0},
		{"shaped runs are not extrapolated", cat(exactRuns("a", ModeCluster, 50, 0.1, 1, 2), []Run{shaped}), 2, map[string]float64{}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := Extrapolate(tc.runs, tc.maxN)
			wantErrs(t, cs, tc.want)
			if mae, n := MeanAbsErr(cs); !near(mae, tc.wantMAE, 1e-9) || n != tc.wantN {
				t.Errorf("got mean error %.4f%% over %d, want %.4f%% over %d", mae, n, tc.wantMAE, tc.wantN)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name          string
		runs          []Run
		wantValidates bool
		wantInSample  int
		wantLOO       int
		wantExtrap    int
	}{
		{"two points per series cannot validate", cat(exactRuns("a", ModeCluster, 50, 0.1, 1, 2), exactRuns("b", ModeSingle, 50, 0.1, 1, 2)), false, 4, 4, 0},
		{"three points can", exactRuns("a", ModeCluster, 50, 0.1, 1, 2, 4), true, 3, 3, 1},
		// hello/single's one point is in-sample but has no other point to be left out from.
		{"generator-bound points are not fit points", syntheticRuns(), true, 5, 4, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Validate(tc.runs, 0)
			if v.FitMaxN != DefaultFitMaxN || v.Validates() != tc.wantValidates || len(v.InSample) != tc.wantInSample || len(v.Extrapolation) != tc.wantExtrap {
				t.Errorf("got fit max %d, validates %t, %d in-sample, %d extrapolated; want %d, %t, %d, %d", v.FitMaxN, v.Validates(),
					len(v.InSample), len(v.Extrapolation), DefaultFitMaxN, tc.wantValidates, tc.wantInSample, tc.wantExtrap)
			}
			if len(v.LeaveOneOut) != tc.wantLOO {
				t.Errorf("got %d leave-one-out checks, want %d", len(v.LeaveOneOut), tc.wantLOO)
			}
		})
	}
}

func TestMeanAbsErr(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cs    []Check
		want  float64
		wantN int
	}{
		{"none", nil, 0, 0},
		{"signs do not cancel", []Check{{ErrPct: 10}, {ErrPct: -30}}, 20, 2},
		{"noted checks are left out", []Check{{ErrPct: 10}, {ErrPct: 500, Note: "generator-bound"}}, 10, 1},
		{"non-finite errors are left out", []Check{{ErrPct: 4}, {ErrPct: math.Inf(1)}, {ErrPct: math.NaN()}}, 4, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, n := MeanAbsErr(tc.cs); !near(got, tc.want, 1e-12) || n != tc.wantN {
				t.Errorf("got %v over %d, want %v over %d", got, n, tc.want, tc.wantN)
			}
		})
	}
}

// TestValidation16CPU pins the figures docs/ceiling.md quotes ("Does the model
// extrapolate?"): if the model changes, rerun the command there and update the text.
func TestValidation16CPU(t *testing.T) {
	runs, _, err := LoadRuns("testdata/scale16")
	if err != nil {
		t.Fatal(err)
	}
	v := Validate(runs, 2)
	for _, tc := range []struct {
		name  string
		cs    []Check
		want  float64
		wantN int
	}{
		{"in-sample, all points", v.InSample, 10.4, 80},
		{"leave-one-out, all points", v.LeaveOneOut, 19.0, 80},
		{"extrapolated from N ≤ 2", v.Extrapolation, 41.6, 48},
		{"extrapolated, CPU-bound points", CPUBound(v.Extrapolation), 40.2, 29},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, n := MeanAbsErr(tc.cs); math.Abs(got-tc.want) > 0.05 || n != tc.wantN {
				t.Errorf("got %.2f%% over %d points, want %.1f%% over %d (docs/ceiling.md quotes it)", got, n, tc.want, tc.wantN)
			}
		})
	}
}

func TestWriteReportChecks(t *testing.T) {
	csvRuns, _, err := LoadRuns("testdata/scale16")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		runs   []Run
		want   []string
		unwant []string
	}{
		{"two points per series", cat(exactRuns("a", ModeCluster, 50, 0.1, 1, 2), exactRuns("b", ModeCluster, 50, 0.3, 1, 2)),
			[]string{"**These points cannot validate the model.**", "No run has N > 2", "leave-one-out alpha 0.300 (median of 1 other cluster series)",
				"Leave-one-out mean absolute error: 16.8% over 4 points", "12 cores is beyond the largest N measured (2)"},
			nil},
		{"the 16-vCPU CSVs", csvRuns,
			[]string{"| cluster-2026-11-30-16cpu:health | 561090 | cpu (link n/a) | 561090 | n/a: bytes unknown | - | unknown |",
				"| cluster-2026-11-30-16cpu:post | cluster | 0.083 | 0.088 | -8% (189.8k / 207.3k) | -6% (300.1k / 318.9k) | +9% (372.2k / 341.3k) | 7.8% | 4.8% | 8.4% |",
				"| cluster-2026-11-30-16cpu:mix | cluster | 0.044 | 0.182 | +29% (73.7k / 56.9k) * |",
				"Mean absolute extrapolation error: 41.6% over 48 points; CPU-bound points only: 40.2% over 29.",
				"By N: n=4 29.1% (16), n=8 46.7% (16), n=12 49.0% (16).",
				"| cluster-2026-11-30-16cpu:feed | unknown (bytes not measured) |"},
			[]string{"cannot validate", "12 cores is beyond"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteReport(&b, tc.runs, nil, ReportConfig{}); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("report lacks %q:\n%s", w, b.String())
				}
			}
			for _, w := range tc.unwant {
				if strings.Contains(b.String(), w) {
					t.Errorf("report has %q, want none", w)
				}
			}
		})
	}
}

func TestValidationSummary(t *testing.T) {
	csvRuns, _, err := LoadRuns("testdata/scale16")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		runs []Run
		want []string
	}{
		{"two points", exactRuns("a", ModeCluster, 50, 0.1, 1, 2), []string{
			"model_check in_sample_mae=0.0% in_sample_points=2 loo_mae=",
			"validates=false",
			"cannot validate the model",
			"model_extrapolation fit_max_n=2 points=0 (no run has N > 2: not testable here)"}},
		{"the 16-vCPU CSVs", csvRuns, []string{
			"model_check in_sample_mae=10.4% in_sample_points=80 loo_mae=19.0% loo_points=80 max_points_per_series=5 validates=true",
			"model_extrapolation fit_max_n=2 points=48 mae=41.6% cpu_bound_points=29 cpu_bound_mae=40.2%",
			"model_extrapolation workload=cluster-2026-11-30-16cpu:post mode=cluster n4=-8.4% n8=-5.9% n12=+9.0% mae=7.8%",
			"model_extrapolation workload=cluster-2026-11-30-16cpu:health mode=cluster n4=-34.4% n8=-40.9% n12=+12.2%* mae=29.2%"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(ValidationSummary(Validate(tc.runs, 2)), "\n")
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("got\n%s\nwant a line containing %q", got, w)
				}
			}
		})
	}
	if lines := ModelSummary(Fit(csvRuns), []float64{1e9}, 64); len(lines) != 4 || !strings.Contains(lines[0], " 1 GbE=unknown") {
		t.Errorf("got %q, want 4 cluster lines saying 1 GbE=unknown", lines)
	}
}
