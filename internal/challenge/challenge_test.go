package challenge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/genhealth"
	"github.com/onehost/onehost/internal/journey"
)

// fakeTrial passes up to capacity users: a server that holds that many and no more.
// From genLimit users on (0: never) its generator is saturated.
func fakeTrial(capacity int, genLimit ...int) func(context.Context, journey.Config) (journey.Result, error) {
	return func(_ context.Context, rc journey.Config) (journey.Result, error) {
		r := journey.Result{URL: rc.URL, Users: rc.Users, TimeScale: rc.TimeScale, Requests: int64(rc.Users) * 10, Pass: rc.Users <= capacity}
		if !r.Pass {
			r.Reasons = []string{"p95 600ms >= 500ms"}
		}
		r.Health = genhealth.Verdict{Windows: 10}
		if len(genLimit) > 0 && genLimit[0] > 0 && rc.Users >= genLimit[0] {
			r.Health = genhealth.Verdict{Windows: 10, Saturated: true, Signal: genhealth.SignalHiccup, Value: 90, At: 4}
		}
		r.Stages = []journey.Stage{{Name: "hold", RPS: float64(rc.Users) / 10}}
		return r, nil
	}
}

func fakeServer(name string, started *[]string) Server {
	return Server{Name: name, Start: func(context.Context) (int, string, func() error, error) {
		*started = append(*started, name)
		return os.Getpid(), "http://" + name, func() error { *started = append(*started, "stop "+name); return nil }, nil
	}}
}

