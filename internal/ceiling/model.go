package ceiling

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// WireFactor turns HTTP bytes into Ethernet bytes: a 1500-byte MTU frame carries 1448
// bytes of TCP payload (IPv4 and TCP headers with timestamps take 52) and costs 1538 bytes
// of line time (14 header, 4 FCS, 8 preamble, 12 inter-frame gap). ACKs travel the other
// way and are not counted against the server's transmit side.
const WireFactor = 1538.0 / 1448.0

// Model predicts one workload's throughput in one mode on more cores and other links.
//
//	rps(n) = min(n × 1e6 / CPUUsPerReq × efficiency(n), link bytes/s / bytes per request)
//	efficiency(n) = E1 / (1 + Alpha × (n − N1))
//
// CPUUsPerReq is the server CPU per request measured at the smallest worker count N1, and
// E1 the share of its cores the server used there (1 when CPU-bound). Alpha is the
// fractional loss per added core, fitted by least squares through the measured points:
// it lumps together whatever grows with cores (CPU per request rising as cores share
// caches, hyperthreads and the kernel's loopback work; cores left idle waiting on a
// lock). It is the contention term of Gunther's universal scaling law without the
// coherency term: the measured range (1–12 cores) cannot tell the two apart, so the
// model stays linear in its loss and says so when it extrapolates.
type Model struct {
	Workload string `json:"workload"`
	Mode     string `json:"mode"`
	// Source is the runs' Source ("" for the sweep's own).
	Source      string  `json:"source,omitempty"`
	N1          int     `json:"n1"`
	CPUUsPerReq float64 `json:"cpu_us_per_req"`
	E1          float64 `json:"e1"`
	Alpha       float64 `json:"alpha"`
	// AlphaFrom says where Alpha came from when the series could not fit it: with one
	// point, the median of other series (see BorrowAlpha); "" when fitted.
	AlphaFrom string `json:"alpha_from,omitempty"`
	// BytesPerReq is the HTTP response (headers and body) a NIC transmits per request;
	// LoBytesPerReq what a loopback carries per request (both directions, TCP/IP headers).
	// Zero when the runs did not record bytes (bench/scale.sh's CSV): then no link
	// limit applies (LinkKnown is false) and predictions say so.
	BytesPerReq   float64 `json:"bytes_per_req"`
	LoBytesPerReq float64 `json:"lo_bytes_per_req"`
	// GenUsPerReq is the load generator's CPU per request, for sizing it.
	GenUsPerReq float64 `json:"gen_us_per_req"`
	// Points are the worker counts the fit used; MaxN the largest.
	Points []int `json:"points"`
	// Terms names what in the fit a reader must know before trusting a prediction from
	// it: a superlinear step, alpha clamped to 0, a point no bound explained (unclear),
	// every point generator-bound. The report prints them on the series' row and next to
	// the predictions they feed, not in a paragraph below.
	Terms []string `json:"terms,omitempty"`
	// NoPrediction says why the series carries no prediction: none of its runs was limited
	// by the server itself (judged cpu or sqlite), so every point measured something else
	// (a busy host, the generator, an unclear bound) and a number extrapolated from them
	// would be quoted as the server's. "" when it carries one.
	NoPrediction string `json:"no_prediction,omitempty"`
}

// RemeasureHint is the command a report gives where a series carries no prediction.
const RemeasureHint = "measure again on a quiet host: `ceiling sweep -repeat 3 -host-busy-repeats 2`, then `ceiling model`"

// noPrediction is Model.NoPrediction for a series' runs: "" when one of them was judged
// by the server's own limit (or recorded no verdict: older results).
func noPrediction(rs []Run) string {
	count := make(map[string]int)
	var order []string
	for _, r := range rs {
		switch r.Verdict {
		case VerdictCPU, VerdictSQLite, "":
			return ""
		}
		if count[r.Verdict] == 0 {
			order = append(order, r.Verdict)
		}
		count[r.Verdict]++
	}
	var parts []string
	for _, v := range order {
		parts = append(parts, fmt.Sprintf("%s x%d", v, count[v]))
	}
	return "no run was limited by the server's own CPU (" + strings.Join(parts, ", ") + ")"
}

// Name is the workload, prefixed by its source when it has one.
func (m Model) Name() string { return seriesName(m.Source, m.Workload) }

func seriesName(source, workload string) string {
	if source == "" {
		return workload
	}
	return source + ":" + workload
}

