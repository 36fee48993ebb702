// Package genhealth says whether a load generator kept up with its own schedule: the
// verdict `generator: ok` or `generator: SATURATED (signal, value)` that every report of
// bench/autocannon (plain runs, `users`, `merge`) and of cmd/ceiling carries, so that a
// figure measured by a generator that ran out first is never taken for the server's.
//
// A Monitor measures, per second (a window):
//
//   - send lag: how late the generator sent a request, against when it meant to (the
//     journey: when the user's think timer was due; internal/loadgen: when the loop could
//     first have sent it); p99 and max;
//   - a hiccup probe, jHiccup's idea: a goroutine asks to wake every millisecond and
//     records how late it woke; whatever stalls the whole process (CPU starvation, a
//     cgroup's throttling, kernel time in connect(), a stop-the-world pause) shows here
//     whatever the generator was doing;
//   - the process's own CPU (getrusage) as a share of the CPUs it may use: the fewest of
//     its affinity mask, GOMAXPROCS and its cgroup's quota (internal/cpuquota);
//   - connect time, p99.
//
// Judge turns the windows into a Verdict: the first window in which a signal crosses its
// threshold names the signal and its value, and a run with such a window is invalid.
// The thresholds' defaults were chosen by measurement (docs/bench.md, "The generator's
// verdict"): healthy runs on this project's 2-core machine never reached them, runs
// starved on purpose (a cgroup at 10 % of a core) always did.
//
// Non-goals: saying why the server was slow; coordinating several processes (Merge adds
// up verdicts that each process measured for itself).
package genhealth

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Signals a verdict can name.
const (
	SignalSendLag = "send lag p99"
	SignalHiccup  = "hiccup p99"
	SignalCPU     = "CPU"
	SignalConnect = "connect p99"
)

// Thresholds trip the verdict. The zero value means the defaults documented per field.
type Thresholds struct {
	// SendLagP99: a window whose send lag p99 reaches it is saturated. Default 100 ms.
	SendLagP99 time.Duration `json:"send_lag_p99_ns"`
	// HiccupP99: a window whose hiccup p99 reaches it. Default 50 ms.
	HiccupP99 time.Duration `json:"hiccup_p99_ns"`
	// CPUShare: a window in which the process used at least this share of the CPUs it
	// may use. Default 0.95.
	CPUShare float64 `json:"cpu_share"`
	// ConnectP99: a window whose connect p99 reaches it; judged only where Judge is told
	// the connect times are the generator's own work. Default 5 ms.
	ConnectP99 time.Duration `json:"connect_p99_ns"`
	// MinLate is the fewest sends (or connects) at or past their threshold that a window
	// needs for its p99 to count: in a quiet second the p99 is one stray sample, while a
	// stalled generator, which sends little, sends all of it late. Default 5.
	MinLate int64 `json:"min_late"`
}

// Default thresholds (see Thresholds), chosen between the worst second of healthy runs
// and the mildest of starved ones on this project's 2-core machine (docs/bench.md, "The
// generator's verdict"): healthy, the generator alone on its core, hiccup p99 at most
// 20.5 ms, send lag p99 41 ms, CPU 0.91 of its core, connect() p99 0.11 ms in 29 of 30
// runs; starved (a cgroup at 10 % of a core), CPU 1.00 to 1.08 of its quota in every one
// of 30 runs, hiccup p99 up to 164 ms.
const (
	DefaultSendLagP99 = 100 * time.Millisecond
	DefaultHiccupP99  = 50 * time.Millisecond
	DefaultCPUShare   = 0.95
	DefaultConnectP99 = 5 * time.Millisecond
	DefaultMinLate    = 5
)

// WithDefaults fills the zero fields.
func (t Thresholds) WithDefaults() Thresholds {
	if t.SendLagP99 <= 0 {
		t.SendLagP99 = DefaultSendLagP99
	}
	if t.HiccupP99 <= 0 {
		t.HiccupP99 = DefaultHiccupP99
	}
	if t.CPUShare <= 0 {
		t.CPUShare = DefaultCPUShare
	}
	if t.ConnectP99 <= 0 {
		t.ConnectP99 = DefaultConnectP99
	}
	if t.MinLate <= 0 {
		t.MinLate = DefaultMinLate
	}
	return t
}

