package loadgen

import (
	"bytes"
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/onehost/onehost/internal/histlog"
)

// runRecorded is a run whose every latency is also recorded, as it is recorded, into one
// histogram shared with other runs (rec, under mu).
func runRecorded(t *testing.T, cfg Config, mu *sync.Mutex, rec *hdrhistogram.Histogram) *Result {
	t.Helper()
	e, err := newEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.onRecord = func(us int64) {
		mu.Lock()
		rec.RecordValue(us)
		mu.Unlock()
	}
	res, err := e.start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func nonZero(h *hdrhistogram.Histogram) []hdrhistogram.Bar {
	var out []hdrhistogram.Bar
	for _, b := range h.Distribution() {
		if b.Count != 0 {
			out = append(out, b)
		}
	}
	return out
}

// A run's intervals are consecutive, each IntervalLength long but the last (cut at the
// run's end), and add up, bucket by bucket, to Latency and to every latency the loops
// recorded.
func TestIntervals(t *testing.T) {
	s := newTestServer(t, func(int64, int64) reply { return ok })
	var mu sync.Mutex
	rec := newHistogram()
	res := runRecorded(t, Config{URL: s.URL, Connections: 6, Workers: 3, Duration: 800 * time.Millisecond,
		IntervalLength: 100 * time.Millisecond, SampleInterval: 50 * time.Millisecond}, &mu, rec)
	if len(res.Intervals) < 2 {
		t.Fatalf("%d intervals in a run of %v, want several", len(res.Intervals), res.Duration())
	}
	sum := newHistogram()
	last := -time.Nanosecond
	for i, iv := range res.Intervals {
		if iv.Tag != "all" || iv.Start <= last || iv.Start%(100*time.Millisecond) != 0 ||
			iv.Length <= 0 || iv.Length > 100*time.Millisecond || (iv.Length != 100*time.Millisecond && i != len(res.Intervals)-1) {
			t.Errorf("interval %d: %q at %v, %v long", i, iv.Tag, iv.Start, iv.Length)
		}
		last = iv.Start
		h, err := iv.Histogram()
		if err != nil {
			t.Fatal(err)
		}
		sum.Merge(h)
	}
	if sum.TotalCount() != res.Responses || res.Latency.TotalCount() != res.Responses || res.Responses == 0 {
		t.Errorf("intervals hold %d, Latency %d, responses %d: want all equal, not 0",
			sum.TotalCount(), res.Latency.TotalCount(), res.Responses)
	}
	if !reflect.DeepEqual(nonZero(sum), nonZero(rec)) || !reflect.DeepEqual(nonZero(res.Latency), nonZero(rec)) {
		t.Error("the intervals or Latency differ from the latencies recorded, bucket by bucket")
	}
}

// Two generators at once against one server, each writing its intervals as an interval
// log: the logs merged equal one histogram of all their requests exactly (bucket counts),
// and their per-second counts add up to it.
func TestTwoRunsMergeToOneHistogram(t *testing.T) {
	s := newTestServer(t, func(int64, int64) reply { return ok })
	var mu sync.Mutex
	rec := newHistogram()
	logs := make([]histlog.Log, 2)
	var responses [2]int64
	var wg sync.WaitGroup
	for i, cfg := range []Config{
		{URL: s.URL, Connections: 3, Duration: 2500 * time.Millisecond},
		{URL: s.URL, Connections: 2, Pipelining: 2, Workers: 2, Duration: 2 * time.Second},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := runRecorded(t, cfg, &mu, rec)
			responses[i] = res.Responses
			var buf bytes.Buffer
			if err := histlog.Write(&buf, histlog.Log{Base: res.Start, Intervals: res.Intervals}); err != nil {
				t.Error(err)
				return
			}
			lg, err := histlog.Read(&buf)
			if err != nil {
				t.Error(err)
			}
			logs[i] = lg
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	m, err := histlog.Merge(logs...)
	if err != nil {
		t.Fatal(err)
	}
	// The server may have answered a few more: requests in flight when the runs ended.
	if n := responses[0] + responses[1]; m.All.TotalCount() != n || rec.TotalCount() != n || n == 0 || s.requests.Load() < n {
		t.Errorf("merged %d, recorded %d, responses %d, server answered %d: want the first three equal, not 0",
			m.All.TotalCount(), rec.TotalCount(), n, s.requests.Load())
	}
	if !reflect.DeepEqual(nonZero(m.All), nonZero(rec)) {
		t.Error("merged logs differ from one histogram of the same requests, bucket by bucket")
	}
	var perSecond int64
	for _, sec := range m.Seconds {
		perSecond += sec.Requests
	}
	if len(m.Seconds) < 2 || perSecond != m.All.TotalCount() {
		t.Errorf("%d seconds holding %d requests, want several holding all %d", len(m.Seconds), perSecond, m.All.TotalCount())
	}
}
