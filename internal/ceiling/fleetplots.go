// The fleet's plots (`ceiling fleet`), drawn with svg.go as the sweep's are: req/s
// against the hosts H behind each balancer with HAProxy's model out to where it predicts
// the balancer full, and HAProxy's CPU per request beside the servers'. They draw each
// cell's median run (SummarizeFleet), as the report's table does.

package ceiling

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// fleetModelMaxH bounds how far the model's line reaches past the measured H: a model
// that predicts the balancer full only at H = 200 would squash the measured points into
// the left edge.
const fleetModelMaxH = 16

// fleetBalancerNames are the balancers as a chart's legend names them.
var fleetBalancerNames = map[string]string{
	BalancerHAProxy: "HAProxy (L7)",
	BalancerNft:     "nftables (L4 DNAT)",
	BalancerNone:    "none (DNS round robin)",
}

func fleetBalancerName(b string) string {
	if n, ok := fleetBalancerNames[b]; ok {
		return n
	}
	return b
}

func fleetShortName(b string) string {
	if b == BalancerHAProxy {
		return "HAProxy"
	}
	return b
}

// roundSig rounds v to n significant digits (a legend's 28.4k, not 28.409k).
func roundSig(v float64, n int) float64 {
	if v == 0 || !finite(v) {
		return v
	}
	p := math.Pow(10, float64(n)-math.Ceil(math.Log10(math.Abs(v))))
	return math.Round(v*p) / p
}

// fleetWorkloads lists the cells' workloads in first-seen order.
func fleetWorkloads(cells []FleetCell) []string {
	var out []string
	for _, c := range cells {
		if !slices.Contains(out, c.Workload) {
			out = append(out, c.Workload)
		}
	}
	return out
}

// fleetPoints are one workload and balancer's cells as (H, f(median run)), by H.
func fleetPoints(cells []FleetCell, workload, balancer string, f func(FleetRun) float64) []Point {
	var pts []Point
	for _, c := range cells {
		if c.Workload == workload && c.Balancer == balancer && c.Median.RPS > 0 {
			pts = append(pts, Point{float64(c.Hosts), f(c.Median)})
		}
	}
	slices.SortStableFunc(pts, func(a, b Point) int { return cmp.Compare(a.X, b.X) })
	return pts
}

// hTicks are the integers 1 … hi, as x ticks: H is a count of hosts.
func hTicks(hi int) []float64 {
	var t []float64
	for h := 1; h <= hi; h++ {
		t = append(t, float64(h))
	}
	return t
}

// FleetThroughputChart is req/s against H for one workload: a line per balancer, its
// measured points marked, and HAProxy's linear model (FleetLimit.Model) dashed, drawn
// out to one host past the H from which it predicts HAProxy full (at most
// fleetModelMaxH), with that range shaded.
func FleetThroughputChart(cells []FleetCell, limits []FleetLimit, workload string) Chart {
	c := Chart{Title: "Fleet throughput: " + workload, XLabel: "hosts H (each its own quota and cluster)", YLabel: "requests/s"}
	hi := 1
	for _, b := range []string{BalancerHAProxy, BalancerNft, BalancerNone} {
		pts := fleetPoints(cells, workload, b, func(r FleetRun) float64 { return r.RPS })
		if len(pts) == 0 {
			continue
		}
		c.Series = append(c.Series, Series{Name: fleetBalancerName(b), Points: pts})
		hi = max(hi, int(pts[len(pts)-1].X))
	}
	for _, l := range limits {
		if l.Workload != workload || l.Model == nil || len(c.Series) == 0 {
			continue
		}
		m := *l.Model
		top := max(hi, min(m.FullAtH+1, max(hi, fleetModelMaxH)))
		var line []Point
		for h := 1; h <= top; h++ {
			line = append(line, Point{float64(h), m.Predict(h)})
		}
		c.Series = append(c.Series, Series{Name: fmt.Sprintf("%s model (max %s)", fleetShortName(l.Balancer), shortNum(roundSig(m.BalancerRPS, 3))),
			Points: line, Dashed: true})
		if m.FullAtH <= top {
			c.Bands = append(c.Bands, Band{From: float64(m.FullAtH), To: float64(top), Label: fleetShortName(l.Balancer) + " full"})
		}
		hi = top
	}
	c.XTicks = hTicks(hi)
	return c
}

// FleetCPUChart is CPU µs per request against H behind HAProxy: HAProxy's process
// beside the servers' (every host's cluster, summed), a pair of lines per workload. (The
// nftables balancer has no process: its cost is softirq on every core, in the report's
// table.)
func FleetCPUChart(cells []FleetCell) Chart {
	c := Chart{Title: "CPU per request behind HAProxy: the balancer and the servers", XLabel: "hosts H",
		YLabel: "CPU µs per request (user + system)"}
	hi := 1
	for _, w := range fleetWorkloads(cells) {
		lb := fleetPoints(cells, w, BalancerHAProxy, func(r FleetRun) float64 { return r.BalancerUsPerReq })
		if len(lb) == 0 {
			continue
		}
		srv := fleetPoints(cells, w, BalancerHAProxy, func(r FleetRun) float64 { return r.ServerUsPerReq })
		c.Series = append(c.Series, Series{Name: w + ": HAProxy", Points: lb}, Series{Name: w + ": servers", Points: srv})
		hi = max(hi, int(lb[len(lb)-1].X))
	}
	c.XTicks = hTicks(hi)
	return c
}

// FleetProvenance is Provenance for a fleet's runs on machine m.
func FleetProvenance(runs []FleetRun, m Machine) string {
	rs := make([]Run, 0, len(runs))
	for _, r := range runs {
		rs = append(rs, Run{Started: r.Started, DurationS: r.DurationS, Skipped: r.Skipped})
	}
	return Provenance(rs, []Machine{m})
}

// WriteFleetPlots writes the fleet's charts into dir (fleet-throughput-WORKLOAD.svg per
// workload, fleet-cpu-per-request.svg) and returns the file names; source (FleetProvenance)
// is written on each.
func WriteFleetPlots(dir string, cells []FleetCell, limits []FleetLimit, source string) ([]string, error) {
	pd, err := newPlotDir(dir, source)
	if err != nil {
		return nil, err
	}
	for _, w := range fleetWorkloads(cells) {
		if err := pd.write("fleet-throughput-"+w+".svg", FleetThroughputChart(cells, limits, w)); err != nil {
			return pd.written, err
		}
	}
	err = pd.write("fleet-cpu-per-request.svg", FleetCPUChart(cells))
	return pd.written, err
}
