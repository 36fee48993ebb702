package ceiling

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func TestMedianRuns(t *testing.T) {
	run := func(n int, rps float64, verdict string) Run {
		return Run{Workload: "heavy", Mode: ModeCluster, Purpose: PurposeSweep, N: n, RPS: rps, Requests: int64(rps), Verdict: verdict}
	}
	cpu := VerdictCPU
	for _, tc := range []struct {
		name   string
		runs   []Run
		want   []float64 // the medians' req/s, in order
		spread []string  // their Spread.Text ("" none)
	}{
		{"one run stands alone", []Run{run(1, 27134, cpu)}, []float64{27134}, []string{""}},
		{"three: the middle", []Run{run(1, 40426, cpu), run(1, 27134, cpu), run(1, 33000, cpu)}, []float64{33000},
			[]string{"runs=3 rps_range=27134-40426"}},
		{"two: the slower, a real run", []Run{run(1, 40426, cpu), run(1, 27134, cpu)}, []float64{27134}, []string{"runs=2 rps_range=27134-40426"}},
		{"four: the slower middle", []Run{run(1, 4, cpu), run(1, 1, cpu), run(1, 3, cpu), run(1, 2, cpu)}, []float64{2}, []string{"runs=4 rps_range=1-4"}},
		{"host-busy left out beside quiet runs", []Run{run(1, 9000, VerdictHostBusy), run(1, 27134, cpu), run(1, 40426, cpu), run(1, 30000, cpu)},
			[]float64{30000}, []string{"runs=3 rps_range=27134-40426 left_out=1"}},
		{"a generator-bound run left out beside a cpu one", []Run{run(12, 281469, cpu), run(12, 270975, VerdictGenerator)},
			[]float64{281469}, []string{"runs=1 rps_range=281469-281469 left_out=1"}},
		{"all host-busy: the median of them", []Run{run(1, 10, VerdictHostBusy), run(1, 30, VerdictHostBusy), run(1, 20, VerdictHostBusy)},
			[]float64{20}, []string{"runs=3 rps_range=10-30"}},
		{"skipped runs do not count", []Run{{Workload: "heavy", Mode: ModeCluster, Purpose: PurposeSweep, N: 1, Skipped: "x"}, run(1, 5, cpu)},
			[]float64{5}, []string{""}},
		{"cells apart, first-seen order", []Run{run(2, 20, cpu), run(1, 10, cpu), run(2, 22, cpu), run(1, 12, cpu),
			func() Run { r := run(1, 99, VerdictNIC); r.Purpose, r.LinkBitsPerS = PurposeNIC, 1e9; return r }(),
			func() Run { r := run(1, 77, cpu); r.Source = "scale.csv"; return r }()},
			[]float64{20, 10, 99, 77}, []string{"runs=2 rps_range=20-22", "runs=2 rps_range=10-12", "", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := MedianRuns(tc.runs)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d runs (%v), want %d", len(got), got, len(tc.want))
			}
			for i, r := range got {
				sp := ""
				if r.Spread != nil {
					sp = r.Spread.Text()
				}
				if r.RPS != tc.want[i] || sp != tc.spread[i] {
					t.Errorf("run %d: got %.0f req/s, spread %q; want %.0f, %q", i, r.RPS, sp, tc.want[i], tc.spread[i])
				}
			}
			// Idempotent: the report, the plots and the model command each apply it.
			if again := MedianRuns(got); fmt.Sprint(again) != fmt.Sprint(got) {
				t.Errorf("medians of medians differ: %v, %v", again, got)
			}
		})
	}
	if l := MedianRuns([]Run{run(1, 40426, cpu), run(1, 27134, cpu), run(1, 33000, cpu)})[0].Line(); !strings.Contains(l, "rps=33000 runs=3 rps_range=27134-40426 ") {
		t.Errorf("line %q lacks the spread beside req/s", l)
	}
}

