package genhealth

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/cpuquota"
)

func TestJudge(t *testing.T) {
	calm := Window{T: 1, Sends: 1000, SendsLate: 0, SendLagP99: 1, SendLagMax: 3, HiccupP99: 0.2, HiccupMax: 1, CPUShare: 0.3, Connects: 100, ConnectP99: 0.1}
	with := func(w Window, f func(*Window)) Window { f(&w); return w }
	at := func(w Window, t float64) Window { w.T = t; return w }
	tests := []struct {
		name         string
		ws           []Window
		judgeConnect bool
		wantSat      bool
		wantSignal   string
		wantValue    float64
		wantAt       float64
	}{
		{"nothing measured", nil, false, false, "", 0, 0},
		{"calm", []Window{calm, at(calm, 2)}, true, false, "", 0, 0},
		{"hiccup", []Window{calm, at(with(calm, func(w *Window) { w.HiccupP99 = 87 }), 2)}, false, true, SignalHiccup, 87, 2},
		{"hiccup just under", []Window{with(calm, func(w *Window) { w.HiccupP99 = 49.9 })}, false, false, "", 0, 0},
		{"hiccup at the threshold", []Window{with(calm, func(w *Window) { w.HiccupP99 = 50 })}, false, true, SignalHiccup, 50, 1},
		{"send lag", []Window{with(calm, func(w *Window) { w.SendLagP99, w.SendsLate = 160, 11 })}, false, true, SignalSendLag, 160, 1},
		{"a stalled loop's few sends, all late", []Window{with(calm, func(w *Window) { w.SendLagP99, w.Sends, w.SendsLate = 250, 24, 24 })}, false, true, SignalSendLag, 250, 1},
		{"one stray late send", []Window{with(calm, func(w *Window) { w.SendLagP99, w.Sends, w.SendsLate = 900, 3, 1 })}, false, false, "", 0, 0},
		{"cpu", []Window{with(calm, func(w *Window) { w.CPUShare = 0.99 })}, false, true, SignalCPU, 0.99, 1},
		{"connect judged", []Window{with(calm, func(w *Window) { w.ConnectP99, w.ConnectsLate = 12, 5 })}, true, true, SignalConnect, 12, 1},
		{"connect reported only", []Window{with(calm, func(w *Window) { w.ConnectP99, w.ConnectsLate = 12, 5 })}, false, false, "", 0, 0},
		{"first window names the signal", []Window{
			at(with(calm, func(w *Window) { w.CPUShare = 1 }), 3),
			at(with(calm, func(w *Window) { w.HiccupP99 = 500 }), 4),
		}, false, true, SignalCPU, 1, 3},
		{"hiccup before send lag in one window", []Window{with(calm, func(w *Window) { w.HiccupP99, w.SendLagP99, w.SendsLate = 60, 300, 50 })}, false, true, SignalHiccup, 60, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := Judge(tc.ws, Thresholds{}, tc.judgeConnect)
			if v.Saturated != tc.wantSat || v.Signal != tc.wantSignal || v.Value != tc.wantValue || v.At != tc.wantAt {
				t.Errorf("got saturated %v (%q %v at %v), want %v (%q %v at %v)", v.Saturated, v.Signal, v.Value, v.At,
					tc.wantSat, tc.wantSignal, tc.wantValue, tc.wantAt)
			}
			if v.Windows != len(tc.ws) {
				t.Errorf("got %d windows, want %d", v.Windows, len(tc.ws))
			}
		})
	}
}

func TestVerdictLine(t *testing.T) {
	sat := Verdict{Saturated: true, Signal: SignalHiccup, Value: 87.25, At: 3, Windows: 5, CPUs: 1}
	cpu := Verdict{Saturated: true, Signal: SignalCPU, Value: 0.97, At: 12, Windows: 20, CPUs: 0.1}
	ok := Verdict{Windows: 2, CPUs: 1, Peak: Window{HiccupP99: 0.4, SendLagP99: 1.25, CPUShare: 0.31, ConnectP99: 0.1}}
	tests := []struct {
		name    string
		v       Verdict
		want    string
		wantSat bool
	}{
		{"saturated", sat, "generator: SATURATED (hiccup p99 87.2 ms at 3 s): the run is invalid", true},
		{"cpu", cpu, "generator: SATURATED (CPU 97% of 0.1 CPUs at 12 s): the run is invalid", true},
		{"ok", ok, "generator: ok (worst second: hiccup p99 0.4 ms, send lag p99 1.2 ms, CPU 31% of 1 CPU, connect p99 0.1 ms)", false},
		{"unmeasured", Verdict{}, "generator: not measured", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.v.String()
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			sat, reason, ok := ParseLine(got)
			if tc.v.Windows > 0 && (!ok || sat != tc.wantSat || reason != tc.v.Reason()) {
				t.Errorf("ParseLine(%q) = %v %q %v, want %v %q", got, sat, reason, ok, tc.wantSat, tc.v.Reason())
			}
		})
	}
}

