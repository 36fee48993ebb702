package ceiling

import (
	"strings"
	"testing"
)

func TestJudge(t *testing.T) {
	// A run with nothing exhausted: 4 server cores half busy, an idle host, no link.
	calm := Evidence{ServerBusyCores: 2, ServerCores: 4, HostIdlePct: 50, GenBusyCores: 0.5, GenThreads: 4,
		Requests: 100000, P99Ms: 3}
	with := func(f func(*Evidence)) Evidence { e := calm; f(&e); return e }
	for _, tc := range []struct {
		name         string
		e            Evidence
		want         string
		wantEvidence string
	}{
		{"nothing exhausted", calm, VerdictUnclear, "server CPU 200% of 400%"},
		{"server cores full", with(func(e *Evidence) { e.ServerBusyCores = 3.98 }), VerdictCPU, "server CPU 398% of 400%"},
		{"just below the cpu threshold", with(func(e *Evidence) { e.ServerBusyCores = 3.5 }), VerdictUnclear, "server CPU 350%"},
		{"link full, cpu idle", with(func(e *Evidence) { e.LinkRateBytesPerS = 12.5e6; e.LinkBytesPerS = 12.1e6 }),
			VerdictNIC, "link 12.1 MB/s = 97% of 100mbit, server CPU 200% of 400%"},
		{"link full and cpu full: cpu first", with(func(e *Evidence) {
			e.LinkRateBytesPerS = 12.5e6
			e.LinkBytesPerS = 12.1e6
			e.ServerBusyCores = 3.9
		}), VerdictCPU, "server CPU 390%"},
		{"link at 80%", with(func(e *Evidence) { e.LinkRateBytesPerS = 12.5e6; e.LinkBytesPerS = 10e6 }), VerdictUnclear, "link 80% of 100mbit"},
		{"generator says bound", with(func(e *Evidence) { e.GenBound = true }), VerdictGenerator, "generator says it was bound"},
		{"generator saturated", with(func(e *Evidence) { e.GenSaturated, e.GenReason = true, "hiccup p99 87.0 ms at 3 s" }),
			VerdictGenerator, "generator SATURATED (hiccup p99 87.0 ms at 3 s): the run is invalid (server CPU 200% of 400%)"},
		{"generator saturated before cpu and fd", with(func(e *Evidence) {
			e.GenSaturated, e.GenReason = true, "CPU 99% of 1 CPU at 2 s"
			e.ServerBusyCores, e.ConnectErrors = 4, 500
		}), VerdictGenerator, "generator SATURATED (CPU 99% of 1 CPU at 2 s)"},
		{"generator's busiest thread", with(func(e *Evidence) { e.GenMaxThread = 0.95 }), VerdictGenerator, "busiest thread 95% of a core"},
		{"other work on the host", with(func(e *Evidence) { e.OtherCores = 0.6 }), VerdictHostBusy,
			"host busy (other work: 0.60 cores): the run is not the server's alone (server CPU 200% of 400%, generator 50%)"},
		{"other work under the threshold", with(func(e *Evidence) { e.OtherCores = 0.05 }), VerdictUnclear, ""},
		{"host busy before cpu", with(func(e *Evidence) { e.OtherCores, e.ServerBusyCores = 1, 3.9 }), VerdictHostBusy, "other work: 1.00 cores"},
		{"generator saturated before host busy", with(func(e *Evidence) { e.OtherCores, e.GenSaturated, e.GenReason = 1, true, "x" }), VerdictGenerator, "SATURATED"},
		{"older result: host cores unknown", with(func(e *Evidence) { e.OtherCores = -1 }), VerdictUnclear, ""},
		{"generator threads all busy", with(func(e *Evidence) { e.GenBusyCores = 3.7 }), VerdictGenerator, "generator 370% on 4 threads"},
		{"refused connects", with(func(e *Evidence) { e.ConnectErrors = 500 }), VerdictFD, "500 failed connects of 100000 requests"},
		{"one failed connect in a million", with(func(e *Evidence) { e.ConnectErrors = 1; e.Requests = 1000000 }), VerdictUnclear, ""},
		{"emfile in the log", with(func(e *Evidence) { e.ErrorText = "accept: Too many open files" }), VerdictFD, "too many open files"},
		{"fd before cpu", with(func(e *Evidence) { e.ConnectErrors = 500; e.ServerBusyCores = 4 }), VerdictFD, ""},
		{"host full on shared cores", with(func(e *Evidence) { e.Shared = true; e.HostIdlePct = 3; e.GenBusyCores = 0.8 }),
			VerdictCPU, "shared cores: host 97% busy (server CPU 200% of 400%, generator 80%"},
		{"host full from other processes", with(func(e *Evidence) { e.HostIdlePct = 1 }), VerdictCPU, "host 99% busy"},
		{"writes, idle cores, p99 up 10x", with(func(e *Evidence) { e.Writes = true; e.BaselineP99Ms = 3; e.P99Ms = 30 }),
			VerdictSQLite, "writes; server CPU 200% of 400% while p99 rose 10.0x (3.00 -> 30.00 ms)"},
		{"writes, idle cores, p99 up 2x", with(func(e *Evidence) { e.Writes = true; e.BaselineP99Ms = 3; e.P99Ms = 6 }), VerdictUnclear, ""},
		{"writes, busy cores", with(func(e *Evidence) {
			e.Writes = true
			e.BaselineP99Ms = 3
			e.P99Ms = 30
			e.ServerBusyCores = 3.2
		}), VerdictUnclear, ""},
		{"writes, no baseline, p99 high", with(func(e *Evidence) { e.Writes = true; e.P99Ms = 80 }), VerdictSQLite, "p99 80.0 ms"},
		{"writes, cores full, CPU per request 5x: sqlite", with(func(e *Evidence) {
			e.Writes = true
			e.ServerBusyCores = 4
			e.BaselineCPUUs = 55
			e.CPUUs = 299
		}), VerdictSQLite, "CPU per request 5.4x the smallest N's (55.0 -> 299.0 us)"},
		{"writes, CPU per request 1.5x: cpu", with(func(e *Evidence) {
			e.Writes = true
			e.ServerBusyCores = 4
			e.BaselineCPUUs = 55
			e.CPUUs = 80
		}), VerdictCPU, "server CPU 400% of 400%"},
		{"reads whose CPU per request grew are not sqlite", with(func(e *Evidence) {
			e.ServerBusyCores = 4
			e.BaselineCPUUs = 10
			e.CPUUs = 40
		}), VerdictCPU, ""},
		{"reads with high p99 are not sqlite", with(func(e *Evidence) { e.BaselineP99Ms = 3; e.P99Ms = 80 }), VerdictUnclear, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ev := Judge(tc.e, Thresholds{})
			if got != tc.want {
				t.Errorf("got %s (%s), want %s", got, ev, tc.want)
			}
			if !strings.Contains(ev, tc.wantEvidence) {
				t.Errorf("got evidence %q, want it to contain %q", ev, tc.wantEvidence)
			}
		})
	}
}

