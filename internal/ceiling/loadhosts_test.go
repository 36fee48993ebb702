package ceiling

import (
	"testing"

	"github.com/onehost/onehost/internal/histlog"
)

// TestMergeOutcomes: a run split over two generators merges into the counts of both and
// the percentiles of one histogram holding every request, not the parts' averaged.
func TestMergeOutcomes(t *testing.T) {
	fast, slow, all := histlog.New(), histlog.New(), histlog.New()
	for i := range 990 { // one host: 1.0-1.99 ms
		fast.RecordValue(int64(1000 + i))
		all.RecordValue(int64(1000 + i))
	}
	for i := range 10 { // the other: 100-109 ms
		slow.RecordValue(int64(100000 + 1000*i))
		all.RecordValue(int64(100000 + 1000*i))
	}
	parts := []Outcome{
		{Requests: 990, Errors: 1, Non2xx: 2, Bytes: 9900, DurationS: 2.001, GenThreads: 1, MaxThread: 0.4},
		{Requests: 10, Timeouts: 3, Connect: 1, Bytes: 100, DurationS: 2.003, GenThreads: 1, MaxThread: 0.7,
			Saturated: true, Saturation: "root@h2: hiccup p99 80 ms at 1.0 s"},
	}
	merged, err := histlog.Merge(
		histlog.Log{Intervals: []histlog.Interval{{Tag: "all", Hist: fast}}},
		histlog.Log{Intervals: []histlog.Interval{{Tag: "all", Hist: slow}}})
	if err != nil {
		t.Fatal(err)
	}
	got := MergeOutcomes(parts, merged.All)
	want := Outcome{Requests: 1000, Errors: 1, Connect: 1, Timeouts: 3, Non2xx: 2, Bytes: 10000, DurationS: 2.003,
		P50Ms: float64(all.ValueAtQuantile(50)) / 1e3, P99Ms: float64(all.ValueAtQuantile(99)) / 1e3, MaxMs: float64(all.Max()) / 1e3,
		MaxThread: 0.7, GenThreads: 2, Saturated: true, Saturation: "root@h2: hiccup p99 80 ms at 1.0 s"}
	if got != want {
		t.Errorf("merged\n%+v\nwant\n%+v", got, want)
	}
	// Averaging the parts' p99 (1.98 and 109 ms) would say 55 ms; the whole's p99 is the
	// fast host's tail, under 2 ms.
	if got.P99Ms > 2 {
		t.Errorf("p99 %.2f ms: want the merged histogram's (under 2 ms)", got.P99Ms)
	}
}
