// The fleet's report: one line per run, the median of each (workload, balancer, H), and
// per workload and balancer the H at which the balancer became the limit, and for HAProxy
// the linear model's prediction for bigger fleets with the measured points beside it.

package ceiling

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// FleetLine is a run's one line, as the sweep's: workload=... verdict=... evidence="...".
func FleetLine(r FleetRun) string {
	if r.Skipped != "" {
		return fmt.Sprintf("workload=%s balancer=%s hosts=%d n=%d skipped=%q", r.Workload, r.Balancer, r.Hosts, r.N, r.Skipped)
	}
	return fmt.Sprintf("workload=%s balancer=%s hosts=%d n=%d rps=%.0f p99_ms=%.2f errors=%d server_us=%.1f balancer_us=%.1f softirq_us=%.1f bytes_per_req=%.0f server_cores=%.2f/%.2f balancer_cores=%.2f/%.0f gen_cores=%.2f other_cores=%.2f verdict=%s evidence=%q",
		r.Workload, r.Balancer, r.Hosts, r.N, r.RPS, r.P99Ms, r.Errors+r.Non2xx, r.ServerUsPerReq, r.BalancerUsPerReq, r.SoftIRQUsPerReq,
		r.LinkBytesPerReq, r.ServerBusyCores, r.ServerCoreLimit, r.BalancerBusyCores, r.BalancerCores, r.GenBusyCores, r.OtherCores, r.Verdict, r.Evidence)
}

// FleetCell is the median run of one (workload, balancer, H) over the rounds, by req/s,
// with the spread of req/s and every run's verdict.
type FleetCell struct {
	Workload string   `json:"workload"`
	Balancer string   `json:"balancer"`
	Hosts    int      `json:"hosts"`
	Runs     int      `json:"runs"`
	Median   FleetRun `json:"median"`
	MinRPS   float64  `json:"min_rps"`
	MaxRPS   float64  `json:"max_rps"`
	Verdicts []string `json:"verdicts"`
}

// FleetLimit says, for one workload behind one balancer, the smallest H whose median run
// was judged balancer (0: not reached in the H measured), with the balancer's and the
// servers' µs of CPU per request at the largest H.
type FleetLimit struct {
	Workload         string  `json:"workload"`
	Balancer         string  `json:"balancer"`
	BalancerLimitAtH int     `json:"balancer_limit_at_h"` // 0: not reached
	MaxH             int     `json:"max_h"`
	BalancerUsPerReq float64 `json:"balancer_cpu_us_per_req"`
	SoftIRQUsPerReq  float64 `json:"softirq_us_per_req"`
	ServerUsPerReq   float64 `json:"server_cpu_us_per_req"`
	Verdict          string  `json:"verdict_at_max_h"`
	// Model (HAProxy only: a balancer with a process and cores of its own): a linear one,
	// each request costing the balancer and the servers the µs measured at the largest H,
	// whatever H. Nil for nftables and none (their cost is softirq on every core, not the
	// balancer's alone).
	Model *FleetModel `json:"model,omitempty"`
}

// FleetModel predicts a bigger fleet from one workload's measured µs per request: H hosts
// serve H × HostRPS until the balancer passes its BalancerRPS, from FullAtH on.
type FleetModel struct {
	HostCores     float64 `json:"host_cores"`     // each host's cores (its quota, or its cores)
	BalancerCores float64 `json:"balancer_cores"` // HAProxy's cores
	HostRPS       float64 `json:"host_rps"`       // HostCores × 1e6 ÷ servers' µs/req
	BalancerRPS   float64 `json:"balancer_rps"`   // BalancerCores × 1e6 ÷ balancer's µs/req
	// FullAtH: the smallest H whose hosts could serve more than the balancer passes.
	FullAtH int `json:"full_at_h"`
	// Points: every H measured, its median req/s beside the model's min(H × HostRPS,
	// BalancerRPS).
	Points []FleetPoint `json:"points"`
}

// FleetPoint is one measured H against the model.
type FleetPoint struct {
	H        int     `json:"h"`
	RPS      float64 `json:"rps"`
	ModelRPS float64 `json:"model_rps"`
}

// Predict returns the model's req/s for h hosts.
func (m FleetModel) Predict(h int) float64 { return min(float64(h)*m.HostRPS, m.BalancerRPS) }