func TestMerge(t *testing.T) {
	a := Verdict{Windows: 2, CPUs: 1, Peak: Window{HiccupP99: 1}, PerSecond: []Window{{T: 1, HiccupP99: 1}, {T: 2, HiccupP99: 0.5}}}
	b := Verdict{Windows: 3, CPUs: 1, Saturated: true, Signal: SignalCPU, Value: 1, At: 3,
		Peak: Window{CPUShare: 1}, PerSecond: []Window{{T: 1, HiccupP99: 0.2}, {T: 2, HiccupP99: 2}, {T: 3, CPUShare: 1}}}
	c := Verdict{Windows: 3, CPUs: 1, Saturated: true, Signal: SignalHiccup, Value: 40, At: 2}
	tests := []struct {
		name       string
		parts      []Verdict
		wantSat    bool
		wantSignal string
		wantParts  int
	}{
		{"all ok", []Verdict{a, a}, false, "", 2},
		{"one saturated", []Verdict{a, b}, true, SignalCPU, 2},
		{"the first to trip", []Verdict{b, c, a}, true, SignalHiccup, 3},
		{"merged again", []Verdict{Merge(a, b), a}, true, SignalCPU, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := Merge(tc.parts...)
			if m.Saturated != tc.wantSat || m.Signal != tc.wantSignal || m.Parts != tc.wantParts {
				t.Errorf("got saturated %v %q of %d parts, want %v %q of %d", m.Saturated, m.Signal, m.Parts, tc.wantSat, tc.wantSignal, tc.wantParts)
			}
		})
	}
	m := Merge(a, b)
	if len(m.PerSecond) != 3 || m.PerSecond[1].HiccupP99 != 2 || m.PerSecond[0].HiccupP99 != 1 || m.Peak.HiccupP99 != 1 || m.Peak.CPUShare != 1 {
		t.Errorf("merged windows %+v, peak %+v: want each second's and each signal's worst", m.PerSecond, m.Peak)
	}
}

func TestBuckets(t *testing.T) {
	prev := -1
	for _, us := range []int64{0, 1, 15, 16, 17, 18, 31, 32, 1000, 1_000_000, 60_000_000, 1 << 36, 1 << 40} {
		i := bucketOf(us)
		if i < prev {
			t.Errorf("bucketOf(%d) = %d, below the previous value's %d", us, i, prev)
		}
		prev = i
		top := bucketTop(i)
		if i < nBuckets-1 && (top < us || float64(top-us) > 0.125*float64(us)+1) {
			t.Errorf("bucketOf(%d) = %d with top %d: want a top at or above the value, within 12.5 %%", us, i, top)
		}
	}
	var r Recorder
	for i := range 1000 {
		r.Record(time.Duration(i) * time.Microsecond)
	}
	r.Record(-time.Second)
	var sum [nBuckets]int64
	maxUs := r.drain(&sum)
	n, p := p99(&sum, msOf(maxUs))
	if n != 1001 || maxUs != 999 || p < 0.98 || p > 0.999 {
		t.Errorf("got %d values, max %d µs, p99 %v ms; want 1001, 999 µs, p99 about 0.99 ms", n, maxUs, p)
	}
	if r.drain(&sum) != 0 || r.counts[bucketOf(500)].Load() != 0 {
		t.Errorf("drain left counts behind")
	}
	var nilRec *Recorder
	nilRec.Record(time.Second) // must not panic
}

