// The fleet's report: one line per run, the median of each (workload, balancer, H), and
// per workload and balancer the H at which the balancer became the limit.

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
}

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
		out = append(out, *limits[k])
	}
	return cells, out
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
	}
}