// LinkKnown reports whether the model knows the bytes per response, so that an Ethernet
// link can limit it; without them a NIC ceiling cannot be predicted.
func (m Model) LinkKnown() bool { return m.BytesPerReq > 0 }

// Efficiency is the share of linear scaling from one core at n cores.
func (m Model) Efficiency(n float64) float64 {
	d := 1 + m.Alpha*(n-float64(m.N1))
	if d <= 0 {
		return m.E1
	}
	return m.E1 / d
}

// CPULimit is the requests per second n server cores sustain.
func (m Model) CPULimit(n float64) float64 {
	if m.CPUUsPerReq <= 0 {
		return math.Inf(1)
	}
	return n * 1e6 / m.CPUUsPerReq * m.Efficiency(n)
}

// Link is a network link the model can put in front of the server.
type Link struct {
	BitsPerS float64
	// Loopback: a shaped loopback (both directions share the token bucket, counted as
	// LoBytesPerReq); otherwise a full-duplex Ethernet link whose transmit side carries
	// the responses (BytesPerReq × WireFactor).
	Loopback bool
}

// LinkLimit is the requests per second the link carries; +Inf with no link.
func (m Model) LinkLimit(l Link) float64 {
	if l.BitsPerS <= 0 {
		return math.Inf(1)
	}
	per := m.linkBytes(l)
	if per <= 0 {
		return math.Inf(1)
	}
	return l.BitsPerS / 8 / per
}

// linkBytes is what link l carries per request; 0 when unknown.
func (m Model) linkBytes(l Link) float64 {
	if l.Loopback {
		return m.LoBytesPerReq
	}
	return m.BytesPerReq * WireFactor
}

// Prediction is the model's answer for one core count and link.
type Prediction struct {
	Cores     int     `json:"cores"`
	LinkBits  float64 `json:"link_bits_per_s"`
	RPS       float64 `json:"rps"`
	CPULimit  float64 `json:"cpu_limit"`
	LinkLimit float64 `json:"link_limit"` // +Inf encodes as 0
	Limit     string  `json:"limit"`      // VerdictCPU or VerdictNIC
	GenCores  float64 `json:"gen_cores"`  // generator cores needed to offer RPS
	BytesPerS float64 `json:"bytes_per_s"`
	// LinkUnknown: the model has no bytes per request, so LinkLimit is not applicable
	// (not "unlimited") and Limit is only the CPU's.
	LinkUnknown bool `json:"link_unknown,omitempty"`
}

// Predict is the model at n cores behind link l.
func (m Model) Predict(n int, l Link) Prediction {
	c, k := m.CPULimit(float64(n)), m.LinkLimit(l)
	p := Prediction{Cores: n, LinkBits: l.BitsPerS, CPULimit: c, LinkLimit: k, RPS: c, Limit: VerdictCPU,
		LinkUnknown: l.BitsPerS > 0 && m.linkBytes(l) <= 0}
	if k < c {
		p.RPS, p.Limit = k, VerdictNIC
	}
	if math.IsInf(p.LinkLimit, 1) {
		p.LinkLimit = 0
	}
	p.GenCores = p.RPS * m.GenUsPerReq / 1e6
	p.BytesPerS = p.RPS * m.BytesPerReq
	return p
}

// Crossover is the smallest core count (1..maxCores) at which link l, not the CPU,
// limits throughput; 0 when the CPU limits it throughout.
func (m Model) Crossover(l Link, maxCores int) int {
	for n := 1; n <= maxCores; n++ {
		if m.LinkLimit(l) < m.CPULimit(float64(n)) {
			return n
		}
	}
	return 0
}

// series is what one Model is fitted to: one workload in one mode from one source.
type series struct{ source, workload, mode string }

func seriesOf(r Run) series    { return series{r.Source, r.Workload, r.Mode} }
func (m Model) series() series { return series{m.Source, m.Workload, m.Mode} }

func (a series) less(b series) bool {
	if a.source != b.source {
		return a.source < b.source
	}
	if a.workload != b.workload {
		return a.workload < b.workload
	}
	return a.mode < b.mode
}

// fitPoint reports whether a run is a point of the efficiency fit: an unshaped sweep run
// that served requests and that neither the generator nor failed connections limited.
func fitPoint(r Run) bool {
	return r.Skipped == "" && r.Requests > 0 && r.RPS > 0 && r.Purpose == PurposeSweep && r.LinkBitsPerS == 0 &&
		r.Verdict != VerdictGenerator && r.Verdict != VerdictFD && r.Verdict != VerdictHostBusy
}

