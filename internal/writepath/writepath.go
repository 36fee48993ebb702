// Package writepath holds the counters of a feed worker's write path: how long its writes
// wait, how its group commits go, what forwarding to the write owner and checkpoints cost.
// The feed store keeps them (Recorder: atomics only, no allocation, a few nanoseconds per
// write), the worker sends a snapshot (Counters, in a Report) to its supervisor with its
// other counters over internal/ipc, the supervisor passes the report on unread in `status
// -json`, and the ceiling sweep subtracts two snapshots to say whether the write path
// bounded a run (the "writes" verdict).
//
// Latencies are kept as sums (for means) and as histograms (for percentiles) with four
// buckets per power of two of microseconds: a percentile read from them is within 19 % of
// the true one, which is enough to tell a 2 ms wait from a 20 ms one, and a histogram is a
// fixed array of counters that two snapshots subtract.
package writepath

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Buckets is the length of a histogram: bucket 0 holds waits under 1 µs, then four buckets
// per power of two of microseconds up to 2^26 µs (67 s); the last one holds the rest.
const Buckets = 1 + 4*26 + 1

// Bucket returns the histogram bucket of d.
func Bucket(d time.Duration) int {
	us := uint64(d / time.Microsecond)
	if us == 0 {
		return 0
	}
	e := bits.Len64(us) - 1 // 2^e <= us < 2^(e+1)
	var sub uint64
	if e >= 2 {
		sub = (us >> (e - 2)) & 3
	} else {
		sub = (us << (2 - e)) & 3
	}
	b := 1 + 4*e + int(sub)
	return min(b, Buckets-1)
}

// BucketUpper is the upper bound of bucket b (what a percentile in it reads as).
func BucketUpper(b int) time.Duration {
	if b <= 0 {
		return time.Microsecond
	}
	if b >= Buckets-1 {
		return time.Duration(math.MaxInt64)
	}
	e, sub := (b-1)/4, (b-1)%4
	// bucket (e, sub) is [2^e·(1+sub/4), 2^e·(1+(sub+1)/4)) µs
	return time.Duration(float64(time.Microsecond) * math.Ldexp(1+float64(sub+1)/4, e))
}

// Hist is a latency histogram, safe for concurrent use.
type Hist struct{ b [Buckets]atomic.Uint64 }

// Add counts one latency.
func (h *Hist) Add(d time.Duration) { h.b[Bucket(d)].Add(1) }

// Snapshot returns the counts with trailing empty buckets left out (nil when empty).
func (h *Hist) Snapshot() []uint64 {
	var out []uint64
	last := -1
	for i := range h.b {
		if h.b[i].Load() != 0 {
			last = i
		}
	}
	if last < 0 {
		return nil
	}
	out = make([]uint64, last+1)
	for i := range out {
		out[i] = h.b[i].Load()
	}
	return out
}

