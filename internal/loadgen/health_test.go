package loadgen

import (
	"context"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/genhealth"
)

// generous thresholds judge the loops' own figures on a machine that other tests keep
// busy: a healthy run stays far below them unless its lags are miscounted.
var generous = genhealth.Thresholds{SendLagP99: 500 * time.Millisecond, HiccupP99: 500 * time.Millisecond, CPUShare: 10, ConnectP99: 500 * time.Millisecond}

// TestHealth runs the loops healthy and held back on purpose (a test hook that stalls
// every turn): the stalled open loop sends its requests late and is flagged; the healthy
// runs record their sends and are not.
func TestHealth(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		stall   time.Duration
		wantSat bool
	}{
		{"closed loop", Config{Connections: 4, Duration: 1500 * time.Millisecond}, 0, false},
		{"open loop", Config{Connections: 4, Rate: 400, Duration: 1500 * time.Millisecond}, 0, false},
		{"open loop, stalled", Config{Connections: 4, Rate: 400, Duration: 2500 * time.Millisecond}, 150 * time.Millisecond, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, func(int64, int64) reply { return ok })
			cfg := tc.cfg
			cfg.URL = s.URL
			cfg.Saturation = generous
			if tc.stall > 0 {
				cfg.Saturation.SendLagP99 = tc.stall * 2 / 3
			}
			e, err := newEngine(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if tc.stall > 0 {
				e.stall = func() { time.Sleep(tc.stall) }
			}
			res, err := e.start(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			v := res.Health
			t.Logf("%s; peak %+v", v, v.Peak)
			if v.Windows == 0 || v.Peak.Sends == 0 || v.Peak.Connects == 0 {
				t.Fatalf("verdict %+v: want windows with sends and connects", v)
			}
			if v.Saturated != tc.wantSat {
				t.Errorf("got %s, want saturated %v", v, tc.wantSat)
			}
			if tc.wantSat && v.Signal != genhealth.SignalSendLag {
				t.Errorf("got %s, want the send lag to name it", v)
			}
		})
	}
}
