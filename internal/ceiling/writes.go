// The write path of a cluster run: the workers' write counters (package writepath, in
// `supervisor status -json`) over the run, and the "writes" verdict they support.

package ceiling

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/writepath"
)

// VerdictWrites: the run was bound by the write path (the one write owner's commits, the
// forwarding to it, or the generator's connections parked on writes' latency) while the
// server's cores were not full.
const VerdictWrites = "writes"

// Thresholds of the writes verdict (see judgeWrites).
const (
	// writesParked: writes when the generator's connections spent at least this share of
	// their time waiting on writes (a closed-loop generator holds each connection for its
	// request's whole latency, so by Little's law this share of its concurrency served no
	// request at all).
	writesParked = 0.5
	// writesCommitter: writes when the owner's committer was in a transaction at least
	// this share of the run: one more write can only wait.
	writesCommitter = 0.9
	// writesOwnerCore: writes when the write owner's process used at least this share of
	// a core (a prefork worker has one P: its HTTP share, every commit and the followers'
	// forwarded writes all run there) while the server as a whole was not busy.
	writesOwnerCore = 0.9
)

// WritePath is what the cluster's write path did over a run, from the workers' counters
// (two `status -json` readings around it; the supervisor polls each worker once a second,
// so shares and rates are taken over the counters' own window, requests counted by the
// workers in the same readings, not over the generator's seconds).
type WritePath struct {
	// Writes is how many writes the workers' requests made in the window, WriteShare
	// their share of its requests, WritesPerS their rate at the run's req/s.
	Writes     uint64  `json:"writes"`
	WriteShare float64 `json:"write_share"`
	WritesPerS float64 `json:"writes_per_s"`
	// WriteMeanMs and WriteP99Ms: a write's latency in the worker (store call to
	// result: forwarding, the owner's queue, the commit).
	WriteMeanMs float64 `json:"write_mean_ms"`
	WriteP99Ms  float64 `json:"write_p99_ms"`
	// Parked: the share of the generator's connection time spent waiting on writes
	// (writes/s × mean write latency / connections; Little's law).
	Parked float64 `json:"parked"`
	// Commits in the window, their rate, the mean writes per commit and the largest
	// commit since the owner started.
	Commits      uint64  `json:"commits"`
	CommitsPerS  float64 `json:"commits_per_s"`
	MeanBatch    float64 `json:"mean_batch"`
	LargestBatch int64   `json:"largest_batch"`
	// CommitterBusy: the busiest committer's time in transactions per second of the
	// window (the owner's; 1 = committing all the time). CommitMeanMs: one commit's time.
	CommitterBusy float64 `json:"committer_busy"`
	CommitMeanMs  float64 `json:"commit_mean_ms"`
	// QueueMeanMs and QueueP99Ms: a write's time from its arrival at the committer to its
	// COMMIT done (the commit window, the batch before it, its own commit).
	QueueMeanMs float64 `json:"queue_mean_ms"`
	QueueP99Ms  float64 `json:"queue_p99_ms"`
	// ForwardMeanMs: a follower's round trip to the owner, mean; Forwards, how many.
	Forwards      uint64  `json:"forwards"`
	ForwardMeanMs float64 `json:"forward_mean_ms"`
	// Checkpoints in the window, and their time per second of it (all workers').
	Checkpoints    uint64  `json:"checkpoints"`
	CheckpointBusy float64 `json:"checkpoint_busy"`
	// OwnerCores: the write owner's CPU seconds per second of the window (its whole
	// process: HTTP, commits, forwarded writes, checkpoints); 0 when no worker said it owns.
	OwnerCores float64 `json:"owner_cores"`
}

// writePathIn is the write-path counters in w's report (the feed worker's
// writepath.Report), nil when it reports none or something else.
func writePathIn(w control.Worker) *writepath.Counters {
	var r writepath.Report
	if len(w.Report) == 0 || json.Unmarshal(w.Report, &r) != nil {
		return nil
	}
	return r.WritePath
}