// Fit builds one Model per (source, workload, mode) from the sweep's unshaped runs. Runs
// that were skipped, failed or that the generator limited are left out of the efficiency
// fit (they measure the generator, not the server) but still give bytes and CPU per
// request. A series with one point gets alpha 0 (nothing to fit it from; see
// BorrowAlpha for the validation's answer to that).
func Fit(runs []Run) []Model {
	type loKey struct{ source, workload string }
	groups := make(map[series][]Run)
	lo := make(map[loKey][]float64) // loopback bytes per request, from shaped runs
	var keys []series
	for _, r := range runs {
		if r.Skipped != "" || r.Requests <= 0 || r.RPS <= 0 {
			continue
		}
		if r.LoBytesPerS > 0 && r.Purpose == PurposeNIC {
			k := loKey{r.Source, r.Workload}
			lo[k] = append(lo[k], r.LoBytesPerS/r.RPS)
		}
		if r.Purpose != PurposeSweep || r.LinkBitsPerS > 0 {
			continue
		}
		k := seriesOf(r)
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], r)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].less(keys[j]) })
	var out []Model
	for _, k := range keys {
		rs := groups[k]
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].N < rs[j].N })
		m := Model{Workload: k.workload, Mode: k.mode, Source: k.source}
		var good []Run
		for _, r := range rs {
			if fitPoint(r) {
				good = append(good, r)
			}
		}
		if len(good) == 0 {
			good = rs // all generator-bound: the fit is a lower bound, still the best we have
		}
		first := good[0]
		m.N1 = first.N
		m.CPUUsPerReq = first.ServerCPUUsPerReq
		if m.CPUUsPerReq > 0 {
			m.E1 = first.RPS * m.CPUUsPerReq / (float64(m.N1) * 1e6)
		}
		var sxy, sxx float64
		for _, r := range good {
			m.Points = append(m.Points, r.N)
			x := float64(r.N - m.N1)
			if x <= 0 || m.CPUUsPerReq <= 0 {
				continue
			}
			e := r.RPS * m.CPUUsPerReq / (float64(r.N) * 1e6)
			if e <= 0 {
				continue
			}
			y := m.E1/e - 1
			sxy += x * y
			sxx += x * x
		}
		if sxx > 0 {
			m.Alpha = math.Max(0, sxy/sxx)
			if sxy/sxx < 0 {
				m.Terms = append(m.Terms, fmt.Sprintf("alpha clamped to 0 (fit %.3f)", sxy/sxx))
			}
		}
		m.Terms = append(m.Terms, fitTerms(good, len(good) == len(rs) && !slices.ContainsFunc(rs, fitPoint))...)
		m.NoPrediction = noPrediction(rs)
		var nb, ng float64
		for _, r := range rs {
			if r.BytesPerReq > 0 {
				m.BytesPerReq += r.BytesPerReq
				nb++
			}
			if r.GenUsPerReq > 0 {
				m.GenUsPerReq += r.GenUsPerReq
				ng++
			}
		}
		if nb > 0 {
			m.BytesPerReq /= nb
		}
		if ng > 0 {
			m.GenUsPerReq /= ng
		}
		// Loopback bytes only from shaped runs: their private namespace carries nothing
		// else, while the host's loopback during the sweep also carries other programs'
		// traffic. Without one, the HTTP bytes stand in (headers of 64 KiB GSO segments
		// add little).
		if v := lo[loKey{k.source, k.workload}]; len(v) > 0 {
			m.LoBytesPerReq = median(v)
		} else {
			m.LoBytesPerReq = m.BytesPerReq
		}
		out = append(out, m)
	}
	return out
}

