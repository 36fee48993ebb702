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
		// Other work cannot explain away a full link or full server cores: those runs
		// keep their verdict and say what else ran; with neither full it is host-busy.
		{"server cores full beside other work: cpu", with(func(e *Evidence) { e.OtherCores, e.ServerBusyCores = 1, 3.9 }),
			VerdictCPU, "server CPU 390% of 400%; other work 1.00 cores"},
		{"link full beside other work: nic", with(func(e *Evidence) {
			e.OtherCores, e.LinkRateBytesPerS, e.LinkBytesPerS = 1.08, 12.5e6, 12.1e6
		}), VerdictNIC, "link 12.1 MB/s = 97% of 100mbit, server CPU 200% of 400%; other work 1.08 cores"},
		{"neither full beside other work: host-busy", with(func(e *Evidence) {
			e.OtherCores, e.LinkRateBytesPerS, e.LinkBytesPerS = 1.08, 12.5e6, 10e6
		}), VerdictHostBusy, "host busy (other work: 1.08 cores): the run is not the server's alone (server CPU 200% of 400%, generator 50%, link 80% of 100mbit)"},
		// The run of the issue that moved host-busy after cpu and nic (2 cores, 2026-12-07):
		// 1,755 answers/s of ~6.95 KB filled 100 Mbit/s with the server at 3 % of its cores.
		{"static at 100 Mbit/s beside 1.08 cores of other work", Evidence{ServerBusyCores: 0.06, ServerCores: 2, HostIdlePct: 20,
			GenBusyCores: 0.08, GenThreads: 1, Requests: 5265, P99Ms: 26.78, OtherCores: 1.08, LinkCores: 0.5,
			LinkRateBytesPerS: 12.5e6, LinkBytesPerS: 12.4e6},
			VerdictNIC, "link 12.4 MB/s = 99% of 100mbit, server CPU 6% of 200%, link's softirq 0.50 cores; other work 1.08 cores"},
		{"fd beside other work", with(func(e *Evidence) { e.OtherCores, e.ConnectErrors = 0.5, 500 }), VerdictFD, "500 failed connects of 100000 requests; other work 0.50 cores"},
		{"other work under the threshold is not mentioned", with(func(e *Evidence) { e.OtherCores, e.ServerBusyCores = 0.05, 3.9 }), VerdictCPU, "server CPU 390% of 400%"},
		{"host busy before the generator's threads", with(func(e *Evidence) { e.OtherCores, e.GenBusyCores = 0.5, 3.7 }), VerdictHostBusy, "other work: 0.50 cores"},
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

// TestJudgeShapedLink: runs on the emulated NIC at line rate read nic, not host-busy. The
// first three are the 16-core runs of 2026-12-04 (docs/results/16cores-2026-12-04, nic,
// 4 workers): their "other work" (0.26, 0.10 and 0.48 cores) was the link's own softirq
// time, which the host counts under no process; before the link was charged with it they
// read host-busy. The 100 Mbit/s case is the 2-core machine's line rate on that host's
// proportions; the last three keep a real neighbour visible on a shaped link whose link
// was not full, and a full link nic beside one.
func TestJudgeShapedLink(t *testing.T) {
	run := func(bits, rps, lo, srv, gen float64, h HostCPU) Run {
		return Run{Purpose: PurposeNIC, N: 4, ServerCores: 4, HostCores: 16, GenThreads: 8, LinkBitsPerS: bits, RPS: rps,
			Requests: int64(3 * rps), LoBytesPerS: lo, ServerBusyCores: srv, GenBusyCores: gen, Host: h}
	}
	for _, tc := range []struct {
		name string
		r    Run
		want string
	}{
		{"static at 1 Gbit/s", run(1e9, 17518.7, 124876836, 0.243, 0.332, HostCPU{User: 0.9, System: 2, Idle: 94.8, SoftIRQ: 2.3}), VerdictNIC},
		{"heavy at 1 Gbit/s", run(1e9, 3931, 125761402, 0.177, 0.155, HostCPU{User: 1, System: 0.9, Idle: 97.3, SoftIRQ: 0.7}), VerdictNIC},
		{"heavy at 10 Gbit/s", run(10e9, 39320.3, 1251745048, 1.613, 0.865, HostCPU{User: 9.4, System: 5.7, Idle: 81.5, SoftIRQ: 3.4}), VerdictNIC},
		{"static at 10 Gbit/s (was nic already)", run(10e9, 175230.3, 1247625339, 3.16, 4.322, HostCPU{User: 6.2, System: 30.8, Idle: 54.8, SoftIRQ: 8.1}), VerdictNIC},
		{"heavy at 100 Mbit/s", run(100e6, 392, 12.7e6, 0.02, 0.02, HostCPU{User: 0.1, System: 0.1, Idle: 99.7, SoftIRQ: 0.1}), VerdictNIC},
		{"a neighbour beside the link's softirq, the link not full", run(1e9, 2500, 80e6, 0.177, 0.155, HostCPU{User: 4, System: 0.9, Idle: 94.4, SoftIRQ: 0.7}), VerdictHostBusy},
		{"a neighbour beside a full link", run(1e9, 3931, 125761402, 0.177, 0.155, HostCPU{User: 4, System: 0.9, Idle: 94.4, SoftIRQ: 0.7}), VerdictNIC},
		{"unshaped: softirq is not charged to a link", func() Run {
			r := run(0, 3931, 125761402, 0.177, 0.155, HostCPU{User: 1, System: 0.9, Idle: 97.3, SoftIRQ: 0.7})
			r.Purpose = PurposeSweep
			return r
		}(), VerdictHostBusy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ev := Judge(EvidenceOf(tc.r, 0), Thresholds{})
			if got != tc.want {
				t.Errorf("got %s (%s), want %s", got, ev, tc.want)
			}
		})
	}
}