// writePathOf sums the workers' write counters between two status readings; nil when no
// worker reports them. rps and conns are the run's (the generator's).
func writePathOf(before, after control.Status, rps float64, conns int) *WritePath {
	var sum writepath.Counters
	var requests uint64
	busiest := uint64(0)
	ownerCPU := 0.0
	found := false
	for _, w := range after.Workers {
		wp := writePathIn(w)
		if wp == nil {
			continue
		}
		var b writepath.Counters
		var breq uint64
		bcpu := -1.0
		for _, x := range before.Workers {
			if x.ID != w.ID || x.PID != w.PID {
				continue
			}
			if xp := writePathIn(x); xp != nil { // decoded for its own worker only
				b, breq, bcpu = *xp, x.Requests, x.CPUSeconds
			}
		}
		if w.Role == "owner" && bcpu >= 0 && bcpu <= w.CPUSeconds {
			ownerCPU = w.CPUSeconds - bcpu
		}
		d := wp.Sub(b)
		if breq <= w.Requests {
			requests += w.Requests - breq
		}
		busiest = max(busiest, d.CommitNs)
		sum = sum.Add(d)
		found = true
	}
	if !found {
		return nil
	}
	wp := &WritePath{Writes: sum.Writes, Commits: sum.Commits, LargestBatch: sum.LargestBatch,
		Forwards: sum.Forwards, Checkpoints: sum.Checkpoints}
	ms := func(ns, n uint64) float64 {
		if n == 0 {
			return 0
		}
		return round(float64(ns)/float64(n)/1e6, 3)
	}
	wp.WriteMeanMs = ms(sum.WriteNs, sum.Writes)
	wp.WriteP99Ms = round(float64(writepath.Quantile(sum.WriteHist, 0.99))/float64(time.Millisecond), 3)
	wp.QueueMeanMs = ms(sum.QueueNs, sum.Committed)
	wp.QueueP99Ms = round(float64(writepath.Quantile(sum.QueueHist, 0.99))/float64(time.Millisecond), 3)
	wp.CommitMeanMs = ms(sum.CommitNs, sum.Commits)
	wp.ForwardMeanMs = ms(sum.ForwardNs, sum.Forwards)
	if sum.Commits > 0 {
		wp.MeanBatch = round(float64(sum.Committed)/float64(sum.Commits), 2)
	}
	if requests > 0 && rps > 0 {
		window := float64(requests) / rps // seconds the counters' window held at the run's rate
		wp.WriteShare = round(float64(sum.Writes)/float64(requests), 4)
		wp.WritesPerS = round(float64(sum.Writes)/window, 1)
		wp.CommitsPerS = round(float64(sum.Commits)/window, 1)
		wp.CommitterBusy = round(float64(busiest)/1e9/window, 3)
		wp.CheckpointBusy = round(float64(sum.CheckpointNs)/1e9/window, 3)
		wp.OwnerCores = round(ownerCPU/window, 3)
		if conns > 0 {
			wp.Parked = round(float64(sum.WriteNs)/1e9/window/float64(conns), 3)
		}
	}
	return wp
}

// judgeWrites returns the writes verdict and its evidence when the write path bounded the
// run: the generator's connections were mostly parked on writes (writesParked), the
// owner's committer never rested (writesCommitter), or the owner's process filled its core
// (writesOwnerCore). cpu is Judge's server CPU text. It runs
// after the cpu, nic and generator checks: a run whose cores are full is cpu even when its
// writes wait too.
func judgeWrites(e Evidence, cpu string) (verdict, evidence string) {
	w := e.WritePath
	if !e.Writes || w == nil || w.Writes == 0 {
		return "", ""
	}
	var why string
	switch {
	case w.Parked >= writesParked:
		why = fmt.Sprintf("connections waited on writes %.0f%% of the time", 100*w.Parked)
	case w.CommitterBusy >= writesCommitter:
		why = fmt.Sprintf("the owner committing %.0f%% of the time", 100*w.CommitterBusy)
	case w.OwnerCores >= writesOwnerCore:
		why = fmt.Sprintf("the write owner's process %.0f%% of a core", 100*w.OwnerCores)
	default:
		return "", ""
	}
	return VerdictWrites, fmt.Sprintf("writes: %s (%.1f%% of requests, %.0f/s, mean %.2f ms, p99 %.1f ms); "+
		"%.0f commits/s, mean batch %.1f (max %d), committer busy %.0f%%, queue mean %.2f ms p99 %.1f ms, forward round trip %.2f ms, "+
		"checkpoints %.0f%% of a core, owner process %.0f%% of a core; %s",
		why, 100*w.WriteShare, w.WritesPerS, w.WriteMeanMs, w.WriteP99Ms,
		w.CommitsPerS, w.MeanBatch, w.LargestBatch, 100*w.CommitterBusy, w.QueueMeanMs, w.QueueP99Ms, w.ForwardMeanMs,
		100*w.CheckpointBusy, 100*w.OwnerCores, cpu)
}
