package loadgen

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// benchResponse is a small JSON answer like the hello routes of load-profile.md.
var benchResponse = []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"hello\":\"world\"}")

// BenchmarkClient measures the client's cost per request against a server that costs
// almost nothing (it shares the CPU, so ns/op is client plus server). allocs/op must be 0:
// the run's setup is spread over b.N requests.
func BenchmarkClient(b *testing.B) {
	url := cannedServer(b, benchResponse)
	for _, bc := range []struct{ conns, pipe int }{{8, 1}, {8, 8}} {
		b.Run(fmt.Sprintf("c%d_p%d", bc.conns, bc.pipe), func(b *testing.B) {
			b.ReportAllocs()
			res, err := Run(context.Background(), Config{URL: url, Connections: bc.conns, Pipelining: bc.pipe, Amount: int64(b.N)})
			if err != nil {
				b.Fatal(err)
			}
			if res.Responses != int64(b.N) {
				b.Fatalf("responses %d, want %d", res.Responses, b.N)
			}
			b.ReportMetric(float64(res.Generator.UserSec+res.Generator.SysSec)*1e9/float64(b.N), "cpu-ns/op")
		})
	}
}

// TestSteadyStateAllocations checks that requests allocate nothing once a run is going:
// a run of 20,000 requests allocates no more than one of 2,000 (plus a little slack for
// the runtime's own bookkeeping). The latency intervals are an hour long here: handing
// an interval over allocates once a second, not per request, and would make a slower run
// look like a costlier one. Encoding the run's interval at its end allocates per bucket
// in use (hdrhistogram-go's encoder), more of them in a longer run: that count is
// measured apart and taken off.
func TestSteadyStateAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	if testing.Short() {
		t.Skip("short")
	}
	url := cannedServer(t, benchResponse)
	allocs := func(amount int64) float64 {
		// As testing.AllocsPerRun counts, less each run's own encoding, counted after it.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		var total float64
		const runs = 3
		for range runs {
			var m0, m1, m2, m3 runtime.MemStats
			runtime.ReadMemStats(&m0)
			res, err := Run(context.Background(), Config{URL: url, Connections: 4, Pipelining: 2, Amount: amount, IntervalLength: time.Hour})
			runtime.ReadMemStats(&m1)
			if err != nil {
				t.Fatal(err)
			}
			var hs []*hdrhistogram.Histogram
			for _, iv := range res.Intervals {
				h, err := iv.Histogram()
				if err != nil {
					t.Fatal(err)
				}
				hs = append(hs, h)
			}
			runtime.ReadMemStats(&m2)
			for _, h := range hs {
				h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
			}
			runtime.ReadMemStats(&m3)
			total += float64(m1.Mallocs-m0.Mallocs) - float64(m3.Mallocs-m2.Mallocs)
		}
		return total / runs
	}
	small, large := allocs(2000), allocs(20000)
	const slack = 50
	if large > small+slack {
		t.Errorf("a run of 20,000 requests allocated %.0f times, one of 2,000 %.0f: %.4f allocations per extra request, want 0",
			large, small, (large-small)/18000)
	}
	t.Logf("allocations per run: %.0f for 2,000 requests, %.0f for 20,000", small, large)
}
