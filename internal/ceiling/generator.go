package ceiling

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/onehost/onehost/internal/genhealth"
)

// Outcome is what one load-generator run reports, whichever generator it was.
type Outcome struct {
	Requests   int64
	Errors     int64 // transport errors of any kind
	Connect    int64 // of which failed connects (refused, EMFILE on the client)
	Timeouts   int64
	Non2xx     int64
	Bytes      int64   // HTTP bytes read
	DurationS  float64 // as the generator timed it
	P50Ms      float64
	P99Ms      float64
	MaxMs      float64
	Bound      bool    // the generator says it could not keep up
	MaxThread  float64 // busiest worker thread's CPU, fraction of a core; 0 unknown
	GenThreads int     // worker threads it ran
	// Saturated: the generator's own verdict (package genhealth) says some second of the
	// run was beyond it, so the run measured the generator; Saturation says which signal.
	// wrk has no such verdict.
	Saturated  bool
	Saturation string
}

// acStat is one of autocannon's histogram summaries (requests, latency, throughput).
type acStat struct {
	Average float64 `json:"average"`
	Mean    float64 `json:"mean"`
	Stddev  float64 `json:"stddev"`
	Min     float64 `json:"min"`
	Max     float64 `json:"max"`
	Total   float64 `json:"total"`
	P50     float64 `json:"p50"`
	P97_5   float64 `json:"p97_5"`
	P99     float64 `json:"p99"`
}

// AutocannonReport is the part of `autocannon -j` output (autocannon's own fields plus the
// project clone's generator extension) that the sweep uses.
type AutocannonReport struct {
	Requests    acStat  `json:"requests"`
	Latency     acStat  `json:"latency"` // milliseconds
	Throughput  acStat  `json:"throughput"`
	Errors      int64   `json:"errors"`
	Timeouts    int64   `json:"timeouts"`
	Non2xx      int64   `json:"non2xx"`
	OK          int64   `json:"2xx"`
	Duration    float64 `json:"duration"` // seconds
	Connections int     `json:"connections"`
	Pipelining  int     `json:"pipelining"`
	Mode        string  `json:"mode"`
	Generator   *struct {
		Workers      int                `json:"workers"`
		CPUUserS     float64            `json:"cpu_user_s"`
		CPUSysS      float64            `json:"cpu_sys_s"`
		MaxWorkerCPU float64            `json:"max_worker_cpu"`
		Bound        bool               `json:"bound"`
		Verdict      *genhealth.Verdict `json:"verdict"`
	} `json:"generator"`
	// Server is the clone's own view of the --server-pid tree, kept as it came.
	Server json.RawMessage `json:"server"`
}

// ParseAutocannon decodes `autocannon -j` output. The JSON may be preceded by other
// output (a warning): the last top-level JSON object in b is taken.
func ParseAutocannon(b []byte) (AutocannonReport, Outcome, error) {
	var r AutocannonReport
	i := bytes.LastIndex(b, []byte("\n{"))
	if i >= 0 {
		b = b[i+1:]
	} else if j := bytes.IndexByte(b, '{'); j >= 0 {
		b = b[j:]
	} else {
		return r, Outcome{}, errors.New("parse autocannon output: no JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&r); err != nil {
		return r, Outcome{}, fmt.Errorf("parse autocannon output: %w", err)
	}
	o := Outcome{
		Requests:  int64(r.Requests.Total),
		Errors:    r.Errors,
		Timeouts:  r.Timeouts,
		Non2xx:    r.Non2xx,
		Bytes:     int64(r.Throughput.Total),
		DurationS: r.Duration,
		P50Ms:     r.Latency.P50,
		P99Ms:     r.Latency.P99,
		MaxMs:     r.Latency.Max,
	}
	if o.Requests == 0 && r.OK+r.Non2xx > 0 {
		o.Requests = r.OK + r.Non2xx
	}
	if r.Generator != nil {
		o.Bound = r.Generator.Bound
		o.MaxThread = r.Generator.MaxWorkerCPU
		o.GenThreads = r.Generator.Workers
		if v := r.Generator.Verdict; v != nil && v.Saturated {
			o.Saturated, o.Saturation = true, v.Reason()
		}
	}
	if o.Requests < 0 || o.Bytes < 0 || o.DurationS < 0 {
		return r, o, errors.New("parse autocannon output: negative counts")
	}
	return r, o, nil
}

// WrkDoneMarker starts the line the sweep's wrk script prints from its done() callback.
const WrkDoneMarker = "ceiling-wrk: "

// wrkDone is what that line holds: wrk's summary with latencies in microseconds.
type wrkDone struct {
	Requests int64   `json:"requests"`
	Bytes    int64   `json:"bytes"`
	Duration float64 `json:"duration_us"`
	Connect  int64   `json:"connect"`
	Read     int64   `json:"read"`
	Write    int64   `json:"write"`
	Status   int64   `json:"status"`
	Timeout  int64   `json:"timeout"`
	P50      float64 `json:"p50_us"`
	P99      float64 `json:"p99_us"`
	Max      float64 `json:"max_us"`
}

// ParseWrk finds the done() line of the sweep's wrk script in wrk's output.
func ParseWrk(b []byte) (Outcome, error) {
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), WrkDoneMarker)
		if !ok {
			continue
		}
		var d wrkDone
		if err := json.Unmarshal([]byte(rest), &d); err != nil {
			return Outcome{}, fmt.Errorf("parse wrk summary: %w", err)
		}
		if d.Requests < 0 || d.Bytes < 0 || d.Duration < 0 {
			return Outcome{}, errors.New("parse wrk summary: negative counts")
		}
		return Outcome{
			Requests:  d.Requests,
			Errors:    d.Connect + d.Read + d.Write,
			Connect:   d.Connect,
			Timeouts:  d.Timeout,
			Non2xx:    d.Status,
			Bytes:     d.Bytes,
			DurationS: d.Duration / 1e6,
			P50Ms:     d.P50 / 1e3,
			P99Ms:     d.P99 / 1e3,
			MaxMs:     d.Max / 1e3,
		}, nil
	}
	return Outcome{}, errors.New("parse wrk summary: no " + strings.TrimSpace(WrkDoneMarker) + " line (did wrk run the sweep's script?)")
}

// WrkScript is a wrk Lua script that sends method, headers and body (or runs the script
// at include first, for a mix), and prints the summary line ParseWrk reads.
func WrkScript(method string, headers []string, body, include string) string {
	var b strings.Builder
	if include != "" {
		fmt.Fprintf(&b, "dofile(%q)\n", include)
	} else {
		fmt.Fprintf(&b, "wrk.method = %q\n", method)
		if body != "" {
			fmt.Fprintf(&b, "wrk.body = %q\n", body)
		}
		for _, h := range headers {
			k, v, ok := strings.Cut(h, ":")
			if ok {
				fmt.Fprintf(&b, "wrk.headers[%q] = %q\n", strings.TrimSpace(k), strings.TrimSpace(v))
			}
		}
	}
	b.WriteString(`function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('` + WrkDoneMarker + `{"requests":%d,"bytes":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"p50_us":%d,"p99_us":%d,"max_us":%d}\n',
    summary.requests, summary.bytes, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
`)
	return b.String()
}