// Window is one second's measurements. Times are in milliseconds.
type Window struct {
	T            float64 `json:"t"` // seconds from the start to the window's end
	Sends        int64   `json:"sends"`
	SendsLate    int64   `json:"sends_late"` // at or past the send lag threshold
	SendLagP99   float64 `json:"send_lag_p99_ms"`
	SendLagMax   float64 `json:"send_lag_max_ms"`
	HiccupP99    float64 `json:"hiccup_p99_ms"`
	HiccupMax    float64 `json:"hiccup_max_ms"`
	CPUShare     float64 `json:"cpu_share"`
	Connects     int64   `json:"connects"`
	ConnectsLate int64   `json:"connects_late"` // at or past the connect threshold
	ConnectP99   float64 `json:"connect_p99_ms"`
}

// Verdict is a run's judgement of its generator.
type Verdict struct {
	// Saturated: some window crossed a threshold, and the run is invalid.
	Saturated bool `json:"saturated"`
	// Signal, Value and At name the first such window's signal, its value (ms, or a
	// share for CPU) and the window's end (seconds from the start).
	Signal string  `json:"signal,omitempty"`
	Value  float64 `json:"value,omitempty"`
	At     float64 `json:"at_s,omitempty"`
	// Windows is how many windows were judged; 0 means nothing was measured.
	Windows int `json:"windows"`
	// Peak holds each signal's worst window (T unused), so that an ok run shows its margin.
	Peak Window `json:"peak"`
	// CPUs is what the CPU share was taken of.
	CPUs       float64    `json:"cpus"`
	Thresholds Thresholds `json:"thresholds"`
	// Parts is how many generator processes' verdicts Merge added up (0 or 1: one).
	Parts int `json:"parts,omitempty"`
	// PerSecond are the windows (of one process; Merge keeps each second's worst).
	PerSecond []Window `json:"per_second,omitempty"`
}

// Judge judges windows against t (zero fields: the defaults). judgeConnect says whether the
// connect times are the generator's own work (the connect() call itself) rather than a
// whole dial, whose wait for the server's accept queue is the server's.
func Judge(ws []Window, t Thresholds, judgeConnect bool) Verdict {
	t = t.WithDefaults()
	v := Verdict{Windows: len(ws), Thresholds: t, PerSecond: ws}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, w := range ws {
		v.Peak = worst(v.Peak, w)
		if v.Saturated {
			continue
		}
		sig, val := "", 0.0
		switch {
		case w.HiccupP99 >= ms(t.HiccupP99):
			sig, val = SignalHiccup, w.HiccupP99
		case w.SendsLate >= t.MinLate && w.SendLagP99 >= ms(t.SendLagP99):
			sig, val = SignalSendLag, w.SendLagP99
		case w.CPUShare >= t.CPUShare:
			sig, val = SignalCPU, w.CPUShare
		case judgeConnect && w.ConnectsLate >= t.MinLate && w.ConnectP99 >= ms(t.ConnectP99):
			sig, val = SignalConnect, w.ConnectP99
		}
		if sig != "" {
			v.Saturated, v.Signal, v.Value, v.At = true, sig, val, w.T
		}
	}
	return v
}

// worst keeps each signal's larger value (and the larger counts).
func worst(a, b Window) Window {
	return Window{
		T:            max(a.T, b.T),
		Sends:        max(a.Sends, b.Sends),
		SendsLate:    max(a.SendsLate, b.SendsLate),
		SendLagP99:   max(a.SendLagP99, b.SendLagP99),
		SendLagMax:   max(a.SendLagMax, b.SendLagMax),
		HiccupP99:    max(a.HiccupP99, b.HiccupP99),
		HiccupMax:    max(a.HiccupMax, b.HiccupMax),
		CPUShare:     max(a.CPUShare, b.CPUShare),
		Connects:     max(a.Connects, b.Connects),
		ConnectsLate: max(a.ConnectsLate, b.ConnectsLate),
		ConnectP99:   max(a.ConnectP99, b.ConnectP99),
	}
}

// Merge adds up the verdicts of the processes (or hosts) of one run: saturated if any part
// was, naming the part that tripped first; peaks are the parts' worst; each second's window
// is the parts' worst in that second (their windows count from one agreed start).
func Merge(vs ...Verdict) Verdict {
	var m Verdict
	for i, v := range vs {
		if i == 0 {
			m.Thresholds, m.CPUs = v.Thresholds, v.CPUs
		}
		m.Parts += max(v.Parts, 1)
		m.Windows = max(m.Windows, v.Windows)
		m.CPUs = min(m.CPUs, v.CPUs)
		m.Peak = worst(m.Peak, v.Peak)
		if v.Saturated && (!m.Saturated || v.At < m.At) {
			m.Saturated, m.Signal, m.Value, m.At = true, v.Signal, v.Value, v.At
		}
		for j, w := range v.PerSecond {
			if j < len(m.PerSecond) {
				m.PerSecond[j] = worst(m.PerSecond[j], w)
			} else {
				m.PerSecond = append(m.PerSecond, w)
			}
		}
	}
	return m
}

