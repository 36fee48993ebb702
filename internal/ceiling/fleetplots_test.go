package ceiling

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/goldentest"
	"github.com/onehost/onehost/internal/progress"
)

// fleetRuns is a fleet of H = 1, 2 behind the three balancers, two workloads, two
// rounds each (the cells take the medians); figures shaped like this machine's.
func fleetRuns() []FleetRun {
	day := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	var runs []FleetRun
	i := 0
	for _, round := range []float64{1, 0.9} {
		for _, h := range []int{1, 2} {
			for _, b := range []string{BalancerHAProxy, BalancerNft, BalancerNone} {
				for _, w := range []struct {
					name          string
					rps, srv, lb  float64
					haproxyCapped bool
				}{{"hello", 35000, 11, 29, true}, {"feed", 7000, 55, 32, false}} {
					r := FleetRun{Workload: w.name, Balancer: b, Hosts: h, N: 1, Round: int(round*10) - 8,
						Started: day.Add(time.Duration(i) * 5 * time.Second), DurationS: 3,
						RPS: w.rps * float64(h) * round, ServerUsPerReq: w.srv, ServerCoreLimit: 0.4 * float64(h), Verdict: VerdictCPU}
					if b == BalancerHAProxy {
						r.BalancerUsPerReq, r.BalancerCores = w.lb*(1+0.1*float64(h-1)), 1
						if w.haproxyCapped {
							r.RPS, r.Verdict = 23000*round, VerdictBalancer
						}
					}
					runs = append(runs, r)
					i++
				}
			}
		}
	}
	return runs
}

// TestFleetChartsGolden: the fleet's two charts, drawn from fleetRuns (golden files;
// go test -args -update rewrites them).
func TestFleetChartsGolden(t *testing.T) {
	cells, limits := SummarizeFleet(fleetRuns())
	for _, tc := range []struct {
		name   string
		chart  Chart
		golden string
		wants  []string
	}{
		// feed: HAProxy's model reaches past the measured H, to where it is full.
		{"feed throughput with the model", FleetThroughputChart(cells, limits, "feed"), "fleet-throughput-feed.golden.svg",
			[]string{">HAProxy (L7)<", ">nftables (L4 DNAT)<", ">none (DNS round robin)<", ">HAProxy model (max 28.4k)<", ">HAProxy full<", ">5<"}},
		// hello: HAProxy full from H = 1, the whole range shaded.
		{"hello throughput, the balancer full", FleetThroughputChart(cells, limits, "hello"), "fleet-throughput-hello.golden.svg",
			[]string{">HAProxy full<", ">2<"}},
		{"cpu per request", FleetCPUChart(cells), "fleet-cpu.golden.svg",
			[]string{">hello: HAProxy<", ">hello: servers<", ">feed: HAProxy<", ">feed: servers<"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.chart.WriteSVG(&b); err != nil {
				t.Fatal(err)
			}
			wellFormed(t, b.Bytes())
			for _, w := range tc.wants {
				if !strings.Contains(b.String(), w) {
					t.Errorf("SVG lacks %q", w)
				}
			}
			goldentest.Check(t, tc.golden, b.Bytes())
		})
	}
}

// TestFleetThroughputChartModel: where the model's line ends and what is shaded.
func TestFleetThroughputChartModel(t *testing.T) {
	for _, tc := range []struct {
		name     string
		model    *FleetModel
		wantTop  float64 // the last x tick
		wantBand *Band
	}{
		{"full from 5: drawn to 6", &FleetModel{HostRPS: 7000, BalancerRPS: 30000, FullAtH: 5}, 6, &Band{From: 5, To: 6, Label: "HAProxy full"}},
		{"full from 1: the measured range", &FleetModel{HostRPS: 30000, BalancerRPS: 20000, FullAtH: 1}, 2, &Band{From: 1, To: 2, Label: "HAProxy full"}},
		{"full far out: cut at 16, no band", &FleetModel{HostRPS: 1000, BalancerRPS: 100000, FullAtH: 101}, 16, nil},
		{"no model: the measured range", nil, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cells := []FleetCell{
				{Workload: "w", Balancer: BalancerHAProxy, Hosts: 1, Median: FleetRun{RPS: 1000}},
				{Workload: "w", Balancer: BalancerHAProxy, Hosts: 2, Median: FleetRun{RPS: 2000}},
			}
			limits := []FleetLimit{{Workload: "w", Balancer: BalancerHAProxy, MaxH: 2, Model: tc.model}}
			c := FleetThroughputChart(cells, limits, "w")
			if top := c.XTicks[len(c.XTicks)-1]; top != tc.wantTop {
				t.Errorf("x ticks %v, want 1 to %v", c.XTicks, tc.wantTop)
			}
			switch {
			case tc.wantBand == nil && len(c.Bands) != 0:
				t.Errorf("bands %v, want none", c.Bands)
			case tc.wantBand != nil && (len(c.Bands) != 1 || c.Bands[0] != *tc.wantBand):
				t.Errorf("bands %v, want %v", c.Bands, *tc.wantBand)
			}
			if tc.model != nil {
				line := c.Series[len(c.Series)-1]
				if !line.Dashed || line.Points[len(line.Points)-1].X != tc.wantTop {
					t.Errorf("model series %+v, want dashed, to H=%v", line, tc.wantTop)
				}
			}
		})
	}
}

