package ceiling

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The plots draw the sweep's own runs only (Source ""): runs read from other sources
// (bench/scale.sh CSVs) share workload names but not code or host.

// workloadsOf lists the workloads of the sweep's runs in first-seen order.
func workloadsOf(runs []Run) []string {
	var out []string
	seen := make(map[string]bool)
	for _, r := range runs {
		if r.Source == "" && !seen[r.Workload] {
			seen[r.Workload] = true
			out = append(out, r.Workload)
		}
	}
	return out
}

// sweepPoints are one workload and mode's unshaped sweep runs as (n, f(run)), by n.
func sweepPoints(runs []Run, workload, mode string, f func(Run) float64) []Point {
	var pts []Point
	for _, r := range runs {
		if r.Source == "" && r.Workload == workload && r.Mode == mode && r.Purpose == PurposeSweep && r.LinkBitsPerS == 0 &&
			r.Skipped == "" && r.RPS > 0 {
			pts = append(pts, Point{float64(r.N), f(r)})
		}
	}
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].X < pts[j].X })
	return pts
}

func modelFor(models []Model, workload, mode string) (Model, bool) {
	for _, m := range models {
		if m.Source == "" && m.Workload == workload && m.Mode == mode {
			return m, true
		}
	}
	return Model{}, false
}

// ThroughputChart is requests per second against workers for one workload: the cluster,
// one GOMAXPROCS=N process, the peer measured beside them (PM2 for heavy, nginx for
// static), and the cluster model's line.
func ThroughputChart(runs []Run, models []Model, workload string) Chart {
	c := Chart{Title: "Throughput: " + workload, XLabel: "workers (cluster, peer) or GOMAXPROCS (single process)", YLabel: "requests/s"}
	var xt []float64
	for _, mode := range []string{ModeCluster, ModeSingle, ModePM2, ModeNginx, ModePM2Compress, ModeNginxGzip} {
		pts := sweepPoints(runs, workload, mode, func(r Run) float64 { return r.RPS })
		if len(pts) == 0 {
			continue
		}
		name := "cluster (prefork)"
		switch mode {
		case ModeSingle:
			name = "one process"
		case ModePM2, ModeNginx, ModePM2Compress, ModeNginxGzip:
			name = peerName(mode, workload) + " (peer)"
		}
		c.Series = append(c.Series, Series{Name: name, Points: pts})
		for _, p := range pts {
			xt = appendUnique(xt, p.X)
		}
	}
	if m, ok := modelFor(models, workload, ModeCluster); ok && len(xt) > 0 {
		sort.Float64s(xt)
		var pts []Point
		for n := xt[0]; n <= xt[len(xt)-1]; n++ {
			pts = append(pts, Point{n, m.CPULimit(n)})
		}
		c.Series = append(c.Series, Series{Name: "model (cluster)", Points: pts, Dashed: true})
	}
	sort.Float64s(xt)
	c.XTicks = xt
	return c
}

// CPUChart is server CPU per request against workers, one line per workload (cluster).
func CPUChart(runs []Run) Chart {
	c := Chart{Title: "Server CPU per request (cluster)", XLabel: "workers", YLabel: "CPU µs per request (user + system)"}
	var xt []float64
	for _, w := range workloadsOf(runs) {
		pts := sweepPoints(runs, w, ModeCluster, func(r Run) float64 { return r.ServerCPUUsPerReq })
		if len(pts) == 0 {
			continue
		}
		c.Series = append(c.Series, Series{Name: w, Points: pts})
		for _, p := range pts {
			xt = appendUnique(xt, p.X)
		}
	}
	sort.Float64s(xt)
	c.XTicks = xt
	return c
}