// fitTerms names the fit's superlinear steps (req/s grew more than 5 % beyond N's ratio
// between two neighbouring points: the host's other work at the smaller N, a cache, never
// a gain to extrapolate; within 5 % is the noise of a run), its unclear points, and (allBad) that no point measured the server.
func fitTerms(good []Run, allBad bool) []string {
	var out, unclear []string
	for i, r := range good {
		if r.Verdict == VerdictUnclear {
			unclear = append(unclear, fmt.Sprint(r.N))
		}
		if i == 0 {
			continue
		}
		p := good[i-1]
		if p.RPS > 0 && p.N > 0 && r.N > p.N && r.RPS/p.RPS > 1.05*float64(r.N)/float64(p.N) {
			out = append(out, fmt.Sprintf("superlinear step N=%d->%d (x%.1f req/s on x%.1f cores)", p.N, r.N, r.RPS/p.RPS, float64(r.N)/float64(p.N)))
		}
	}
	if len(unclear) > 0 {
		out = append(out, "fit on unclear point(s) N="+strings.Join(unclear, ","))
	}
	if allBad {
		out = append(out, "every point generator- or fd-bound or host-busy: a lower bound")
	}
	return out
}

// TermsText is Terms for a table cell: "-" when there are none.
func (m Model) TermsText() string {
	if len(m.Terms) == 0 {
		return "-"
	}
	return strings.Join(m.Terms, "; ")
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Check is one measured run against the model's prediction for it.
type Check struct {
	Run       Run
	Index     int   // the run's position in the runs checked
	Model     Model // the model that made the prediction
	Predicted Prediction
	ErrPct    float64 // (predicted − measured) / measured × 100
	Note      string  // why the comparison is weak (the generator limited the run)
}

// CheckModels predicts every measured run with its workload's model (the same mode;
// shaped runs with their loopback link) and reports the error.
func CheckModels(models []Model, runs []Run) []Check {
	byKey := make(map[series]Model)
	for _, m := range models {
		byKey[m.series()] = m
	}
	var out []Check
	for i, r := range runs {
		if r.Skipped != "" || r.RPS <= 0 || r.Purpose == PurposeImbalance {
			continue
		}
		m, ok := byKey[seriesOf(r)]
		if !ok {
			continue
		}
		out = append(out, check(i, m, r))
	}
	return out
}

// check predicts run r (runs[i]) with model m (shaped runs behind their loopback link).
func check(i int, m Model, r Run) Check {
	p := m.Predict(r.N, Link{BitsPerS: r.LinkBitsPerS, Loopback: true})
	c := Check{Run: r, Index: i, Model: m, Predicted: p, ErrPct: (p.RPS - r.RPS) / r.RPS * 100}
	switch {
	case r.Verdict == VerdictGenerator:
		c.Note = "generator-bound: measured is a lower bound"
	case r.Verdict == VerdictFD:
		c.Note = "connections failed"
	case r.Verdict == VerdictHostBusy:
		c.Note = "host busy: other work took part of the run (left out of the fit)"
	case p.LinkUnknown:
		c.Note = "bytes per request unknown: the link limit is not applicable"
	}
	return c
}

// Published is the heavy PATCH run of the source article: one Node process served 8,000
// req/s of ~32 KB with its core at 100 %; 12 workers served 36,000 (5 connections) and
// 42,000–50,000 req/s (20 connections × 6 generator threads, the generator using ~200 %
// of the same host), ~1.6 GB/s.
var Published = struct {
	OneCoreRPS, BytesPerReq    float64
	Cores                      int
	LowRPS, MaxRPSLo, MaxRPSHi float64
	GenCores, BytesPerS        float64
}{8000, 32 << 10, 12, 36000, 42000, 50000, 2, 1.6e9}

// PublishedModel is the model built from the article's one-core figures (125 µs per
// request, 32 KiB) with the given loss per core.
func PublishedModel(alpha float64) Model {
	return Model{Workload: "heavy (article, Node)", Mode: ModeCluster, N1: 1, E1: 1,
		CPUUsPerReq: 1e6 / Published.OneCoreRPS, Alpha: alpha, BytesPerReq: Published.BytesPerReq}
}

// ImpliedAlpha is the loss per core that takes one core's rps1 to rpsN at n cores.
func ImpliedAlpha(rps1, rpsN float64, n int) float64 {
	if n <= 1 || rpsN <= 0 {
		return 0
	}
	e := rpsN / (rps1 * float64(n))
	return (1/e - 1) / float64(n-1)
}

// String is the model in one line.
func (m Model) String() string {
	return fmt.Sprintf("%s/%s: %.1f µs/req at n=%d (e1 %.2f), alpha %.3f, %.0f B/req, gen %.1f µs/req, points %v",
		m.Name(), m.Mode, m.CPUUsPerReq, m.N1, m.E1, m.Alpha, m.BytesPerReq, m.GenUsPerReq, m.Points)
}