// TestWriteFleetPlots: the files a fleet's results directory gets, each with its source.
func TestWriteFleetPlots(t *testing.T) {
	runs := fleetRuns()
	cells, limits := SummarizeFleet(runs)
	source := FleetProvenance(runs, Machine{Hostname: "vm", Cores: 2, CPUModel: "EPYC", Kernel: "6.18"})
	if want := "vm, 2 cores (EPYC), kernel 6.18 · 2026-12-05 · 24 runs of 3 s"; source != want {
		t.Errorf("source %q, want %q", source, want)
	}
	dir := filepath.Join(t.TempDir(), "fleet")
	names, err := WriteFleetPlots(dir, cells, limits, source)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"fleet-throughput-hello.svg", "fleet-throughput-feed.svg", "fleet-cpu-per-request.svg"}
	if !slices.Equal(names, want) {
		t.Errorf("plots %v, want %v", names, want)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		wellFormed(t, b)
		if !strings.Contains(string(b), ">"+source+"</text>") {
			t.Errorf("%s: no source line", n)
		}
	}
	// Without HAProxy there is no CPU chart: nftables' cost is not a process's.
	var nft []FleetRun
	for _, r := range runs {
		if r.Balancer == BalancerNft {
			nft = append(nft, r)
		}
	}
	cells, limits = SummarizeFleet(nft)
	if names, err := WriteFleetPlots(t.TempDir(), cells, limits, ""); err != nil || slices.Contains(names, "fleet-cpu-per-request.svg") {
		t.Errorf("nftables alone: plots %v (%v), want no CPU chart", names, err)
	}
}

// TestFleetProgressFile: progress.json as a fleet writes it, Kind fleet, its runs naming
// the balancer and H (golden: the supervisor's dashboard test reads it).
func TestFleetProgressFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), progress.FileName)
	clock := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	w := newProgressWriter(path, zap.NewNop(), func() time.Time { return clock })
	w.p.PID, w.p.Kind = 4242, progress.KindFleet
	done := FleetRun{Workload: "hello", Balancer: BalancerHAProxy, Hosts: 2, N: 1, Started: clock.Add(time.Second),
		DurationS: 3.002, RPS: 23714.2, ServerUsPerReq: 14.2, BalancerUsPerReq: 51.9, P99Ms: 4.13, Verdict: VerdictUnclear}
	next := FleetRun{Workload: "feed", Balancer: BalancerNft, Hosts: 2, N: 1, Started: clock.Add(5 * time.Second)}
	clock = clock.Add(4500 * time.Millisecond)
	w.finishFleet(done)
	w.beginFleet(next, 4*time.Second)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p progress.File
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("progress.json does not parse: %v\n%s", err, b)
	}
	if p.Kind != progress.KindFleet || p.RunsDone != 1 || p.Current == nil || p.Current.Hosts != 2 || p.Current.Balancer != BalancerNft ||
		p.Last == nil || p.Last.BalancerUsPerReq != 51.9 || p.Last.CPUUsPerReq != 14.2 {
		t.Errorf("progress %+v, want a fleet's: feed behind nftables on 2 hosts, hello's figures last", p)
	}
	goldentest.Check(t, "progress/fleet-running.json", b)
}