// TestMonitorRecords runs a Monitor over an idle second and a half: its windows carry
// every signal that was recorded. An idle process on a busy 2-core machine is not asserted
// to be ok: a neighbour may starve it; the verdict's logic is TestJudge's.
func TestMonitorRecords(t *testing.T) {
	m := Start(Config{Interval: 500 * time.Millisecond, CPUs: 1})
	lag, conn := m.SendLag(), m.Connect()
	for i := range 100 {
		lag.Record(time.Duration(i) * 10 * time.Microsecond)
		conn.Record(50 * time.Microsecond)
	}
	time.Sleep(1300 * time.Millisecond)
	v := m.Stop()
	if v.Windows < 2 || len(v.PerSecond) != v.Windows {
		t.Fatalf("got %d windows (%d kept), want 2 or more", v.Windows, len(v.PerSecond))
	}
	w := v.PerSecond[0]
	if w.Sends != 100 || w.Connects != 100 || w.SendLagMax != 0.99 || w.ConnectP99 < 0.05 || w.ConnectP99 > 0.057 {
		t.Errorf("first window %+v: want the 100 sends (max 0.99 ms) and 100 connects (~0.05 ms)", w)
	}
	if v.PerSecond[1].Sends != 0 {
		t.Errorf("second window %+v: want no sends (the first took them)", v.PerSecond[1])
	}
	if v.Peak.HiccupMax <= 0 {
		t.Errorf("peak %+v: want the probe's lateness recorded", v.Peak)
	}
	if v.CPUs != 1 {
		t.Errorf("CPUs %v, want the configured 1", v.CPUs)
	}
}

// starvedChildEnv marks the test binary re-run as a generator that wants a whole core.
const starvedChildEnv = "GENHEALTH_STARVED_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(starvedChildEnv) != "" {
		starvedChild()
		return
	}
	os.Exit(m.Run())
}

// starvedChild wants a core (a spinning goroutine) for three seconds under a Monitor, and
// prints the verdict as JSON.
func starvedChild() {
	time.Sleep(300 * time.Millisecond) // the parent moves us into the cgroup meanwhile
	mon := Start(Config{})
	stop := time.Now().Add(3 * time.Second)
	for time.Now().Before(stop) {
		for range 1 << 16 {
		}
		runtime.Gosched()
	}
	json.NewEncoder(os.Stdout).Encode(mon.Stop())
}

// TestStarvedByQuota runs a generator that wants a core in a cgroup limited to 10 % of one:
// every run so starved must be flagged. Skipped where no cgroup can be made (not root, no
// delegation).
func TestStarvedByQuota(t *testing.T) {
	q, err := cpuquota.Create(cpuquota.Config{}, fmt.Sprintf("genhealth-test-%d", os.Getpid()), 0.1)
	if err != nil {
		t.Skipf("no cgroup with a CPU quota here (%v): the starved generator is tested by the loops' test hooks", err)
	}
	defer func() {
		for i := 0; i < 50 && q.Remove() != nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	}()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), starvedChildEnv+"=1")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := q.Join(cmd.Process.Pid); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Skipf("cannot join the cgroup: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, out.String())
	}
	var v Verdict
	if err := json.Unmarshal([]byte(out.String()), &v); err != nil {
		t.Fatalf("child's verdict %q: %v", out.String(), err)
	}
	t.Logf("%s; peak %+v", v, v.Peak)
	if !v.Saturated {
		t.Errorf("a generator held to 10 %% of a core: %s, want SATURATED", v)
	}
}

func TestParseThresholds(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Thresholds
		wantErr bool
	}{
		{"empty: defaults", "", Thresholds{}, false},
		{"all", "hiccup=5ms, send-lag=1s,cpu=0.5,connect=2ms,min-late=3",
			Thresholds{HiccupP99: 5 * time.Millisecond, SendLagP99: time.Second, CPUShare: 0.5, ConnectP99: 2 * time.Millisecond, MinLate: 3}, false},
		{"one", "cpu=0.000001", Thresholds{CPUShare: 0.000001}, false},
		{"unknown key", "lag=1ms", Thresholds{}, true},
		{"no value", "hiccup", Thresholds{}, true},
		{"bad duration", "hiccup=fast", Thresholds{}, true},
		{"zero", "connect=0s", Thresholds{}, true},
		{"negative share", "cpu=-1", Thresholds{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseThresholds(tc.in)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("got %+v, %v; want %+v (error %v)", got, err, tc.want, tc.wantErr)
			}
			if again, err := ParseThresholds(got.String()); err != nil || again != got {
				t.Errorf("%q read back as %+v, %v; want %+v", got.String(), again, err, got)
			}
		})
	}
}

func FuzzParseThresholds(f *testing.F) {
	f.Add("hiccup=50ms,send-lag=100ms,cpu=0.95,connect=5ms,min-late=5")
	f.Add("cpu=1e-9")
	f.Fuzz(func(t *testing.T, s string) {
		th, err := ParseThresholds(s)
		if err != nil {
			return
		}
		d := th.WithDefaults()
		if d.HiccupP99 <= 0 || d.SendLagP99 <= 0 || d.ConnectP99 <= 0 || !(d.CPUShare > 0) || d.MinLate <= 0 {
			t.Errorf("ParseThresholds(%q) = %+v: a threshold that is not positive", s, th)
		}
	})
}
