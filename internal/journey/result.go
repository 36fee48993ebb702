package journey

import (
	"encoding/json"
	"fmt"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/onehost/onehost/internal/histlog"

	"github.com/onehost/onehost/internal/genhealth"
	"github.com/onehost/onehost/internal/srcaddr"
)

// The challenge's pass thresholds.
const (
	MaxP95         = 500 * time.Millisecond
	MaxP99         = time.Second
	MaxFailureRate = 0.01
)

// Histogram range: latencies from 1 µs to 1 hour, three significant digits (the
// precision wrk2 uses). Longer latencies are recorded as 1 hour.
const (
	histLowest  = 1
	histHighest = int64(time.Hour / time.Microsecond)
	histDigits  = 3
)

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(histLowest, histHighest, histDigits)
}

// Histogram is a latency histogram in microseconds. It encodes to JSON as the compressed
// HdrHistogram V2 form (a base64 string), so results written by several processes merge
// exactly.
type Histogram struct{ *hdrhistogram.Histogram }

// MarshalJSON encodes h as its V2 compressed base64 form.
func (h Histogram) MarshalJSON() ([]byte, error) {
	if h.Histogram == nil {
		return []byte("null"), nil
	}
	b, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		return nil, fmt.Errorf("encode histogram: %w", err)
	}
	return json.Marshal(string(b))
}

// UnmarshalJSON decodes the form MarshalJSON writes.
func (h *Histogram) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("decode histogram: %w", err)
	}
	if s == "" {
		h.Histogram = nil
		return nil
	}
	d, err := hdrhistogram.Decode([]byte(s))
	if err != nil {
		return fmt.Errorf("decode histogram: %w", err)
	}
	h.Histogram = d
	return nil
}

// Latency is a summary of a histogram. Durations encode to JSON in nanoseconds.
type Latency struct {
	P50  time.Duration `json:"p50_ns"`
	P90  time.Duration `json:"p90_ns"`
	P95  time.Duration `json:"p95_ns"`
	P99  time.Duration `json:"p99_ns"`
	Max  time.Duration `json:"max_ns"`
	Mean time.Duration `json:"mean_ns"`
}