// LinkChart is throughput against the shaped link's rate for one workload, with the
// model's line for the same worker count on a shaped loopback.
func LinkChart(runs []Run, models []Model, workload string) Chart {
	c := Chart{Title: "Throughput vs link rate: " + workload, XLabel: "link rate (shaped loopback)", YLabel: "requests/s", LogX: true}
	var pts []Point
	n, mode := 0, ModeCluster
	for _, r := range runs {
		if r.Source == "" && r.Workload == workload && r.Purpose == PurposeNIC && r.LinkBitsPerS > 0 && r.Skipped == "" {
			pts = append(pts, Point{r.LinkBitsPerS, r.RPS})
			n, mode = r.N, r.Mode
		}
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].X < pts[j].X })
	if len(pts) == 0 {
		return c
	}
	c.Series = append(c.Series, Series{Name: fmt.Sprintf("measured, %d worker(s)", n), Points: pts})
	if m, ok := modelFor(models, workload, mode); ok {
		lo, hi := math.Log10(pts[0].X)-0.5, math.Log10(pts[len(pts)-1].X)+0.5
		var line []Point
		var band *Band // where the model says the link, not the CPU, is the limit
		for e := lo; e <= hi+1e-9; e += 0.05 {
			r := math.Pow(10, e)
			p := m.Predict(n, Link{BitsPerS: r, Loopback: true})
			line = append(line, Point{r, p.RPS})
			if p.Limit == VerdictNIC {
				if band == nil {
					band = &Band{From: r, Label: "link-bound"}
				}
				band.To = r
			}
		}
		c.Series = append(c.Series, Series{Name: "model", Points: line, Dashed: true})
		if band != nil {
			c.Bands = append(c.Bands, *band)
		}
	}
	return c
}

func appendUnique(xs []float64, x float64) []float64 {
	for _, v := range xs {
		if v == x {
			return xs
		}
	}
	return append(xs, x)
}

// Provenance says where runs come from, for a chart: the machine (host, cores, CPU,
// kernel; "N machines" when they differ), the first run's date and the runs' median
// length (a quick sweep's runs are short).
func Provenance(runs []Run, machines []Machine) string {
	var parts []string
	switch {
	case len(machines) == 1:
		m := machines[0]
		host := m.Hostname
		if host == "" {
			host = "host"
		}
		parts = append(parts, fmt.Sprintf("%s, %d cores (%s), kernel %s", host, m.Cores, m.CPUModel, m.Kernel))
	case len(machines) > 1:
		parts = append(parts, fmt.Sprintf("%d machines", len(machines)))
	}
	var first time.Time
	var lengths []float64
	for _, r := range runs {
		if r.Source != "" || r.Skipped != "" {
			continue
		}
		if first.IsZero() || (!r.Started.IsZero() && r.Started.Before(first)) {
			first = r.Started
		}
		lengths = append(lengths, r.DurationS)
	}
	if !first.IsZero() {
		parts = append(parts, first.UTC().Format("2006-01-02"))
	}
	if len(lengths) > 0 {
		sort.Float64s(lengths)
		parts = append(parts, fmt.Sprintf("%d runs of %.0f s", len(lengths), lengths[len(lengths)/2]))
	}
	return strings.Join(parts, " · ")
}

// WritePlots writes every chart the runs support into dir and returns the file names;
// source (Provenance) is written on each.
func WritePlots(dir string, runs []Run, models []Model, source string) ([]string, error) {
	runs = MedianRuns(runs)
	pd, err := newPlotDir(dir, source)
	if err != nil {
		return nil, err
	}
	for _, w := range workloadsOf(runs) {
		if err := pd.write("throughput-"+w+".svg", ThroughputChart(runs, models, w)); err != nil {
			return pd.written, err
		}
		if err := pd.write("link-"+w+".svg", LinkChart(runs, models, w)); err != nil {
			return pd.written, err
		}
	}
	err = pd.write("cpu-per-request.svg", CPUChart(runs))
	return pd.written, err
}

// plotDir is a directory charts are written into, source on each, and the names of those
// written (a chart without series is not).
type plotDir struct {
	dir, source string
	written     []string
}

func newPlotDir(dir, source string) (*plotDir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create plot directory: %w", err)
	}
	return &plotDir{dir: dir, source: source}, nil
}

func (p *plotDir) write(name string, c Chart) error {
	ok, err := writeChart(p.dir, name, c, p.source)
	if ok {
		p.written = append(p.written, name)
	}
	return err
}

// writeChart writes c, with source on it, to dir/name; a chart without series is not
// written (false).
func writeChart(dir, name string, c Chart, source string) (bool, error) {
	if len(c.Series) == 0 {
		return false, nil
	}
	c.Source = source
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return false, fmt.Errorf("create plot: %w", err)
	}
	if err := c.WriteSVG(f); err != nil {
		f.Close()
		return false, fmt.Errorf("write plot %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return false, fmt.Errorf("write plot %s: %w", name, err)
	}
	return true, nil
}