// String is the report's line: "generator: ok (…peaks…)" or
// "generator: SATURATED (hiccup p99 87.3 ms at 3 s)".
func (v Verdict) String() string {
	switch {
	case v.Saturated:
		return "generator: SATURATED (" + v.Reason() + "): the run is invalid"
	case v.Windows == 0:
		return "generator: not measured"
	}
	p := v.Peak
	return fmt.Sprintf("generator: ok (worst second: hiccup p99 %s, send lag p99 %s, CPU %.0f%% of %s, connect p99 %s)",
		msText(p.HiccupP99), msText(p.SendLagP99), 100*p.CPUShare, coresText(v.CPUs), msText(p.ConnectP99))
}

// Reason is the saturating signal, its value and when: "hiccup p99 87.3 ms at 3 s".
func (v Verdict) Reason() string {
	if !v.Saturated {
		return ""
	}
	val := msText(v.Value)
	if v.Signal == SignalCPU {
		val = fmt.Sprintf("%.0f%% of %s", 100*v.Value, coresText(v.CPUs))
	}
	return fmt.Sprintf("%s %s at %s s", v.Signal, val, trimFloat(v.At))
}

// ParseLine reads what String wrote back, as far as a line can say it: whether the
// generator was saturated and the reason; ok is false for a line that is no verdict.
func ParseLine(s string) (saturated bool, reason string, ok bool) {
	s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "generator:"))
	switch {
	case strings.HasPrefix(s, "SATURATED"):
		r := strings.TrimPrefix(s, "SATURATED")
		if i, j := strings.Index(r, "("), strings.LastIndex(r, ")"); i >= 0 && j > i {
			r = r[i+1 : j]
		}
		return true, strings.TrimSpace(r), true
	case strings.HasPrefix(s, "ok"):
		return false, "", true
	}
	return false, "", false
}

func msText(v float64) string { return fmt.Sprintf("%.1f ms", v) }

func coresText(c float64) string {
	if c == 1 {
		return "1 CPU"
	}
	return trimFloat(c) + " CPUs"
}

func trimFloat(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// ParseThresholds reads "hiccup=50ms,send-lag=100ms,cpu=0.95,connect=5ms,min-late=5" (any
// of the keys, in any order; those left out keep their defaults): a command's -saturation
// flag.
func ParseThresholds(s string) (Thresholds, error) {
	var t Thresholds
	if strings.TrimSpace(s) == "" {
		return t, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return t, fmt.Errorf("parse thresholds: %q: want key=value", kv)
		}
		dur := func(d *time.Duration) error {
			x, err := time.ParseDuration(v)
			if err != nil || x <= 0 {
				return fmt.Errorf("parse thresholds: %s=%q: want a positive duration such as 20ms", k, v)
			}
			*d = x
			return nil
		}
		var err error
		switch k {
		case "hiccup":
			err = dur(&t.HiccupP99)
		case "send-lag":
			err = dur(&t.SendLagP99)
		case "connect":
			err = dur(&t.ConnectP99)
		case "cpu":
			f, perr := strconv.ParseFloat(v, 64)
			if perr != nil || f <= 0 || math.IsInf(f, 0) || math.IsNaN(f) {
				err = fmt.Errorf("parse thresholds: cpu=%q: want a positive share such as 0.95", v)
			}
			t.CPUShare = f
		case "min-late":
			n, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil || n <= 0 {
				err = fmt.Errorf("parse thresholds: min-late=%q: want a positive count", v)
			}
			t.MinLate = n
		default:
			err = fmt.Errorf("parse thresholds: unknown key %q (hiccup, send-lag, cpu, connect, min-late)", k)
		}
		if err != nil {
			return Thresholds{}, err
		}
	}
	return t, nil
}

// String writes t as ParseThresholds reads it, the set fields only ("" for none).
func (t Thresholds) String() string {
	var f []string
	add := func(k string, d time.Duration) {
		if d > 0 {
			f = append(f, k+"="+d.String())
		}
	}
	add("hiccup", t.HiccupP99)
	add("send-lag", t.SendLagP99)
	if t.CPUShare > 0 {
		f = append(f, "cpu="+strconv.FormatFloat(t.CPUShare, 'g', -1, 64))
	}
	add("connect", t.ConnectP99)
	if t.MinLate > 0 {
		f = append(f, "min-late="+strconv.FormatInt(t.MinLate, 10))
	}
	return strings.Join(f, ",")
}
