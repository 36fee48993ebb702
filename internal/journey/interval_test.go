package journey

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

func nonZero(h *hdrhistogram.Histogram) []hdrhistogram.Bar {
	var out []hdrhistogram.Bar
	for _, b := range h.Distribution() {
		if b.Count != 0 {
			out = append(out, b)
		}
	}
	return out
}

// checkIntervals checks that r's intervals are per route and per second and add up,
// route by route and bucket by bucket, to the route's hold histogram; it returns how many
// seconds they cover.
func checkIntervals(t *testing.T, r Result) int {
	t.Helper()
	sums := map[string]*hdrhistogram.Histogram{}
	seconds := map[time.Duration]bool{}
	for _, iv := range r.Intervals {
		if _, ok := r.Routes[iv.Tag]; !ok || iv.Start%time.Second != 0 || iv.Length <= 0 || iv.Length > time.Second {
			t.Errorf("interval %q at %v, %v long: want a route's, on a second, at most 1 s", iv.Tag, iv.Start, iv.Length)
		}
		h, err := iv.Histogram()
		if err != nil {
			t.Fatal(err)
		}
		if sums[iv.Tag] == nil {
			sums[iv.Tag] = newHistogram()
		}
		sums[iv.Tag].Merge(h)
		seconds[iv.Start] = true
	}
	for name, c := range r.Routes {
		sum := sums[name]
		if sum == nil {
			sum = newHistogram()
		}
		if c.Hist.Histogram == nil || !reflect.DeepEqual(nonZero(sum), nonZero(c.Hist.Histogram)) {
			t.Errorf("route %s: intervals hold %d latencies, the hold's histogram %d (or buckets differ)",
				name, sum.TotalCount(), c.Hist.TotalCount())
		}
	}
	return len(seconds)
}

// The hold is recorded per route and per second, adding up to the hold's histograms;
// the intervals survive JSON (a child process's result) and add up under Merge.
func TestJourneyIntervals(t *testing.T) { forEngines(t, testJourneyIntervals) }

func testJourneyIntervals(t *testing.T, engine string) {
	srv := httptest.NewServer(&fakeFeed{})
	defer srv.Close()
	var parts []Result
	for first := 1; first <= 4; first += 2 { // two processes' worth, one agreed start
		cfg := fastConfig(srv.URL, 2, 2500*time.Millisecond, engine)
		cfg.FirstUser, cfg.TotalUsers = first, 4
		cfg.StartAt = time.Now()
		r, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if n := checkIntervals(t, r); n < 3 {
			t.Errorf("intervals over %d seconds of a 2.5 s hold, want 3", n)
		}
		if want := cfg.StartAt.Add(cfg.Ramp); !r.HoldStart.Equal(want) {
			t.Errorf("hold start %v, want %v", r.HoldStart, want)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back Result
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		checkIntervals(t, back)
		parts = append(parts, back)
	}
	m := Merge(parts...)
	checkIntervals(t, m)
}
