package ceiling

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// TestFleetModel: the limit of a workload behind HAProxy carries the linear model fitted
// at the largest H (each host's rate from its cores and the servers' µs, the balancer's
// from its cores and µs), the H from which the balancer is full, and the measured points
// beside the model's; other balancers get none.
func TestFleetModel(t *testing.T) {
	run := func(w, b string, h int, rps, srvUs, lbUs float64) FleetRun {
		r := FleetRun{Workload: w, Balancer: b, Hosts: h, N: 1, RPS: rps, ServerUsPerReq: srvUs,
			ServerCoreLimit: 0.4 * float64(h), Verdict: VerdictCPU}
		if b == BalancerHAProxy {
			r.BalancerUsPerReq, r.BalancerCores = lbUs, 1
		}
		return r
	}
	for _, tc := range []struct {
		name     string
		runs     []FleetRun
		wantNil  bool
		hostRPS  float64
		lbRPS    float64
		fullAtH  int
		wantLine string
	}{
		{"hello: the balancer full from one host",
			[]FleetRun{run("hello", "haproxy", 1, 30000, 10, 30), run("hello", "haproxy", 2, 33000, 10, 30)},
			false, 40000, 33333, 1, "measured: H=1 30000 (model 33333), H=2 33000 (model 33333)"},
		{"heavy: full from three",
			[]FleetRun{run("heavy", "haproxy", 2, 19000, 40, 35), run("heavy", "haproxy", 1, 9800, 40, 35)},
			false, 10000, 28571, 3, "full from H=3; measured: H=1 9800 (model 10000), H=2 19000 (model 20000)"},
		{"nftables: no model", []FleetRun{run("hello", "nftables", 2, 60000, 10, 0)}, true, 0, 0, 0, ""},
		{"no balancer CPU: no model", []FleetRun{run("hello", "haproxy", 2, 60000, 10, 0)}, true, 0, 0, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cells, limits := SummarizeFleet(tc.runs)
			if len(limits) != 1 {
				t.Fatalf("%d limits, want 1", len(limits))
			}
			m := limits[0].Model
			if tc.wantNil {
				if m != nil {
					t.Fatalf("model %+v, want none", *m)
				}
				return
			}
			if m == nil {
				t.Fatal("no model")
			}
			if math.Abs(m.HostRPS-tc.hostRPS) > 1 || math.Abs(m.BalancerRPS-tc.lbRPS) > 1 || m.FullAtH != tc.fullAtH {
				t.Errorf("model: host %.0f, balancer %.0f req/s, full at H=%d; want %.0f, %.0f, %d",
					m.HostRPS, m.BalancerRPS, m.FullAtH, tc.hostRPS, tc.lbRPS, tc.fullAtH)
			}
			var b bytes.Buffer
			WriteFleetReport(&b, cells, limits)
			if !strings.Contains(b.String(), tc.wantLine) {
				t.Errorf("report lacks %q:\n%s", tc.wantLine, b.String())
			}
		})
	}
}