func TestJudgeThresholds(t *testing.T) {
	e := Evidence{ServerBusyCores: 3.5, ServerCores: 4, HostIdlePct: 50}
	if got, _ := Judge(e, Thresholds{CPUBusy: 0.85}); got != VerdictCPU {
		t.Errorf("CPUBusy 0.85 at 87.5%%: got %s, want cpu", got)
	}
	if got, _ := Judge(e, Thresholds{}); got != VerdictUnclear {
		t.Errorf("default 0.90 at 87.5%%: got %s, want unclear", got)
	}
}

func TestEvidenceOf(t *testing.T) {
	r := Run{ServerBusyCores: 1.5, ServerCores: 2, SharedCores: true, Host: HostCPU{Idle: 7}, HostCores: 2, LoBytesPerS: 9e6,
		LinkBitsPerS: 100e6, GenBoundFlag: true, GenBusyCores: 0.9, GenThreads: 1, GenMaxThread: 0.9,
		Requests: 10, ConnectErrors: 1, Errors: 2, ErrorText: "x", Writes: true, P99Ms: 4}
	want := Evidence{ServerBusyCores: 1.5, ServerCores: 2, Shared: true, HostIdlePct: 7, OtherCores: 0 /* 1.86 cores busy, less 2.4: clamped */, LinkBytesPerS: 9e6,
		LinkRateBytesPerS: 12.5e6, GenBound: true, GenBusyCores: 0.9, GenThreads: 1, GenMaxThread: 0.9,
		Requests: 10, ConnectErrors: 1, Errors: 2, ErrorText: "x", Writes: true, P99Ms: 4, BaselineP99Ms: 2}
	if got := EvidenceOf(r, 2); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestOtherCores: what the host did besides the server and the generator, from a run's
// figures: busy CPU (not idle, not iowait) over the host's cores, less theirs.
func TestOtherCores(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Run
		want float64
	}{
		{"quiet: the two are all the host did", Run{HostCores: 2, Host: HostCPU{Idle: 30}, ServerBusyCores: 0.9, GenBusyCores: 0.5}, 0},
		{"a hog on a server core half the run", Run{HostCores: 2, Host: HostCPU{Idle: 5, IOWait: 5}, ServerBusyCores: 0.9, GenBusyCores: 0.4}, 0.5},
		{"steal counts as other", Run{HostCores: 4, Host: HostCPU{Idle: 50, Steal: 25}, ServerBusyCores: 1, GenBusyCores: 0.5}, 0.5},
		{"unknown host cores", Run{Host: HostCPU{Idle: 0}, ServerBusyCores: 1}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EvidenceOf(tc.r, 0).OtherCores; got < tc.want-1e-9 || got > tc.want+1e-9 {
				t.Errorf("OtherCores = %v, want %v", got, tc.want)
			}
		})
	}
}
