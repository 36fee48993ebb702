package loadgen

import (
	"context"
	"fmt"
	"testing"
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
// the runtime's own bookkeeping).
func TestSteadyStateAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	if testing.Short() {
		t.Skip("short")
	}
	url := cannedServer(t, benchResponse)
	allocs := func(amount int64) float64 {
		return testing.AllocsPerRun(3, func() {
			if _, err := Run(context.Background(), Config{URL: url, Connections: 4, Pipelining: 2, Amount: amount}); err != nil {
				t.Fatal(err)
			}
		})
	}
	small, large := allocs(2000), allocs(20000)
	const slack = 50
	if large > small+slack {
		t.Errorf("a run of 20,000 requests allocated %.0f times, one of 2,000 %.0f: %.4f allocations per extra request, want 0",
			large, small, (large-small)/18000)
	}
	t.Logf("allocations per run: %.0f for 2,000 requests, %.0f for 20,000", small, large)
}