func TestRun(t *testing.T) {
	tests := []struct {
		name         string
		capacity     int
		genLimit     int // 0: the generator never saturates
		users        int
		wantUsers    int
		confirmed    bool
		wantGenLimit int
	}{
		{"search", 7000, 0, 0, 7000, true, 0},
		{"one trial that passes", 7000, 0, 4000, 4000, false, 0},
		{"one trial that fails", 7000, 0, 9000, 0, false, 0},
		{"search below a saturated generator", 7000, 5000, 0, 4750, true, 5000},
		{"one trial, generator saturated", 7000, 3000, 4000, 0, false, 4000},
		{"the server fails below a saturated generator", 5000, 8000, 0, 5000, true, 10000}, // doubling reaches 10,000 first
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var started []string
			var lines []string
			search := journey.SearchConfig{Run: journey.Config{TimeScale: 2, Hold: time.Second}, Warmup: -1,
				Trial: fakeTrial(tt.capacity, tt.genLimit)}
			scores, err := Run(context.Background(), Config{
				Servers: []Server{fakeServer("ours", &started), fakeServer("peer", &started)},
				Search:  search, Users: tt.users,
				Logf:      func(f string, a ...any) { lines = append(lines, f) },
				otherWork: fakeOtherWork(0),
			})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(started, ",") != "ours,stop ours,peer,stop peer" {
				t.Errorf("servers started and stopped: %v, want one after the other", started)
			}
			s := scores[0]
			if s.Users != tt.wantUsers || s.Confirmed != tt.confirmed || s.UserEquivalents != float64(tt.wantUsers)*2 {
				t.Errorf("score %d users (confirmed %v, %v UE), want %d (confirmed %v)", s.Users, s.Confirmed, s.UserEquivalents, tt.wantUsers, tt.confirmed)
			}
			if s.GeneratorLimit != tt.wantGenLimit {
				t.Errorf("generator limit %d, want %d", s.GeneratorLimit, tt.wantGenLimit)
			}
			for _, tr := range s.Trials {
				if tr.Result.URL != "http://ours" || tr.PerRequest < 0 {
					t.Errorf("trial %+v: want our URL and a CPU per request", tr.SearchStep)
				}
				if sat := tt.genLimit > 0 && tr.Users >= tt.genLimit; tr.Invalid != sat || (sat && tr.Pass) {
					t.Errorf("trial of %d users: invalid %v pass %v, want invalid %v and no pass", tr.Users, tr.Invalid, tr.Pass, sat)
				}
			}
			if len(lines) != 2*len(s.Trials) {
				t.Errorf("%d progress lines for %d trials of each server", len(lines), len(s.Trials))
			}
			var b strings.Builder
			WriteReport(&b, scores, search, 3*0.2, "a note") // a cluster of 3's quota: 0.6000000000000001
			out := b.String()
			wants := []string{"0.6 of one core each", "a note", "ours", "peer", Published}
			if tt.wantGenLimit > 0 {
				wants = append(wants, "ours: the generator was SATURATED from "+groupDigits(float64(tt.wantGenLimit))+" users")
				if tt.capacity < tt.genLimit {
					wants = append(wants, "the score is the server's: it failed at")
				} else {
					wants = append(wants, "so the score is the generator's limit")
				}
			}
			for _, want := range wants {
				if !strings.Contains(out, want) {
					t.Errorf("report lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// fakeOtherWork measures each trial's other work as the next of cores (the last one
// again once they are used up).
func fakeOtherWork(cores ...float64) func() (func() (float64, error), error) {
	i := 0
	return func() (func() (float64, error), error) {
		c := cores[min(i, len(cores)-1)]
		i++
		return func() (float64, error) { return c, nil }, nil
	}
}

// TestRunHostBusy: a judged trial beside other work of OtherCores or more scores nothing,
// ends the search, and the report says so with the other work's cores instead of a
// number; a warm-up beside it is not judged, and other work under the threshold is only
// reported.
func TestRunHostBusy(t *testing.T) {
	tests := []struct {
		name      string
		users     int       // 0: the search
		warmup    int       // users of the warm-up; 0 none
		other     []float64 // each trial's other work, in order
		threshold float64   // Config.OtherCores; 0 the default
		wantBusy  int       // users of the host-busy trial; 0 none
		wantUsers int
		trials    int
	}{
		{"one trial beside a busy loop", 4000, 0, []float64{1.08}, 0, 4000, 0, 1},
		{"one quiet trial", 4000, 0, []float64{0.02}, 0, 0, 4000, 1},
		{"the search, busy from its second trial", 0, 0, []float64{0.01, 0.6}, 0, 5000, 0, 2},
		{"a busy warm-up is not judged", 0, 1000, []float64{0.9, 0}, 0, 0, 7000, 10},
		{"a higher threshold", 4000, 0, []float64{1.08}, 2, 0, 4000, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var started, lines []string
			warmup := -1
			if tt.warmup > 0 {
				warmup = tt.warmup
			}
			search := journey.SearchConfig{Run: journey.Config{TimeScale: 2, Hold: time.Second}, Warmup: warmup, Trial: fakeTrial(7000)}
			scores, err := Run(context.Background(), Config{
				Servers: []Server{fakeServer("ours", &started), fakeServer("peer", &started)}, Search: search, Users: tt.users,
				Logf:       func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) },
				OtherCores: tt.threshold, otherWork: fakeOtherWork(tt.other...),
			})
			if err != nil {
				t.Fatal(err)
			}
			s := scores[0]
			if s.Users != tt.wantUsers || s.UserEquivalents != 2*float64(tt.wantUsers) || len(s.Trials) != tt.trials {
				t.Errorf("score %d users (%v UE) after %d trials, want %d after %d", s.Users, s.UserEquivalents, len(s.Trials), tt.wantUsers, tt.trials)
			}
			var b strings.Builder
			WriteReport(&b, scores, search, 0.2, "")
			out := b.String()
			if tt.wantBusy == 0 {
				if s.HostBusy != nil || strings.Contains(out, "host-busy") || strings.Contains(out, "HOST-BUSY") {
					t.Errorf("host busy %+v, want none:\n%s", s.HostBusy, out)
				}
				return
			}
			last := s.Trials[len(s.Trials)-1]
			if s.HostBusy == nil || s.HostBusy.Users != tt.wantBusy || !last.HostBusy || last.Pass || s.Confirmed {
				t.Fatalf("host busy %+v, last trial %+v: want the trial of %d users host-busy, not passed, and the search ended there", s.HostBusy, last, tt.wantBusy)
			}
			want := fmt.Sprintf("ours: HOST-BUSY, no score: other work on this host took %.2f cores during the trial of %s users", last.OtherCores, groupDigits(float64(tt.wantBusy)))
			for _, w := range []string{want, "Run again on a quiet host"} {
				if !strings.Contains(out, w) {
					t.Errorf("report lacks %q:\n%s", w, out)
				}
			}
			if !regexp.MustCompile(`\bours +host-busy +- `).MatchString(out) {
				t.Errorf("report's table does not put host-busy in place of ours's score:\n%s", out)
			}
			if strings.Contains(out, "× the users") {
				t.Errorf("report compares a host-busy score:\n%s", out)
			}
			if l := lines[len(s.Trials)-1]; !strings.Contains(l, fmt.Sprintf("HOST-BUSY, not scored: other work %.2f cores (threshold 0.10)", last.OtherCores)) {
				t.Errorf("trial line %q does not say host-busy", l)
			}
		})
	}
}

func TestRunGoesOnAfterAFailedServer(t *testing.T) {
	var started []string
	bad := Server{Name: "broken", Start: func(context.Context) (int, string, func() error, error) {
		return 0, "", nil, errors.New("no such binary")
	}}
	scores, err := Run(context.Background(), Config{
		Servers:   []Server{bad, fakeServer("peer", &started)},
		Search:    journey.SearchConfig{Run: journey.Config{TimeScale: 1}, Trial: fakeTrial(100)},
		Users:     50,
		otherWork: fakeOtherWork(0),
	})
	if err != nil || len(scores) != 2 || !strings.Contains(scores[0].Err, "no such binary") || scores[1].Users != 50 {
		t.Errorf("scores %+v, %v: want the broken server's error and the peer measured", scores, err)
	}
}

func TestRunNeedsATrial(t *testing.T) {
	if _, err := Run(context.Background(), Config{}); err == nil {
		t.Error("Run without Search.Trial: nil error")
	}
}

func TestGroupDigits(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 40000: "40,000", 1234567: "1,234,567", -2500: "-2,500"} {
		if got := groupDigits(in); got != want {
			t.Errorf("groupDigits(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestTrialLinePortWarnings(t *testing.T) {
	for _, tc := range []struct {
		name     string
		warnings []string
		want     string
	}{
		{"none", nil, ""},
		{"a load host's", []string{"6000 connections from the kernel's source address to 10.0.0.2:80 …"},
			"; generator ports: 6000 connections from the kernel's source address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr Trial
			tr.Result.PortWarnings = tc.warnings
			line := trialLine(tr, 0.1)
			if got := strings.Contains(line, "generator ports:"); got != (tc.want != "") || !strings.Contains(line, tc.want) {
				t.Errorf("trialLine = %q, want %q in it", line, tc.want)
			}
		})
	}
}
