package detach

import (
	"testing"
	"time"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
)

// TestStartWatch: which status replies, polled in order, make an app crash-looping for
// start, and when start counts them settled.
func TestStartWatch(t *testing.T) {
	pid := 100
	w := func(app string, id int, status string, restarts int) control.Worker {
		pid++ // a new process each time, unless same says otherwise
		return control.Worker{App: app, ID: id, PID: pid, Status: status, Restarts: restarts}
	}
	same := func(ws control.Worker) control.Worker { ws.PID = 7; return ws }
	const (
		on, wait, launch, errd = cluster.StateOnline, cluster.StateWaitingRestart, cluster.StateLaunching, cluster.StateErrored
	)
	type poll struct {
		at      time.Duration // since the first
		workers []control.Worker
	}
	for _, tc := range []struct {
		name    string
		polls   []poll
		want    string // the app found looping at the last poll; "-" none
		settled bool   // at the last poll
	}{
		{"every worker restarted 3 times", []poll{{0, []control.Worker{w("", 0, wait, 3), w("", 1, launch, 4)}}}, "", false},
		{"online briefly each time (no wait_ready)", []poll{{0, []control.Worker{w("", 0, on, 0)}}, {time.Second, []control.Worker{w("", 0, on, 3)}}}, "", false},
		{"one worker short of 3", []poll{{0, []control.Worker{w("", 0, wait, 3), w("", 1, launch, 2)}}}, "-", false},
		{"just online: not yet settled", []poll{{0, []control.Worker{same(w("", 0, on, 0))}}}, "-", false},
		{"online 1 s: settled", []poll{{0, []control.Worker{same(w("", 0, on, 0))}}, {time.Second, []control.Worker{same(w("", 0, on, 0))}}}, "-", true},
		{"online 1 s, another process", []poll{{0, []control.Worker{w("", 0, on, 0)}}, {time.Second, []control.Worker{w("", 0, on, 1)}}}, "-", false},
		{"slow starter", []poll{{0, []control.Worker{same(w("", 0, launch, 0))}}, {5 * time.Second, []control.Worker{same(w("", 0, launch, 0))}}}, "-", false},
		{"up since 2 restarts", []poll{{0, []control.Worker{same(w("", 0, on, 2))}}, {time.Second, []control.Worker{same(w("", 0, on, 2))}},
			{2 * time.Second, []control.Worker{w("", 0, wait, 4)}}}, "-", false},
		{"up since, then 3 more", []poll{{0, []control.Worker{same(w("", 0, on, 2))}}, {time.Second, []control.Worker{same(w("", 0, on, 2))}},
			{2 * time.Second, []control.Worker{w("", 0, wait, 5)}}}, "", false},
		{"errored among looping", []poll{{0, []control.Worker{w("", 0, errd, 3), w("", 1, wait, 3)}}}, "", false},
		{"the second app", []poll{{0, []control.Worker{w("api", 0, launch, 0), w("jobs", 0, wait, 3)}}}, "jobs", false},
		{"stopped job", []poll{{0, []control.Worker{w("once", 0, cluster.StateStopped, 3)}}}, "-", true},
		{"out of restarts", []poll{{0, []control.Worker{w("", 0, errd, 1)}}}, "-", true},
		{"no workers", []poll{{0, nil}}, "-", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sw := startWatch{}
			t0 := time.Now()
			var st control.Status
			for _, p := range tc.polls {
				st = control.Status{Workers: p.workers}
				sw.observe(st, t0.Add(p.at))
			}
			got, ok := sw.looping(st)
			switch {
			case tc.want == "-" && ok:
				t.Errorf("looping = %+v, want none", got)
			case tc.want != "-" && (!ok || got.app != tc.want):
				t.Errorf("looping = %+v %v, want app %q", got, ok, tc.want)
			}
			last := tc.polls[len(tc.polls)-1].at
			if settled := sw.settled(st, t0.Add(last)); settled != tc.settled {
				t.Errorf("settled = %v, want %v", settled, tc.settled)
			}
		})
	}
}

// TestCheckOutput: a failed run -check's output as start's error: the flag list left out,
// a bad flag said once, main's prefix off.
func TestCheckOutput(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"check", "supervisor: check: the workers would not start (x):\napp api: env: SQLITE_PATH is not set\n",
			"check: the workers would not start (x):\napp api: env: SQLITE_PATH is not set"},
		{"bad flag", "flag provided but not defined: -nope\nUsage of supervisor run:\n  -agent string\n    \tanswer\n  -check\n    \tcheck\nsupervisor: flag provided but not defined: -nope\n",
			"flag provided but not defined: -nope"},
		{"test binary, no prefix", "check: working directory: gone\n", "check: working directory: gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkOutput(tc.in); got != tc.want {
				t.Errorf("checkOutput = %q, want %q", got, tc.want)
			}
		})
	}
}
