package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/onehost/onehost/internal/journey"
	"github.com/onehost/onehost/internal/procstat"
)

// usersOutput is the -j output of a run.
type usersOutput struct {
	journey.Result
	Generator usersGeneratorCPU `json:"generator"`
}

// usersGeneratorCPU is the load generator's own CPU over the run (all its processes).
type usersGeneratorCPU struct {
	UserSec  float64 `json:"cpu_user_s"`
	SysSec   float64 `json:"cpu_sys_s"`
	AvgCores float64 `json:"avg_cores"`
	PeakRSS  int64   `json:"peak_rss_bytes"`
}

func usersGenerator(s procstat.Summary, elapsed time.Duration) usersGeneratorCPU {
	g := usersGeneratorCPU{UserSec: s.UserSec, SysSec: s.SysSec, PeakRSS: s.PeakRSS}
	if elapsed > 0 {
		g.AvgCores = (s.UserSec + s.SysSec) / elapsed.Seconds()
	}
	return g
}

// offeredRate is the request rate the journey's users offer: an iteration lasts 20.5 s
// on average (2.5 s of first-iteration spread aside) and makes 2.17 requests.
func offeredRate(userEquivalents float64) float64 { return userEquivalents * 2.17 / 20.5 }

func printUsersResult(w io.Writer, out usersOutput) {
	r := out.Result
	var b strings.Builder
	fmt.Fprintf(&b, "users: %d (%s user-equivalents)", r.Users, usersNum(r.UserEquivalents))
	if r.Engine != "" {
		fmt.Fprintf(&b, " on the %s engine", r.Engine)
	}
	b.WriteString("\n")
	b.WriteString(spreadLine(r.Spread, 0, nil))
	fmt.Fprintf(&b, "requests: %d in %v: %s req/s", r.Requests, r.Elapsed.Round(time.Millisecond), usersNum(r.RPS))
	if len(r.Stages) > 1 && r.Stages[1].Duration > 0 {
		fmt.Fprintf(&b, " (hold: %s req/s; the users offer ~%s)", usersNum(r.Stages[1].RPS), usersNum(offeredRate(r.UserEquivalents)))
	}
	b.WriteString("\n")
	l := r.Latency
	fmt.Fprintf(&b, "latency: p50 %s, p90 %s, p95 %s, p99 %s, max %s (from each request's due time)\n",
		usersMs(l.P50), usersMs(l.P90), usersMs(l.P95), usersMs(l.P99), usersMs(l.Max))
	rate := 0.0
	if r.Requests > 0 {
		rate = 100 * float64(r.Failures) / float64(r.Requests)
	}
	fmt.Fprintf(&b, "failures: %d (%.2f%%)\n", r.Failures, rate)
	codes := make([]int, 0, len(r.Status))
	for code := range r.Status {
		codes = append(codes, code)
	}
	slices.Sort(codes)
	b.WriteString("status:")
	for _, code := range codes {
		fmt.Fprintf(&b, " %d×%d", code, r.Status[code])
	}
	if len(codes) == 0 {
		b.WriteString(" none")
	}
	b.WriteString("\n")
	if len(r.Errors) > 0 {
		kinds := make([]string, 0, len(r.Errors))
		for k := range r.Errors {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		b.WriteString("errors:")
		for _, k := range kinds {
			fmt.Fprintf(&b, " %s×%d", k, r.Errors[k])
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "requests by route: feed %d, post %d, like %d, create %d; iterations %d (%d restarted on the feed)\n",
		r.Routes[journey.RouteFeed].Requests, r.Routes[journey.RoutePost].Requests,
		r.Routes[journey.RouteLike].Requests, r.Routes[journey.RouteCreate].Requests, r.Iterations, r.FeedRetries)
	for _, s := range r.Stages {
		if s.Duration == 0 && s.Requests == 0 {
			continue
		}
		fmt.Fprintf(&b, "  %-9s %8v: %7d requests, %8s req/s, p95 %s, p99 %s, %d failures\n",
			s.Name, s.Duration, s.Requests, usersNum(s.RPS), usersMs(s.Latency.P95), usersMs(s.Latency.P99), s.Failures)
	}
	printRouteLatencies(&b, r)
	g := out.Generator
	fmt.Fprintf(&b, "generator CPU: %.2f cores on average (user %.1f s, sys %.1f s), peak RSS %d MiB\n",
		g.AvgCores, g.UserSec, g.SysSec, g.PeakRSS>>20)
	b.WriteString(r.Health.String())
	if r.Health.Parts > 1 {
		fmt.Fprintf(&b, " [%d processes]", r.Health.Parts)
	}
	b.WriteString("\n")
	if r.Health.Saturated {
		b.WriteString("INVALID: the generator, not the server, was measured; neither PASS nor FAIL\n")
	} else if r.Pass {
		b.WriteString("PASS (p95 < 500 ms, p99 < 1 s, failures < 1 %)\n")
	} else {
		fmt.Fprintf(&b, "FAIL: %s\n", strings.Join(r.Reasons, "; "))
	}
	io.WriteString(w, b.String())
}

// routeOrder is the order the journey's routes are reported in: its steps' order.
var routeOrder = []string{journey.RouteFeed, journey.RoutePost, journey.RouteLike, journey.RouteCreate}

// printRouteLatencies writes each route's latency in the hold, for the routes with
// requests there. The result counts a route's failures over the whole run only, so
// those come with the whole run's requests, labelled as such.
func printRouteLatencies(b *strings.Builder, r journey.Result) {
	header := false
	for _, name := range routeOrder {
		c := r.Routes[name]
		if c.Hist.Histogram == nil || c.Hist.TotalCount() == 0 {
			continue
		}
		if !header {
			b.WriteString("latency by route in the hold:\n")
			header = true
		}
		l := c.Latency
		fmt.Fprintf(b, "  %-6s %7d requests, p50 %s, p99 %s, max %s (whole run: %d requests, %d failures)\n",
			name, c.Hist.TotalCount(), usersMs(l.P50), usersMs(l.P99), usersMs(l.Max), c.Requests, c.Failures)
	}
}

func printSearchStep(w io.Writer, s journey.SearchStep) {
	r := s.Result
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL (" + strings.Join(r.Reasons, "; ") + ")"
	}
	rate := 0.0
	if r.Requests > 0 {
		rate = 100 * float64(r.Failures) / float64(r.Requests)
	}
	if s.Invalid {
		verdict = "INVALID, not scored (generator SATURATED: " + r.Health.Reason() + ")"
	}
	if s.Phase == journey.PhaseWarmup {
		verdict = "done (not judged)"
		if s.Invalid {
			verdict += "; generator SATURATED: " + r.Health.Reason()
		}
	}
	fmt.Fprintf(w, "%-7s %6d users (ramp %v, hold %v, ramp-down %v): %d requests, %s req/s in the hold, p95 %s, p99 %s, failures %.2f%%: %s\n",
		s.Phase, s.Users, s.Ramp, s.Hold, s.RampDown, r.Requests, usersNum(holdRPS(r)),
		usersMs(r.Latency.P95), usersMs(r.Latency.P99), rate, verdict)
}

func holdRPS(r journey.Result) float64 {
	if len(r.Stages) > 1 {
		return r.Stages[1].RPS
	}
	return r.RPS
}

// usersMs formats a latency in milliseconds.
func usersMs(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// usersNum formats a rate or count without trailing zeros.
func usersNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
