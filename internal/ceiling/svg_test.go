package ceiling

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/goldentest"
)

func smallChart() Chart {
	return Chart{
		Title: "Throughput: heavy <PATCH>", XLabel: "workers", YLabel: "requests/s",
		Width: 480, Height: 300, XTicks: []float64{1, 2, 4},
		Series: []Series{
			{Name: "cluster", Points: []Point{{1, 9000}, {2, 17500}, {4, 33000}}},
			{Name: "one process", Points: []Point{{1, 8800}, {2, 15000}, {4, 26000}}},
			{Name: "model", Points: []Point{{1, 9000}, {2, 17300}, {3, 25000}, {4, 32200}}, Dashed: true},
		},
	}
}

func TestChartGolden(t *testing.T) {
	var b bytes.Buffer
	if err := smallChart().WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	goldentest.Check(t, "chart.golden.svg", b.Bytes())
	wellFormed(t, b.Bytes())
}

// wellFormed fails unless b parses as XML.
func wellFormed(t *testing.T, b []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
	}
}

func TestChartEdgeCases(t *testing.T) {
	for _, tc := range []struct {
		name  string
		c     Chart
		wants []string
	}{
		{"log axis labels link rates", Chart{LogX: true, Series: []Series{{Name: "m", Points: []Point{{1e8, 300}, {1e9, 3000}, {1e10, 9000}}}}},
			[]string{">100mbit<", ">1gbit<", ">10gbit<"}},
		{"few log ticks keep 2 and 5", Chart{LogX: true, Series: []Series{{Name: "m", Points: []Point{{1e9, 1}, {1e10, 2}}}}},
			[]string{">2gbit<", ">5gbit<"}},
		{"no series", Chart{Title: "empty"}, []string{">empty<"}},
		{"infinities and zeros skipped", Chart{LogX: true, Series: []Series{{Name: "x", Points: []Point{{0, 1}, {1e9, math.Inf(1)}, {1e9, 5}}}}},
			[]string{"<circle"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.c.WriteSVG(&b); err != nil {
				t.Fatal(err)
			}
			wellFormed(t, b.Bytes())
			for _, w := range tc.wants {
				if !strings.Contains(b.String(), w) {
					t.Errorf("SVG lacks %q", w)
				}
			}
			if strings.Contains(b.String(), "NaN") || strings.Contains(b.String(), "Inf") {
				t.Errorf("SVG has NaN or Inf:\n%s", b.String())
			}
		})
	}
}

func TestWritePlots(t *testing.T) {
	dir := t.TempDir()
	runs := syntheticRuns()
	const source = "box, 16 cores (EPYC), kernel 6.18 · 2026-12-02 · 10 runs of 5 s"
	names, err := WritePlots(dir, runs, Fit(runs), source)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	want := []string{"cpu-per-request.svg", "link-hello.svg", "throughput-hello.svg"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("got %v, want %v (static was skipped: no plot)", names, want)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		wellFormed(t, b)
		if !strings.Contains(string(b), ">box, 16 cores (EPYC), kernel 6.18 · 2026-12-02 · 10 runs of 5 s</text>") {
			t.Errorf("%s: no source line", n)
		}
	}
	// The link chart shades where the model says the link is the limit.
	if b, _ := os.ReadFile(filepath.Join(dir, "link-hello.svg")); !strings.Contains(string(b), ">link-bound</text>") {
		t.Errorf("link-hello.svg: no link-bound band")
	}
}

// TestProvenance: a chart names the machine, the date and how long its runs were.
func TestProvenance(t *testing.T) {
	day := time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC)
	runs := []Run{{Started: day.Add(time.Hour), DurationS: 5}, {Started: day, DurationS: 6}, {Started: day, DurationS: 5},
		{Source: "scale.csv", DurationS: 60}, {Skipped: "no", DurationS: 0}}
	m := Machine{Hostname: "box", Cores: 2, CPUModel: "Xeon", Kernel: "6.18"}
	for _, tc := range []struct {
		name     string
		machines []Machine
		want     string
	}{
		{"one machine", []Machine{m}, "box, 2 cores (Xeon), kernel 6.18 · 2026-12-02 · 3 runs of 5 s"},
		{"two machines", []Machine{m, m}, "2 machines · 2026-12-02 · 3 runs of 5 s"},
		{"none known", nil, "2026-12-02 · 3 runs of 5 s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Provenance(runs, tc.machines); got != tc.want {
				t.Errorf("Provenance = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNiceStep(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{{0.7, 1}, {1.5, 2}, {3, 5}, {7, 10}, {12000, 20000}, {0, 1}} {
		if got := niceStep(tc.in); got != tc.want {
			t.Errorf("niceStep(%v): got %v, want %v", tc.in, got, tc.want)
		}
	}
}
