package ceiling

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/writepath"
)

// TestJudgeWrites: the mix's runs, judged with the workers' write counters. The figures
// are shaped on the 16-core runs of docs/ceiling.md ("The mix's ceiling: the write path").
func TestJudgeWrites(t *testing.T) {
	// The mix at 12 workers with half its cores idle: the generator's connections spend
	// most of their time waiting for writes.
	parked := &WritePath{Writes: 50000, WriteShare: 0.079, WritesPerS: 10000, WriteMeanMs: 9, WriteP99Ms: 24,
		Parked: 0.94, Commits: 3000, CommitsPerS: 600, MeanBatch: 16.7, LargestBatch: 128, CommitterBusy: 0.4,
		CommitMeanMs: 0.7, QueueMeanMs: 2.1, QueueP99Ms: 12, ForwardMeanMs: 9.5, CheckpointBusy: 0.3, OwnerCores: 0.7}
	mix := Evidence{ServerBusyCores: 6.75, ServerCores: 12, HostIdlePct: 40, GenBusyCores: 1.5, GenThreads: 4,
		Requests: 600000, Writes: true, P99Ms: 25, BaselineP99Ms: 2.8, WritePath: parked}
	with := func(f func(*Evidence)) Evidence {
		e := mix
		wp := *mix.WritePath
		e.WritePath = &wp
		f(&e)
		return e
	}
	for _, tc := range []struct {
		name         string
		e            Evidence
		want         string
		wantEvidence string
	}{
		{"write-bound: connections parked on writes", mix, VerdictWrites,
			"writes: connections waited on writes 94% of the time (7.9% of requests, 10000/s, mean 9.00 ms, p99 24.0 ms); 600 commits/s, mean batch 16.7 (max 128), committer busy 40%, queue mean 2.10 ms p99 12.0 ms, forward round trip 9.50 ms"},
		{"write-bound: the committer never rests", with(func(e *Evidence) { e.WritePath.Parked, e.WritePath.CommitterBusy = 0.2, 0.95 }),
			VerdictWrites, "the owner committing 95% of the time"},
		{"write-bound: the owner's core full", with(func(e *Evidence) { e.WritePath.Parked, e.WritePath.OwnerCores = 0.2, 0.97 }),
			VerdictWrites, "the write owner's process 97% of a core"},
		{"cpu-bound mix: cpu, whatever the writes", with(func(e *Evidence) { e.ServerBusyCores = 11.5 }), VerdictCPU, "server CPU 1150% of 1200%"},
		{"generator-bound: generator", with(func(e *Evidence) { e.GenMaxThread = 0.97 }), VerdictGenerator, "busiest thread 97%"},
		{"generator saturated: generator", with(func(e *Evidence) { e.GenSaturated, e.GenReason = true, "x" }), VerdictGenerator, "SATURATED"},
		{"shared cores full: cpu", with(func(e *Evidence) { e.Shared, e.HostIdlePct = true, 2 }), VerdictCPU, "shared cores: host 98% busy"},
		{"writes flowing freely: as before (sqlite by p99)", with(func(e *Evidence) { e.WritePath.Parked = 0.2 }),
			VerdictSQLite, "p99 rose"},
		{"writes flowing freely, p99 flat: unclear", with(func(e *Evidence) { e.WritePath.Parked, e.P99Ms = 0.2, 3 }), VerdictUnclear, ""},
		{"no counters (older results): as before", with(func(e *Evidence) { e.WritePath = nil; e.P99Ms = 3 }), VerdictUnclear, ""},
		{"a read workload is never writes", with(func(e *Evidence) { e.Writes = false; e.P99Ms = 3 }), VerdictUnclear, ""},
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

// TestWritePathOf: two status readings of a 2-worker cluster (an owner and a follower)
// around a run, summed into the run's write path.
func TestWritePathOf(t *testing.T) {
	// worker is a status row as the supervisor passes the feed worker's report on.
	worker := func(id, pid int, requests uint64, role string, cpu float64, wp *writepath.Counters) control.Worker {
		report, err := json.Marshal(writepath.Report{WritePath: wp})
		if err != nil {
			t.Fatal(err)
		}
		return control.Worker{ID: id, PID: pid, Requests: requests, Role: role, CPUSeconds: cpu, Report: report}
	}
	ms := func(n float64) uint64 { return uint64(n * float64(time.Millisecond)) }
	hist := func(d time.Duration, n uint64) []uint64 {
		h := make([]uint64, writepath.Bucket(d)+1)
		h[len(h)-1] = n
		return h
	}
	before := control.Status{Workers: []control.Worker{
		worker(0, 10, 1000, "owner", 5, &writepath.Counters{Writes: 80, Commits: 10, Committed: 160}),
		worker(1, 11, 1000, "follower", 4, &writepath.Counters{Writes: 80, Forwards: 80}),
	}}
	// 20,000 requests in the window at 10,000 req/s: 2 s. 1,600 writes, 800 each; the
	// owner committed all of them in 200 commits of 8.
	after := control.Status{Workers: []control.Worker{
		worker(0, 10, 11000, "owner", 6.8, &writepath.Counters{
			Writes: 880, WriteNs: ms(800 * 2), WriteHist: hist(2*time.Millisecond, 800),
			Commits: 210, Committed: 1760, LargestBatch: 16, CommitNs: ms(200 * 0.5),
			QueueNs: ms(1600 * 1.5), QueueHist: hist(1500*time.Microsecond, 1600), Checkpoints: 8, CheckpointNs: ms(8 * 10)}),
		worker(1, 11, 11000, "follower", 5, &writepath.Counters{
			Writes: 880, WriteNs: ms(800 * 6), WriteHist: hist(6*time.Millisecond, 800), Forwards: 880, ForwardNs: ms(800 * 6)}),
	}}
	wp := writePathOf(before, after, 10000, 32)
	want := WritePath{Writes: 1600, WriteShare: 0.08, WritesPerS: 800, WriteMeanMs: 4, Parked: 0.1,
		Commits: 200, CommitsPerS: 100, MeanBatch: 8, LargestBatch: 16, CommitterBusy: 0.05, CommitMeanMs: 0.5,
		QueueMeanMs: 1.5, Forwards: 800, ForwardMeanMs: 6, Checkpoints: 8, CheckpointBusy: 0.04, OwnerCores: 0.9}
	got := *wp
	got.WriteP99Ms, got.QueueP99Ms = 0, 0
	if got != want {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if wp.WriteP99Ms < 6 || wp.WriteP99Ms > 7.5 || wp.QueueP99Ms < 1.5 || wp.QueueP99Ms > 1.9 {
		t.Errorf("p99s: write %v ms (want 6 to 7.5), queue %v ms (want 1.5 to 1.9)", wp.WriteP99Ms, wp.QueueP99Ms)
	}
	if got := writePathOf(control.Status{}, control.Status{Workers: []control.Worker{{ID: 0}}}, 1000, 8); got != nil {
		t.Errorf("workers without counters: got %+v, want nil", got)
	}
}