// TestSweepPlanInterleaves: with Repeat, round 1 runs every (N, mode), then round 2 all of
// them again: a cell's repeats are a round apart, not back to back.
func TestSweepPlanInterleaves(t *testing.T) {
	s, err := NewSweeper(SweepConfig{SeedDB: "x", WorkDir: t.TempDir(), NoPin: true, Ns: []int{1, 2},
		Modes: []string{ModeCluster, ModeSingle}, Repeat: 2, Workloads: []Workload{{Name: "hello", Path: "/api/hello"}}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range s.plan() {
		got = append(got, fmt.Sprintf("r%d n%d %s", c.round, c.n, c.mode))
	}
	want := "[r1 n1 cluster r1 n1 single r1 n2 cluster r1 n2 single r2 n1 cluster r2 n1 single r2 n2 cluster r2 n2 single]"
	if fmt.Sprint(got) != want {
		t.Errorf("plan %v, want %s", got, want)
	}
	if s.roundOf(2) != 2 {
		t.Errorf("roundOf(2) = %d with Repeat 2", s.roundOf(2))
	}
	s.cfg.Repeat = 0
	if n := len(s.plan()); n != 4 || s.roundOf(1) != 0 {
		t.Errorf("Repeat 0: %d cells, round %d; want 4 and 0 (one round, not recorded)", n, s.roundOf(1))
	}
}

// TestPlannedLeavesOutMissingPeers: the runs the sweep will make, which `ceiling sweep`
// announces again when they differ from what the flags asked: a peer that is skipped
// here and a coding its node lacks are not counted.
func TestPlannedLeavesOutMissingPeers(t *testing.T) {
	wls := []Workload{{Name: "heavy"}, {Name: "heavy+gzip"}, {Name: "heavy+zstd"}}
	for _, tc := range []struct {
		name         string
		skip         map[string]string
		lacks        map[string][]string
		starts, runs int
	}{
		// cluster: all three workloads; pm2: heavy; pm2-compress: the two coded ones.
		{"every peer here", nil, nil, 6, 12},
		{"node without zstd", nil, map[string][]string{ModePM2Compress: {"zstd"}}, 6, 10},
		{"no pm2", map[string]string{ModePM2: "pm2 not found", ModePM2Compress: "pm2 not found"}, nil, 2, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSweeper(SweepConfig{SeedDB: "x", WorkDir: t.TempDir(), NoPin: true, Ns: []int{1, 2},
				Modes: []string{ModeCluster, ModePM2, ModePM2Compress}, Workloads: wls})
			if err != nil {
				t.Fatal(err)
			}
			s.peers.skip, s.peers.lacks = tc.skip, tc.lacks
			if starts, runs := s.Planned(); starts != tc.starts || runs != tc.runs {
				t.Errorf("Planned() = %d starts, %d runs; want %d, %d", starts, runs, tc.starts, tc.runs)
			}
		})
	}
}

// TestNoPrediction: a series none of whose runs the server's own limit decided gives no
// headline number, only the reason and the command to measure again. The figures are a
// quick sweep on a busy 2-core host whose report once headlined "14,441 req/s, limit cpu".
func TestNoPrediction(t *testing.T) {
	run := func(n int, rps float64, verdict string) Run {
		return Run{Workload: "heavy", Mode: ModeCluster, Purpose: PurposeSweep, N: n, Requests: int64(3 * rps), RPS: rps,
			ServerCPUUsPerReq: 60, BytesPerReq: 31564, Verdict: verdict}
	}
	for _, tc := range []struct {
		name   string
		runs   []Run
		reason string // "" a prediction
	}{
		{"both runs host-busy", []Run{run(1, 7200, VerdictHostBusy), run(2, 11800, VerdictHostBusy)}, "no run was limited by the server's own CPU (host-busy x2)"},
		{"generator and unclear", []Run{run(1, 7200, VerdictGenerator), run(2, 11800, VerdictUnclear)}, "no run was limited by the server's own CPU (generator x1, unclear x1)"},
		{"one cpu run carries it", []Run{run(1, 7200, VerdictCPU), run(2, 11800, VerdictHostBusy)}, ""},
		{"sqlite is the server's own limit", []Run{run(1, 7200, VerdictSQLite)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Fit(tc.runs)[0]
			if m.NoPrediction != tc.reason {
				t.Fatalf("NoPrediction %q, want %q", m.NoPrediction, tc.reason)
			}
			var b bytes.Buffer
			if err := WriteReport(&b, tc.runs, nil, ReportConfig{}); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			pred := m.Predict(12, Link{BitsPerS: 10e9})
			headline := fmt.Sprintf("| heavy | %.0f | %s |", pred.RPS, pred.Limit)
			summary := ModelSummary([]Model{m}, []float64{10e9}, 64)[0]
			if tc.reason == "" {
				if !strings.Contains(out, headline) || strings.Contains(out, "no prediction") {
					t.Errorf("report lacks the prediction %q:\n%s", headline, out)
				}
				return
			}
			for _, want := range []string{
				"| heavy | no prediction | " + tc.reason + ": " + RemeasureHint + " |",
				"No prediction: " + tc.reason + "; " + RemeasureHint + ".",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("report lacks %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, headline) || strings.Contains(out, "Our heavy route on 12 cores") {
				t.Errorf("report still headlines a number:\n%s", out)
			}
			if !strings.Contains(summary, "no_prediction=") || strings.Contains(summary, "nic_ceiling_at_cores") {
				t.Errorf("summary %q: want no_prediction, no crossover", summary)
			}
		})
	}
}