func summarize(h *hdrhistogram.Histogram) Latency {
	if h == nil || h.TotalCount() == 0 {
		return Latency{}
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	return Latency{
		P50:  us(h.ValueAtPercentile(50)),
		P90:  us(h.ValueAtPercentile(90)),
		P95:  us(h.ValueAtPercentile(95)),
		P99:  us(h.ValueAtPercentile(99)),
		Max:  us(h.Max()),
		Mean: time.Duration(h.Mean() * float64(time.Microsecond)),
	}
}

// Route names, in the order of the journey.
const (
	RouteFeed   = "feed"   // GET /feed
	RoutePost   = "post"   // GET /posts/:id
	RouteLike   = "like"   // POST /posts/:id/like
	RouteCreate = "create" // POST /posts
)

var routes = [...]string{RouteFeed, RoutePost, RouteLike, RouteCreate}

// RouteCounts counts one route's requests, and holds its latencies in the hold.
type RouteCounts struct {
	// Requests and Failures count the requests of every stage.
	Requests int64 `json:"requests"`
	Failures int64 `json:"failures"`
	// Latency summarizes Hist.
	Latency Latency `json:"latency"`
	// Hist holds the latencies of the route's requests due in the hold only (the
	// measured part of a run), so its count can be below Requests. Results written
	// before it existed decode with a nil Hist.
	Hist Histogram `json:"histogram"`
}

// Stage is one stage of the run: its requests are those whose due time fell in it.
type Stage struct {
	Name     string        `json:"name"` // "ramp-up", "hold", "ramp-down"
	Duration time.Duration `json:"duration_ns"`
	Requests int64         `json:"requests"`
	Failures int64         `json:"failures"`
	// RPS is Requests over the stage's planned duration.
	RPS     float64   `json:"rps"`
	Latency Latency   `json:"latency"`
	Hist    Histogram `json:"histogram"`
}

// Result is a run's outcome. Counts and histograms add up exactly under Merge.
type Result struct {
	URL string `json:"url"`
	// Users is the number of virtual users (of all processes, once merged).
	Users     int     `json:"users"`
	TimeScale float64 `json:"time_scale"`
	// UserEquivalents is Users × TimeScale: the challenge's users whose request rate
	// these users offer.
	UserEquivalents float64       `json:"user_equivalents"`
	Elapsed         time.Duration `json:"elapsed_ns"`
	Iterations      int64         `json:"iterations"`
	// FeedRetries counts iterations that restarted because GET /feed did not answer
	// 200 with at least one post.
	FeedRetries int64 `json:"feed_retries"`
	Requests    int64 `json:"requests"`
	// Failures are transport errors and statuses outside 2xx/3xx.
	Failures int64 `json:"failures"`
	// RPS is Requests over Elapsed.
	RPS    float64                `json:"rps"`
	Routes map[string]RouteCounts `json:"routes"`
	// Status counts responses by status code.
	Status map[int]int64 `json:"status"`
	// Errors counts transport errors by kind: "connect", "write", "read", "timeout".
	Errors  map[string]int64 `json:"errors,omitempty"`
	Latency Latency          `json:"latency"`
	Stages  []Stage          `json:"stages"`
	Pass    bool             `json:"pass"`
	Reasons []string         `json:"reasons,omitempty"`
	// Spread says how the users' connections were spread over source addresses.
	Spread srcaddr.Report `json:"spread"`
	// PortWarnings are the (source, server) pairs this run pushed past the connect()
	// cliff (CheckPorts, before it started), in words; a load host's come back with its
	// result.
	PortWarnings []string `json:"port_warnings,omitempty"`
	// Engine is how the users ran (Config.Engine); empty in results from before it existed.
	Engine string `json:"engine,omitempty"`
	// Health is the generator's verdict (package genhealth); a saturated run is invalid,
	// neither a pass nor a fail of the server. Results written before it existed decode
	// as not measured.
	Health genhealth.Verdict `json:"generator_verdict"`
	// HoldStart is when the hold began (wall clock), and Intervals the hold's latencies
	// per route and per second since then (tags the route names, held encoded): the
	// run's HdrHistogram interval log. A request due in the hold counts in the second it
	// ended in. They add up to Routes[].Hist exactly. Results written before they existed
	// decode with none.
	HoldStart time.Time          `json:"hold_start"`
	Intervals []histlog.Interval `json:"intervals,omitempty"`
}

// Histogram returns the latencies of all stages together.
func (r *Result) Histogram() *hdrhistogram.Histogram {
	h := newHistogram()
	for _, s := range r.Stages {
		if s.Hist.Histogram != nil {
			h.Merge(s.Hist.Histogram)
		}
	}
	return h
}

// finish derives the summaries (latencies, rates, verdict) from the counts and histograms.
func (r *Result) finish() {
	r.UserEquivalents = float64(r.Users) * r.TimeScale
	if r.Elapsed > 0 {
		r.RPS = float64(r.Requests) / r.Elapsed.Seconds()
	}
	for i := range r.Stages {
		s := &r.Stages[i]
		s.Latency = summarize(s.Hist.Histogram)
		if s.Duration > 0 {
			s.RPS = float64(s.Requests) / s.Duration.Seconds()
		}
	}
	for k, c := range r.Routes {
		c.Latency = summarize(c.Hist.Histogram)
		r.Routes[k] = c
	}
	r.Latency = summarize(r.Histogram())
	r.Pass, r.Reasons = Judge(r.Requests, r.Failures, r.Latency.P95, r.Latency.P99)
}

// Judge applies the challenge's thresholds: p95 < 500 ms, p99 < 1 s, failures < 1 % of
// requests. A run without requests fails.
func Judge(requests, failures int64, p95, p99 time.Duration) (pass bool, reasons []string) {
	if requests == 0 {
		return false, []string{"no requests completed"}
	}
	if p95 >= MaxP95 {
		reasons = append(reasons, fmt.Sprintf("p95 %v >= %v", p95.Round(time.Millisecond), MaxP95))
	}
	if p99 >= MaxP99 {
		reasons = append(reasons, fmt.Sprintf("p99 %v >= %v", p99.Round(time.Millisecond), MaxP99))
	}
	if rate := float64(failures) / float64(requests); rate >= MaxFailureRate {
		reasons = append(reasons, fmt.Sprintf("failures %.2f%% >= %.0f%%", 100*rate, 100*MaxFailureRate))
	}
	return len(reasons) == 0, reasons
}

// Share is how many of users the i-th of k generators (child processes or load hosts)
// runs: an even split, the first users%k one more. Generator i's users are numbered after
// those of generators 0…i-1 (Config.FirstUser), so each keeps its users' tokens and
// choices, and Merge adds their results back into one run's.
func Share(users, k, i int) int {
	n := users / k
	if i < users%k {
		n++
	}
	return n
}

// Merge adds up results of the same run split over processes: counts and histograms are
// summed, Elapsed is the longest, and the summaries and verdict are recomputed.
func Merge(results ...Result) Result {
	var m Result
	var health []genhealth.Verdict
	for i, r := range results {
		health = append(health, r.Health)
		if i == 0 {
			m.URL, m.TimeScale, m.Engine = r.URL, r.TimeScale, r.Engine
			m.Spread = r.Spread // every process plans the whole run's spread (users by global number)
			m.Routes = make(map[string]RouteCounts)
			m.Status = make(map[int]int64)
			m.Errors = make(map[string]int64)
			for _, s := range r.Stages {
				m.Stages = append(m.Stages, Stage{Name: s.Name, Duration: s.Duration, Hist: Histogram{newHistogram()}})
			}
		}
		m.Users += r.Users
		m.PortWarnings = append(m.PortWarnings, r.PortWarnings...)
		m.Elapsed = max(m.Elapsed, r.Elapsed)
		if i == 0 || r.HoldStart.Before(m.HoldStart) {
			m.HoldStart = r.HoldStart
		}
		m.Iterations += r.Iterations
		m.FeedRetries += r.FeedRetries
		m.Requests += r.Requests
		m.Failures += r.Failures
		for k, v := range r.Routes {
			c := m.Routes[k]
			if c.Hist.Histogram == nil {
				c.Hist = Histogram{newHistogram()}
			}
			c.Requests += v.Requests
			c.Failures += v.Failures
			if v.Hist.Histogram != nil { // nil in a result written before route histograms
				c.Hist.Merge(v.Hist.Histogram)
			}
			m.Routes[k] = c
		}
		for k, v := range r.Status {
			m.Status[k] += v
		}
		for k, v := range r.Errors {
			m.Errors[k] += v
		}
		for j, s := range r.Stages {
			if j >= len(m.Stages) {
				break
			}
			m.Stages[j].Requests += s.Requests
			m.Stages[j].Failures += s.Failures
			if s.Hist.Histogram != nil {
				m.Stages[j].Hist.Merge(s.Hist.Histogram)
			}
		}
	}
	if len(m.Errors) == 0 {
		m.Errors = nil
	}
	m.Intervals = mergeIntervals(m.HoldStart, results)
	m.Health = genhealth.Merge(health...)
	m.finish()
	return m
}

// mergeIntervals adds the results' intervals per route and second, the seconds aligned
// on the wall clock from start (processes of one run share its start, so their seconds
// coincide). Results with no intervals add none.
func mergeIntervals(start time.Time, results []Result) []histlog.Interval {
	var acc histlog.Accumulator
	var end time.Duration
	for _, r := range results {
		off := r.HoldStart.Sub(start)
		for _, iv := range r.Intervals {
			h, err := iv.Histogram()
			if err != nil {
				continue // a result decoded from JSON was checked then
			}
			acc.Add(iv.Tag, int((off+iv.Start+time.Second/2)/time.Second), h)
			end = max(end, off+iv.Start+iv.Length)
		}
	}
	ivs, _ := acc.Intervals(end)
	return ivs
}
