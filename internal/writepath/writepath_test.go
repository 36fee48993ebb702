package writepath

import (
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    time.Duration
	}{
		{"zero", 0}, {"under a microsecond", 999 * time.Nanosecond}, {"1 µs", time.Microsecond},
		{"3 µs", 3 * time.Microsecond}, {"100 µs", 100 * time.Microsecond}, {"1 ms", time.Millisecond},
		{"18 ms", 18 * time.Millisecond}, {"1 s", time.Second}, {"an hour", time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := Bucket(tc.d)
			if b < 0 || b >= Buckets {
				t.Fatalf("Bucket(%v) = %d, out of range", tc.d, b)
			}
			up := BucketUpper(b)
			if tc.d >= up && b != Buckets-1 {
				t.Errorf("Bucket(%v) = %d, whose upper bound %v is not above it", tc.d, b, up)
			}
			if b > 0 && tc.d < BucketUpper(b-1) {
				t.Errorf("Bucket(%v) = %d, but it fits bucket %d (upper %v)", tc.d, b, b-1, BucketUpper(b-1))
			}
			if b > 0 && b < Buckets-1 && float64(up) > 1.26*float64(max(tc.d, time.Microsecond)) {
				t.Errorf("Bucket(%v): upper bound %v more than 26%% above", tc.d, up)
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	var h Hist
	for range 98 {
		h.Add(100 * time.Microsecond)
	}
	h.Add(20 * time.Millisecond)
	h.Add(20 * time.Millisecond)
	s := h.Snapshot()
	if got := Quantile(s, 0.5); got < 100*time.Microsecond || got > 125*time.Microsecond {
		t.Errorf("p50 = %v, want about 100µs", got)
	}
	if got := Quantile(s, 0.99); got < 20*time.Millisecond || got > 25*time.Millisecond {
		t.Errorf("p99 = %v, want about 20ms", got)
	}
	if got := Quantile(nil, 0.99); got != 0 {
		t.Errorf("p99 of nothing = %v, want 0", got)
	}
}

func TestSubAdd(t *testing.T) {
	var r Recorder
	r.Write(Now()-int64(2*time.Millisecond), true)
	before := r.Snapshot()
	began := Now() - int64(time.Millisecond)
	done := r.Commit(began, 3)
	for range 3 {
		r.Queued(began, done)
	}
	r.Write(Now()-int64(4*time.Millisecond), false)
	r.Checkpoint(Now())
	d := r.Snapshot().Sub(before)
	if d.Writes != 1 || d.Forwards != 0 || d.Commits != 1 || d.Committed != 3 || d.LargestBatch != 3 || d.Checkpoints != 1 {
		t.Errorf("delta %+v: want 1 write, 0 forwards, 1 commit of 3, 1 checkpoint", d)
	}
	if d.WriteNs < uint64(4*time.Millisecond) || d.CommitNs < uint64(time.Millisecond) || d.QueueNs < 3*uint64(time.Millisecond) {
		t.Errorf("delta times %+v: too small", d)
	}
	if got := Quantile(d.WriteHist, 1); got < 4*time.Millisecond {
		t.Errorf("the delta's histogram holds %v, want the 4 ms write alone", got)
	}
	sum := d.Add(before)
	if sum.Writes != 2 || sum.Forwards != 1 || len(sum.WriteHist) < len(d.WriteHist) {
		t.Errorf("sum %+v: want 2 writes, 1 forward", sum)
	}
	// A process that restarted: its counters went down; the later reading counts whole.
	if got := before.Sub(r.Snapshot()); got.Writes != before.Writes {
		t.Errorf("a counter that went down: %d writes, want %d", got.Writes, before.Writes)
	}
}

// TestRecorderAllocs: the hot path (every write, every commit) allocates nothing.
func TestRecorderAllocs(t *testing.T) {
	var r Recorder
	if n := testing.AllocsPerRun(100, func() {
		start := Now()
		r.Write(start, true)
		r.Queued(start, r.Commit(start, 8))
	}); n != 0 {
		t.Errorf("%v allocations per write, want 0", n)
	}
}
