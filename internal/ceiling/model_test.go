package ceiling

import (
	"bytes"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Max(1, math.Abs(b)) }

func TestModelPredict(t *testing.T) {
	// 100 µs per request at one core, 5 % lost per added core, 32 KiB responses.
	m := Model{Workload: "heavy", Mode: ModeCluster, N1: 1, CPUUsPerReq: 100, E1: 1, Alpha: 0.05,
		BytesPerReq: 32768, LoBytesPerReq: 33000, GenUsPerReq: 20}
	for _, tc := range []struct {
		name      string
		n         int
		link      Link
		wantRPS   float64
		wantLimit string
	}{
		{"one core, no link", 1, Link{}, 10000, VerdictCPU},
		{"12 cores, no link", 12, Link{}, 12 * 10000 / 1.55, VerdictCPU},
		{"12 cores behind 10 GbE", 12, Link{BitsPerS: 10e9}, 1.25e9 / (32768 * WireFactor), VerdictNIC},
		{"4 cores behind 10 GbE: cpu", 4, Link{BitsPerS: 10e9}, 40000 / 1.15, VerdictCPU},
		{"1 core behind 1 GbE", 1, Link{BitsPerS: 1e9}, 1.25e8 / (32768 * WireFactor), VerdictNIC},
		{"shaped loopback counts both directions", 1, Link{BitsPerS: 100e6, Loopback: true}, 12.5e6 / 33000, VerdictNIC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := m.Predict(tc.n, tc.link)
			if !near(p.RPS, tc.wantRPS, 1e-9) || p.Limit != tc.wantLimit {
				t.Errorf("got %.2f req/s (%s), want %.2f (%s)", p.RPS, p.Limit, tc.wantRPS, tc.wantLimit)
			}
			if !near(p.GenCores, p.RPS*20/1e6, 1e-9) || !near(p.BytesPerS, p.RPS*32768, 1e-9) {
				t.Errorf("got generator %.3f cores, %.0f B/s; want %.3f and %.0f", p.GenCores, p.BytesPerS, p.RPS*20/1e6, p.RPS*32768)
			}
		})
	}
	for _, tc := range []struct {
		name string
		bits float64
		want int
	}{
		{"1 GbE from the first core", 1e9, 1},
		{"10 GbE at 5 cores", 10e9, 5}, // 4 cores: 34,783 < 35,914; 5 cores: 41,667
		{"100 GbE never (cpu tends to 200k)", 100e9, 0},
	} {
		t.Run("crossover/"+tc.name, func(t *testing.T) {
			if got := m.Crossover(Link{BitsPerS: tc.bits}, 64); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
	if got := (Model{}).Predict(4, Link{BitsPerS: 1e9}); !math.IsInf(got.RPS, 1) {
		t.Errorf("empty model: got %v, want +Inf (no limit known)", got.RPS)
	}
}

// synthetic runs a known model would produce: 50 µs at one core, alpha 0.1.
func syntheticRuns() []Run {
	var runs []Run
	for _, n := range []int{1, 2, 4, 8} {
		rps := float64(n) * 20000 / (1 + 0.1*float64(n-1))
		runs = append(runs, Run{Workload: "hello", Mode: ModeCluster, Purpose: PurposeSweep, N: n, Requests: int64(rps * 3),
			RPS: rps, ServerCPUUsPerReq: 50 * (1 + 0.1*float64(n-1)), BytesPerReq: 200, GenUsPerReq: 10, Verdict: VerdictCPU})
	}
	// The generator limited N=12: left out of the fit.
	runs = append(runs, Run{Workload: "hello", Mode: ModeCluster, Purpose: PurposeSweep, N: 12, Requests: 30000, RPS: 10000,
		ServerCPUUsPerReq: 60, BytesPerReq: 200, GenUsPerReq: 10, Verdict: VerdictGenerator})
	// A shaped run: gives loopback bytes per request, not a fit point.
	runs = append(runs, Run{Workload: "hello", Mode: ModeCluster, Purpose: PurposeNIC, N: 1, Requests: 3000, RPS: 1000,
		LinkBitsPerS: 100e6, LoBytesPerS: 3000000, ServerCPUUsPerReq: 50, BytesPerReq: 200, Verdict: VerdictNIC})
	runs = append(runs, Run{Workload: "hello", Mode: ModeSingle, Purpose: PurposeSweep, N: 1, Requests: 30000, RPS: 10000,
		ServerCPUUsPerReq: 100, BytesPerReq: 200, Verdict: VerdictCPU})
	runs = append(runs, Run{Workload: "static", Mode: ModeCluster, Purpose: PurposeSweep, N: 1, Skipped: "probe: 404"})
	return runs
}

func TestFit(t *testing.T) {
	models := Fit(syntheticRuns())
	if len(models) != 2 {
		t.Fatalf("got %d models (%v), want hello/cluster and hello/single", len(models), models)
	}
	m := models[0]
	if m.Workload != "hello" || m.Mode != ModeCluster {
		t.Fatalf("got %s/%s first, want hello/cluster", m.Workload, m.Mode)
	}
	if m.N1 != 1 || !near(m.CPUUsPerReq, 50, 1e-9) || !near(m.E1, 1, 1e-9) || !near(m.Alpha, 0.1, 1e-9) {
		t.Errorf("got %v, want n1 1, 50 µs, e1 1, alpha 0.1", m)
	}
	if !reflect.DeepEqual(m.Points, []int{1, 2, 4, 8}) {
		t.Errorf("got points %v, want 1 2 4 8 (the generator-bound N=12 left out)", m.Points)
	}
	if !near(m.BytesPerReq, 200, 1e-9) || !near(m.LoBytesPerReq, 3000, 1e-9) || !near(m.GenUsPerReq, 10, 1e-9) {
		t.Errorf("got %.1f B/req, %.1f lo B/req, %.1f gen µs; want 200, 3000, 10", m.BytesPerReq, m.LoBytesPerReq, m.GenUsPerReq)
	}
	if s := models[1]; s.Mode != ModeSingle || s.Alpha != 0 || !reflect.DeepEqual(s.Points, []int{1}) {
		t.Errorf("got single %v, want one point and alpha 0", s)
	}

	checks := CheckModels(models, syntheticRuns())
	if len(checks) != 7 {
		t.Fatalf("got %d checks, want 7 (every measured run but the skipped one)", len(checks))
	}
	for _, c := range checks {
		switch {
		case c.Run.Verdict == VerdictGenerator:
			if c.Note == "" || c.ErrPct < 100 {
				t.Errorf("generator-bound N=12: got error %.1f%% note %q, want a large error and a note", c.ErrPct, c.Note)
			}
		case c.Run.Purpose == PurposeNIC:
			// 100 Mbit/s over 3,000 B per request: 4,167 req/s predicted; measured 1,000.
			if c.Predicted.Limit != VerdictNIC || !near(c.Predicted.RPS, 12.5e6/3000, 1e-9) {
				t.Errorf("shaped run: got %+v, want the link limit 4,167", c.Predicted)
			}
		default:
			if math.Abs(c.ErrPct) > 1e-6 {
				t.Errorf("%s n=%d: got error %.4f%%, want 0 (the model made these points)", c.Run.Mode, c.Run.N, c.ErrPct)
			}
		}
	}
}

func TestFitClampsSuperlinear(t *testing.T) {
	runs := []Run{
		{Workload: "w", Mode: ModeCluster, Purpose: PurposeSweep, N: 1, Requests: 1, RPS: 10000, ServerCPUUsPerReq: 100},
		{Workload: "w", Mode: ModeCluster, Purpose: PurposeSweep, N: 2, Requests: 1, RPS: 25000, ServerCPUUsPerReq: 80},
	}
	if m := Fit(runs)[0]; m.Alpha != 0 {
		t.Errorf("superlinear points: got alpha %v, want 0 (never extrapolate a gain)", m.Alpha)
	}
}

// The terms a reader must see beside a prediction: named on the series' row, in the
// prediction table and above the predicted req/s it feeds.
func TestFitNamesTerms(t *testing.T) {
	run := func(n int, rps float64, verdict string) Run {
		return Run{Workload: "w", Mode: ModeCluster, Purpose: PurposeSweep, N: n, Requests: 1, RPS: rps,
			ServerCPUUsPerReq: 100, Verdict: verdict, BytesPerReq: 100}
	}
	for _, tc := range []struct {
		name string
		runs []Run
		want []string // substrings of the terms, in order; none: no terms
	}{
		{"linear and cpu-bound", []Run{run(1, 10000, VerdictCPU), run(2, 18000, VerdictCPU)}, nil},
		{"superlinear step clamps alpha", []Run{run(1, 10000, VerdictUnclear), run(2, 39000, VerdictCPU)},
			[]string{"alpha clamped to 0", "superlinear step N=1->2 (x3.9 req/s on x2.0 cores)", "fit on unclear point(s) N=1"}},
		{"unclear point", []Run{run(1, 10000, VerdictCPU), run(2, 15000, VerdictUnclear)}, []string{"fit on unclear point(s) N=2"}},
		{"generator-bound only", []Run{run(1, 10000, VerdictGenerator), run(2, 15000, VerdictGenerator)}, []string{"a lower bound"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Fit(tc.runs)[0]
			if len(m.Terms) != len(tc.want) {
				t.Fatalf("got terms %q, want %d like %q", m.Terms, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(m.Terms[i], w) {
					t.Errorf("term %d: got %q, want it to contain %q", i, m.Terms[i], w)
				}
			}
			var b bytes.Buffer
			if err := WriteReport(&b, tc.runs, nil, ReportConfig{}); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			if len(tc.want) == 0 {
				if strings.Contains(out, "Fit from:") {
					t.Errorf("report names terms for a clean fit:\n%s", out)
				}
				return
			}
			for _, want := range []string{
				"| [1 2] | " + m.TermsText() + " |", // the series' row
				" | " + m.TermsText() + " |\n",      // the prediction's row
				"Fit from: " + m.TermsText() + ".",  // above the predicted req/s
			} {
				if !strings.Contains(out, want) {
					t.Errorf("report lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

func TestPublished(t *testing.T) {
	if got := PublishedModel(0).CPULimit(12); !near(got, 96000, 1e-9) {
		t.Errorf("linear 12 cores: got %v, want 96,000", got)
	}
	if got := ImpliedAlpha(8000, 50000, 12); !near(got, (96000.0/50000-1)/11, 1e-12) {
		t.Errorf("implied alpha: got %v", got)
	}
	// With the implied alpha the model reproduces the published figure.
	if got := PublishedModel(ImpliedAlpha(8000, 50000, 12)).CPULimit(12); !near(got, 50000, 1e-9) {
		t.Errorf("published model: got %v, want 50,000", got)
	}
	// 10 GbE carries ~35,900 responses of 32 KiB: below the published 42,000-50,000.
	if got := PublishedModel(0).LinkLimit(Link{BitsPerS: 10e9}); got < 35800 || got > 36000 {
		t.Errorf("10 GbE limit: got %v, want ~35,900", got)
	}
}

func TestWriteReport(t *testing.T) {
	var b bytes.Buffer
	if err := WriteReport(&b, syntheticRuns(), []Machine{{CPUModel: "Test CPU", Cores: 16, Allowed: 16, Kernel: "6.1"}}, ReportConfig{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Measured on: Test CPU, 16 cores",
		"| hello | cluster | 50.0 | 1 | 1.00 | 0.100 | 200 | 3000 | 10.0 | [1 2 4 8] |",
		"## Prediction: 12 cores behind 10 GbE",
		"| hello |",
		"## The model against every measured run",
		"generator-bound: measured is a lower bound",
		"Implied loss per core",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	lines := ModelSummary(Fit(syntheticRuns()), []float64{1e9, 100e9}, 64)
	// 200 B × 1.062 per request: 1 GbE carries ~588,000/s; the CPU tends to 200,000.
	if want := []string{"workload=hello nic_ceiling_at_cores: 1 GbE=never 100 GbE=never"}; !reflect.DeepEqual(lines, want) {
		t.Errorf("got %q, want %q", lines, want)
	}
}

// TestFitLeavesOutDisturbedRuns: runs that measured something else than the server (the
// generator, failed connects, a busy host) are no points of the efficiency fit.
func TestFitLeavesOutDisturbedRuns(t *testing.T) {
	base := Run{Purpose: PurposeSweep, Requests: 1000, RPS: 100, Verdict: VerdictCPU}
	for _, tc := range []struct {
		verdict string
		want    bool
	}{{VerdictCPU, true}, {VerdictUnclear, true}, {VerdictGenerator, false}, {VerdictFD, false}, {VerdictHostBusy, false}} {
		r := base
		r.Verdict = tc.verdict
		if got := fitPoint(r); got != tc.want {
			t.Errorf("fitPoint(verdict %s) = %v, want %v", tc.verdict, got, tc.want)
		}
	}
}

// TestBusyHostKeepsItsLimits: on a host with other work running, a sweep run whose server
// cores were full (cpu) and a shaped run whose link was full (nic) keep their verdicts,
// judged from their measurements, and the model report uses them: the headline prediction
// from the cpu run, the nic run's row in the table of measured runs without the host-busy
// note. Before Judge asked cpu and nic first, both read host-busy and the report had no
// prediction and no NIC row to show.
func TestBusyHostKeepsItsLimits(t *testing.T) {
	sweep := Run{Workload: "heavy", Mode: ModeCluster, Purpose: PurposeSweep, N: 1, ServerCores: 1, HostCores: 2,
		Requests: 36000, RPS: 12000, ServerBusyCores: 0.97, ServerCPUUsPerReq: 80, BytesPerReq: 31564,
		GenBusyCores: 0.4, GenThreads: 1, Host: HostCPU{User: 80, System: 18, Idle: 2}} // 0.59 cores of other work
	nic := Run{Workload: "heavy", Mode: ModeCluster, Purpose: PurposeNIC, N: 1, ServerCores: 1, HostCores: 2,
		Requests: 1170, RPS: 390, ServerBusyCores: 0.03, ServerCPUUsPerReq: 77, BytesPerReq: 31564, LinkBitsPerS: 100e6,
		LoBytesPerS: 12.4e6, GenBusyCores: 0.05, GenThreads: 1, Host: HostCPU{User: 50, System: 9, Idle: 40, SoftIRQ: 1}}
	runs := []Run{sweep, nic}
	for i := range runs {
		e := EvidenceOf(runs[i], 0)
		if e.OtherCores < 0.5 {
			t.Fatalf("run %d: other work %.2f cores, want a busy host", i, e.OtherCores)
		}
		runs[i].Verdict, runs[i].Evidence = Judge(e, Thresholds{})
	}
	if runs[0].Verdict != VerdictCPU || runs[1].Verdict != VerdictNIC {
		t.Fatalf("verdicts %s (%s), %s (%s); want cpu, nic", runs[0].Verdict, runs[0].Evidence, runs[1].Verdict, runs[1].Evidence)
	}
	for _, r := range runs {
		if !strings.Contains(r.Evidence, "; other work ") {
			t.Errorf("%s evidence %q does not say what else ran", r.Verdict, r.Evidence)
		}
	}
	var b bytes.Buffer
	if err := WriteReport(&b, runs, nil, ReportConfig{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	m := Fit(runs)[0]
	if m.NoPrediction != "" {
		t.Fatalf("no prediction: %s", m.NoPrediction)
	}
	pred := m.Predict(12, Link{BitsPerS: 10e9})
	for _, want := range []string{fmt.Sprintf("| heavy | %.0f | %s |", pred.RPS, pred.Limit), "| heavy | cluster | nic | 1 | 100mbit | 390 |"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "host busy") {
		t.Errorf("report still calls a run host-busy:\n%s", out)
	}
}
