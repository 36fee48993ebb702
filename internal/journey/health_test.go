package journey

import (
	"context"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/genhealth"
)

// generous thresholds judge the users' own figures on a machine that other tests keep
// busy: a healthy run stays far below them unless its lags are miscounted.
var generous = genhealth.Thresholds{SendLagP99: 500 * time.Millisecond, HiccupP99: 500 * time.Millisecond, CPUShare: 10}

// TestJourneyHealth runs users healthy and held back on purpose (a test hook that sleeps
// before every request): the late users are flagged by their send lag, the healthy ones
// are not, and both record their sends and dials.
func TestJourneyHealth(t *testing.T) { forEngines(t, testJourneyHealth) }

func testJourneyHealth(t *testing.T, engine string) {
	tests := []struct {
		name    string
		stall   time.Duration
		wantSat bool
	}{
		{"healthy", 0, false},
		{"stalled", 80 * time.Millisecond, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(&fakeFeed{})
			defer srv.Close()
			cfg := fastConfig(srv.URL, 10, 1500*time.Millisecond, engine)
			cfg.Saturation = generous
			if tc.stall > 0 {
				cfg.Saturation.SendLagP99 = tc.stall / 2
			}
			cfg, err := cfg.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			tgt, err := parseTarget(cfg.URL)
			if err != nil {
				t.Fatal(err)
			}
			r := &runner{cfg: cfg, tgt: tgt, start: time.Now()}
			if tc.stall > 0 {
				r.stall = func() { time.Sleep(tc.stall) }
			}
			res, err := r.run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			v := res.Health
			t.Logf("%s; peak %+v", v, v.Peak)
			if v.Windows == 0 || v.Peak.Sends == 0 || v.Peak.Connects == 0 {
				t.Fatalf("verdict %+v: want windows with sends and dials", v)
			}
			if v.Saturated != tc.wantSat || (tc.wantSat && v.Signal != genhealth.SignalSendLag) {
				t.Errorf("got %s, want saturated %v (by the send lag)", v, tc.wantSat)
			}
		})
	}
}

// TestMergeHealth: a run split over processes is saturated if any part was.
func TestMergeHealth(t *testing.T) {
	ok := Result{Users: 1, Health: genhealth.Verdict{Windows: 3}}
	sat := Result{Users: 1, Health: genhealth.Verdict{Windows: 3, Saturated: true, Signal: genhealth.SignalHiccup, Value: 90, At: 2}}
	if m := Merge(ok, ok); m.Health.Saturated || m.Health.Parts != 2 {
		t.Errorf("two ok parts merged to %s (%d parts), want ok of 2", m.Health, m.Health.Parts)
	}
	if m := Merge(ok, sat); !m.Health.Saturated || m.Health.Signal != genhealth.SignalHiccup {
		t.Errorf("an ok and a saturated part merged to %s, want SATURATED by the hiccup", m.Health)
	}
}

// TestSearchInvalid: trials whose generator saturates (here from 2,600 users on) are
// neither passes nor failures; the search climbs no higher than the first, and says so.
func TestSearchInvalid(t *testing.T) {
	var trials []string
	res, err := Search(context.Background(), SearchConfig{
		Warmup: -1,
		Run:    Config{Hold: time.Minute},
		Trial: func(ctx context.Context, c Config) (Result, error) {
			r := Result{Users: c.Users, Pass: c.Users <= 3000}
			r.Health = genhealth.Verdict{Windows: 1, Saturated: c.Users >= 2600, Signal: genhealth.SignalCPU, Value: 1}
			return r, nil
		},
		OnStep: func(s SearchStep) {
			v := "pass"
			switch {
			case s.Invalid:
				v = "invalid"
			case !s.Pass:
				v = "fail"
			}
			trials = append(trials, s.Phase+" "+strconv.Itoa(s.Users)+" "+v)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "double 2500 pass, double 5000 invalid, bisect 3750 invalid, bisect 3000 invalid, bisect 2750 invalid, confirm 2500 pass"
	if got := joinSteps(trials); got != want {
		t.Errorf("trials:\n got %s\nwant %s", got, want)
	}
	if res.Best != 2500 || !res.Confirmed || res.GeneratorLimit != 2750 {
		t.Errorf("best %d (confirmed %v), generator limit %d; want 2500 confirmed, limit 2750", res.Best, res.Confirmed, res.GeneratorLimit)
	}
}