// Quantile returns the upper bound of the bucket that holds the q-th quantile (0 < q <= 1)
// of the counts h, and 0 when h counts nothing.
func Quantile(h []uint64, q float64) time.Duration {
	var n uint64
	for _, c := range h {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for b, c := range h {
		seen += c
		if seen >= rank {
			return BucketUpper(b)
		}
	}
	return BucketUpper(len(h) - 1)
}

// SubHist returns after minus before, bucket by bucket (before may be shorter or nil;
// a bucket that went down, from a restarted process, counts as after's).
func SubHist(after, before []uint64) []uint64 {
	if len(after) == 0 {
		return nil
	}
	out := make([]uint64, len(after))
	for i, c := range after {
		if i < len(before) && before[i] <= c {
			c -= before[i]
		}
		out[i] = c
	}
	return out
}

// AddHist returns a plus b, bucket by bucket.
func AddHist(a, b []uint64) []uint64 {
	if len(b) > len(a) {
		a, b = b, a
	}
	out := append([]uint64(nil), a...)
	for i, c := range b {
		out[i] += c
	}
	return out
}

// Report is what the feed worker says of itself beyond the supervisor's generic counters
// (ipc.Msg.Report, which the supervisor shows as it came in status -json's report): its
// write path. The ceiling sweep decodes it.
type Report struct {
	WritePath *Counters `json:"write_path,omitempty"`
}

// Counters is a snapshot of one process's write path since it started, as the worker
// reports it (JSON in ipc messages and `supervisor status -json`). Times are nanoseconds.
type Counters struct {
	// Writes counts the writes this process's requests made (likes and posts), done by
	// whatever path (forwarded to the owner or committed here); WriteNs is their summed
	// latency, from the store's call to its result, and WriteHist its histogram: what a
	// connection waits for while its write is away.
	Writes    uint64   `json:"writes"`
	WriteNs   uint64   `json:"write_ns"`
	WriteHist []uint64 `json:"write_hist,omitempty"`

	// Forwards counts the writes sent to the write owner (a follower's); ForwardNs, their
	// summed round trip: the owner's queue and commit plus the socket's hops.
	Forwards  uint64 `json:"forwards,omitempty"`
	ForwardNs uint64 `json:"forward_ns,omitempty"`

	// Commits counts the group commits this process ran (the owner's: everyone's writes)
	// and Committed the writes in them; LargestBatch is the most one held since start.
	// CommitNs is the time spent in them, BEGIN to COMMIT done: the committer's busy
	// time. QueueNs sums each committed write's time from its arrival at the committer
	// (a follower's: when the owner read it) to its COMMIT done; QueueHist is its histogram.
	Commits      uint64   `json:"commits"`
	Committed    uint64   `json:"committed"`
	LargestBatch int64    `json:"largest_batch"`
	CommitNs     uint64   `json:"commit_ns"`
	QueueNs      uint64   `json:"queue_ns"`
	QueueHist    []uint64 `json:"queue_hist,omitempty"`

	// Checkpoints counts the WAL checkpoints this process ran (any mode, busy ones
	// included) and CheckpointNs the time they took.
	Checkpoints  uint64 `json:"checkpoints"`
	CheckpointNs uint64 `json:"checkpoint_ns"`
}

// Sub returns c minus before: the counts of the interval between the two snapshots (a
// counter that went down, from a restarted process, counts as c's). LargestBatch is c's.
func (c Counters) Sub(before Counters) Counters {
	d := func(a, b uint64) uint64 {
		if b <= a {
			return a - b
		}
		return a
	}
	return Counters{
		Writes: d(c.Writes, before.Writes), WriteNs: d(c.WriteNs, before.WriteNs), WriteHist: SubHist(c.WriteHist, before.WriteHist),
		Forwards: d(c.Forwards, before.Forwards), ForwardNs: d(c.ForwardNs, before.ForwardNs),
		Commits: d(c.Commits, before.Commits), Committed: d(c.Committed, before.Committed), LargestBatch: c.LargestBatch,
		CommitNs: d(c.CommitNs, before.CommitNs), QueueNs: d(c.QueueNs, before.QueueNs), QueueHist: SubHist(c.QueueHist, before.QueueHist),
		Checkpoints: d(c.Checkpoints, before.Checkpoints), CheckpointNs: d(c.CheckpointNs, before.CheckpointNs),
	}
}

// Add returns the sum of c and o (the processes of a cluster together); LargestBatch is
// the larger.
func (c Counters) Add(o Counters) Counters {
	return Counters{
		Writes: c.Writes + o.Writes, WriteNs: c.WriteNs + o.WriteNs, WriteHist: AddHist(c.WriteHist, o.WriteHist),
		Forwards: c.Forwards + o.Forwards, ForwardNs: c.ForwardNs + o.ForwardNs,
		Commits: c.Commits + o.Commits, Committed: c.Committed + o.Committed, LargestBatch: max(c.LargestBatch, o.LargestBatch),
		CommitNs: c.CommitNs + o.CommitNs, QueueNs: c.QueueNs + o.QueueNs, QueueHist: AddHist(c.QueueHist, o.QueueHist),
		Checkpoints: c.Checkpoints + o.Checkpoints, CheckpointNs: c.CheckpointNs + o.CheckpointNs,
	}
}

// Recorder keeps one process's counters. Its methods are safe for concurrent use and do
// not allocate; the zero value is ready.
type Recorder struct {
	writes, writeNs     atomic.Uint64
	writeHist           Hist
	forwards, forwardNs atomic.Uint64
	commits, committed  atomic.Uint64
	largest             atomic.Int64
	commitNs, queueNs   atomic.Uint64
	queueHist           Hist
	checkpoints, ckptNs atomic.Uint64
}

// epoch is the base of Now: a monotonic clock reading as one integer.
var epoch = time.Now()

// Now is a monotonic timestamp for the Recorder's durations (nanoseconds since the
// process's start of this package).
func Now() int64 { return int64(time.Since(epoch)) }

// Write records one write that took from start (a Now) to now; forwarded says it went to
// the write owner.
func (r *Recorder) Write(start int64, forwarded bool) {
	d := Now() - start
	r.writes.Add(1)
	r.writeNs.Add(uint64(d))
	r.writeHist.Add(time.Duration(d))
	if forwarded {
		r.forwards.Add(1)
		r.forwardNs.Add(uint64(d))
	}
}

// Commit records a group commit of n writes that ran from start to now, and returns now.
func (r *Recorder) Commit(start int64, n int) int64 {
	now := Now()
	r.commits.Add(1)
	r.committed.Add(uint64(n))
	r.commitNs.Add(uint64(now - start))
	if int64(n) > r.largest.Load() {
		r.largest.Store(int64(n))
	}
	return now
}

// Queued records a committed write that arrived at arrived and was done at done.
func (r *Recorder) Queued(arrived, done int64) {
	d := done - arrived
	r.queueNs.Add(uint64(d))
	r.queueHist.Add(time.Duration(d))
}

// Checkpoint records a checkpoint that ran from start to now.
func (r *Recorder) Checkpoint(start int64) {
	r.checkpoints.Add(1)
	r.ckptNs.Add(uint64(Now() - start))
}

// Snapshot returns the counters so far.
func (r *Recorder) Snapshot() Counters {
	return Counters{
		Writes: r.writes.Load(), WriteNs: r.writeNs.Load(), WriteHist: r.writeHist.Snapshot(),
		Forwards: r.forwards.Load(), ForwardNs: r.forwardNs.Load(),
		Commits: r.commits.Load(), Committed: r.committed.Load(), LargestBatch: r.largest.Load(),
		CommitNs: r.commitNs.Load(), QueueNs: r.queueNs.Load(), QueueHist: r.queueHist.Snapshot(),
		Checkpoints: r.checkpoints.Load(), CheckpointNs: r.ckptNs.Load(),
	}
}
