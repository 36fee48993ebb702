package histlog

import (
	"bytes"
	"reflect"
	"testing"
	"time"
)

// A long log (60 seconds, two tags: 120 intervals) writes and reads back interval
// by interval, and its per-second counts add up to its total.
func TestRoundTripManyIntervals(t *testing.T) {
	vs := values(60_000)
	in := record(vs, 0, 1, time.UnixMilli(1_796_000_000_500))
	if len(in.Intervals) != 120 {
		t.Fatalf("made %d intervals, want 120", len(in.Intervals))
	}
	var buf bytes.Buffer
	if err := Write(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Intervals) != len(in.Intervals) {
		t.Fatalf("read %d intervals, want %d", len(out.Intervals), len(in.Intervals))
	}
	for i, w := range in.Intervals {
		g := out.Intervals[i]
		if g.Tag != w.Tag || g.Start != w.Start || g.Length != w.Length || g.Max != w.Hist.Max() ||
			!reflect.DeepEqual(buckets(hist(t, g)), buckets(w.Hist)) {
			t.Fatalf("interval %d: got %s %v+%v max %d, want %s %v+%v max %d (or buckets differ)",
				i, g.Tag, g.Start, g.Length, g.Max, w.Tag, w.Start, w.Length, w.Hist.Max())
		}
	}
	m, err := Merge(out)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, s := range m.Seconds {
		if s.Requests != 1000 {
			t.Errorf("second %v: %d requests, want 1000", s.Start, s.Requests)
		}
		sum += s.Requests
	}
	if len(m.Seconds) != 60 || sum != int64(len(vs)) || m.All.TotalCount() != sum {
		t.Errorf("%d seconds summing to %d, total %d; want 60 summing to %d", len(m.Seconds), sum, m.All.TotalCount(), len(vs))
	}
}

// Two hosts whose logs start 0.3 s apart, each with its own seconds of the same run:
// every second of one overlaps a second of the other, and each merged second is the sum
// of the two intervals it overlaps most, bucket by bucket.
func TestMergeOverlappingSeconds(t *testing.T) {
	base := time.UnixMilli(1_796_000_000_000)
	vs := values(8000)
	a := record(vs, 0, 2, base)
	b := record(vs, 1, 2, base.Add(300*time.Millisecond))
	m, err := Merge(b, a)
	if err != nil {
		t.Fatal(err)
	}
	// One log of all the requests, as one host would have recorded them.
	one, err := Merge(record(vs, 0, 1, base))
	if err != nil {
		t.Fatal(err)
	}
	if !m.Base.Equal(base) || !reflect.DeepEqual(m.Seconds, one.Seconds) {
		t.Errorf("seconds: got %+v, want %+v", m.Seconds, one.Seconds)
	}
	if !reflect.DeepEqual(buckets(m.All), buckets(one.All)) {
		t.Error("merged total: buckets differ from one histogram of the same requests")
	}
	for i, w := range one.Intervals {
		if g := m.Intervals[i]; g.Tag != w.Tag || g.Start != w.Start || !reflect.DeepEqual(buckets(hist(t, g)), buckets(hist(t, w))) {
			t.Errorf("interval %d: differs", i)
		}
	}
	// A log 0.7 s later lands a second on.
	c := record(vs[:1000], 0, 1, base.Add(700*time.Millisecond))
	m, err = Merge(a, c)
	if err != nil {
		t.Fatal(err)
	}
	if m.Seconds[0].Requests != 500 || m.Seconds[1].Requests != 500+1000 {
		t.Errorf("0.7 s later: seconds %+v, want the later log's second 0 in second 1", m.Seconds)
	}
}

// The accumulator adds interval histograms that come late (after it encoded their
// interval) into the right interval, and its intervals add up to everything added.
func TestAccumulator(t *testing.T) {
	vs := values(10_000)
	acc := Accumulator{Length: 100 * time.Millisecond}
	total := New()
	want := make([]int64, 10)
	for i := 0; i < len(vs); i += 100 {
		h := New()
		for _, v := range vs[i : i+100] {
			h.RecordValue(v)
		}
		total.Merge(h)
		n := i / 1000 // ten histograms an interval: ten recorders'
		if i%1000 == 900 && n > 3 {
			n -= 3 // one recorder's, three intervals late: after its interval was encoded
		}
		want[n] += 100
		acc.Add("all", n, h)
	}
	ivs, err := acc.Intervals(950 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(ivs) != 10 {
		t.Fatalf("%d intervals, want 10", len(ivs))
	}
	sum := New()
	for i, iv := range ivs {
		if iv.Start != time.Duration(i)*100*time.Millisecond || iv.Tag != "all" || iv.Count() != want[i] {
			t.Errorf("interval %d: %s at %v, %d values; want all at %v, %d", i, iv.Tag, iv.Start, iv.Count(),
				time.Duration(i)*100*time.Millisecond, want[i])
		}
		sum.Merge(hist(t, iv))
	}
	if ivs[9].Length != 50*time.Millisecond || ivs[0].Length != 100*time.Millisecond {
		t.Errorf("lengths %v … %v; want 100ms, the last cut to 50ms", ivs[0].Length, ivs[9].Length)
	}
	if !reflect.DeepEqual(buckets(sum), buckets(total)) {
		t.Error("the intervals do not add up to every histogram added")
	}
}