// SummarizeFleet groups runs (skipped ones left out) into cells, in the order first seen,
// and derives each workload's and balancer's limit.
func SummarizeFleet(runs []FleetRun) ([]FleetCell, []FleetLimit) {
	type key struct {
		w, b string
		h    int
	}
	var order []key
	groups := map[key][]FleetRun{}
	for _, r := range runs {
		if r.Skipped != "" {
			continue
		}
		k := key{r.Workload, r.Balancer, r.Hosts}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	var cells []FleetCell
	for _, k := range order {
		g := slices.Clone(groups[k])
		slices.SortStableFunc(g, func(a, b FleetRun) int {
			switch {
			case a.RPS < b.RPS:
				return -1
			case a.RPS > b.RPS:
				return 1
			}
			return 0
		})
		c := FleetCell{Workload: k.w, Balancer: k.b, Hosts: k.h, Runs: len(g), Median: g[(len(g)-1)/2],
			MinRPS: g[0].RPS, MaxRPS: g[len(g)-1].RPS}
		for _, r := range groups[k] {
			c.Verdicts = append(c.Verdicts, r.Verdict)
		}
		cells = append(cells, c)
	}
	type wb struct{ w, b string }
	var lorder []wb
	limits := map[wb]*FleetLimit{}
	for _, c := range cells {
		k := wb{c.Workload, c.Balancer}
		l, ok := limits[k]
		if !ok {
			l = &FleetLimit{Workload: c.Workload, Balancer: c.Balancer}
			limits[k] = l
			lorder = append(lorder, k)
		}
		if c.Median.Verdict == VerdictBalancer && (l.BalancerLimitAtH == 0 || c.Hosts < l.BalancerLimitAtH) {
			l.BalancerLimitAtH = c.Hosts
		}
		if c.Hosts >= l.MaxH {
			l.MaxH, l.Verdict = c.Hosts, c.Median.Verdict
			l.BalancerUsPerReq, l.SoftIRQUsPerReq, l.ServerUsPerReq = c.Median.BalancerUsPerReq, c.Median.SoftIRQUsPerReq, c.Median.ServerUsPerReq
		}
	}
	var out []FleetLimit
	for _, k := range lorder {
		l := limits[k]
		l.Model = fleetModel(cells, *l)
		out = append(out, *l)
	}
	return cells, out
}

// fleetModel fits the linear model to l's workload behind HAProxy from the cell at the
// largest H; nil where it cannot (another balancer, no CPU measured).
func fleetModel(cells []FleetCell, l FleetLimit) *FleetModel {
	if l.Balancer != BalancerHAProxy {
		return nil
	}
	var top *FleetRun
	var pts []FleetPoint
	for _, c := range cells {
		if c.Workload != l.Workload || c.Balancer != l.Balancer {
			continue
		}
		pts = append(pts, FleetPoint{H: c.Hosts, RPS: c.Median.RPS})
		if c.Hosts == l.MaxH {
			top = &c.Median
		}
	}
	if top == nil || top.Hosts <= 0 || top.ServerUsPerReq <= 0 || top.BalancerUsPerReq <= 0 || top.ServerCoreLimit <= 0 || top.BalancerCores <= 0 {
		return nil
	}
	m := &FleetModel{HostCores: top.ServerCoreLimit / float64(top.Hosts), BalancerCores: top.BalancerCores}
	m.HostRPS = m.HostCores * 1e6 / top.ServerUsPerReq
	m.BalancerRPS = m.BalancerCores * 1e6 / top.BalancerUsPerReq
	m.FullAtH = int(m.BalancerRPS/m.HostRPS) + 1
	slices.SortFunc(pts, func(a, b FleetPoint) int { return a.H - b.H })
	for i := range pts {
		pts[i].ModelRPS = m.Predict(pts[i].H)
	}
	m.Points = pts
	return m
}

// WriteFleetReport writes the cells as a table and then the limits, one line each.
func WriteFleetReport(w io.Writer, cells []FleetCell, limits []FleetLimit) {
	fmt.Fprintln(w, "| workload | balancer | H | runs | req/s (median; min–max) | p99 ms | servers µs/req | balancer µs/req | softirq µs/req (all cores) | bytes/req | verdicts |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, c := range cells {
		m := c.Median
		bal := "–"
		if m.Balancer == BalancerHAProxy {
			bal = fmt.Sprintf("%.1f", m.BalancerUsPerReq)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %.0f; %.0f–%.0f | %.2f | %.1f | %s | %.1f | %.0f | %s |\n",
			c.Workload, c.Balancer, c.Hosts, c.Runs, m.RPS, c.MinRPS, c.MaxRPS, m.P99Ms, m.ServerUsPerReq, bal,
			m.SoftIRQUsPerReq, m.LinkBytesPerReq, strings.Join(c.Verdicts, ", "))
	}
	fmt.Fprintln(w)
	for _, l := range limits {
		at := fmt.Sprintf("not reached up to H=%d (verdict at H=%d: %s)", l.MaxH, l.MaxH, l.Verdict)
		if l.BalancerLimitAtH > 0 {
			at = fmt.Sprintf("the limit from H=%d", l.BalancerLimitAtH)
		}
		fmt.Fprintf(w, "limit workload=%s balancer=%s balancer: %s; at H=%d balancer %.1f µs/req, softirq %.1f µs/req, servers %.1f µs/req\n",
			l.Workload, l.Balancer, at, l.MaxH, l.BalancerUsPerReq, l.SoftIRQUsPerReq, l.ServerUsPerReq)
		if m := l.Model; m != nil {
			var pts []string
			for _, p := range m.Points {
				pts = append(pts, fmt.Sprintf("H=%d %.0f (model %.0f)", p.H, p.RPS, p.ModelRPS))
			}
			fmt.Fprintf(w, "model workload=%s balancer=%s: a host (%.2g cores) serves %.0f req/s, the balancer (%.2g cores) passes %.0f req/s: full from H=%d; measured: %s\n",
				l.Workload, l.Balancer, m.HostCores, m.HostRPS, m.BalancerCores, m.BalancerRPS, m.FullAtH, strings.Join(pts, ", "))
		}
	}
}
