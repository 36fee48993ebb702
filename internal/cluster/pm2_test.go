package cluster

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestStaysStopped: PM2's autorestart: false, and stop_exit_codes, leave a worker that
// exited stopped; other exits restart it.
func TestStaysStopped(t *testing.T) {
	off := false
	tests := []struct {
		name    string
		cfg     Config
		stopped bool
	}{
		{"autorestart false", Config{AutoRestart: &off}, true},
		{"its exit code in stop_exit_codes", Config{StopExitCodes: []int{3}}, true}, // crash: exits 3
		{"another exit code", Config{StopExitCodes: []int{0}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.cfg.Instances = 2
			tc.cfg.MinUptime = Duration(50 * time.Millisecond)
			tc.cfg.ExpBackoffRestartDelay = Duration(20 * time.Millisecond)
			s := startCluster(t, tc.cfg, "FAKE_MODE=crash:300")
			if !tc.stopped {
				waitFor(t, 15*time.Second, "restarts", func() bool { return s.Status()[0].Restarts >= 1 })
				return
			}
			waitFor(t, 15*time.Second, "both stopped", func() bool {
				st := s.Status()
				return st[0].Status == StateStopped && st[1].Status == StateStopped
			})
			time.Sleep(500 * time.Millisecond) // longer than the backoff: a restart would have come
			for _, r := range s.Status() {
				if r.Status != StateStopped || r.PID != 0 || r.Restarts != 0 {
					t.Errorf("slot %d: %+v, want stopped, no pid, no restart", r.ID, r)
				}
			}
		})
	}
}

// TestWatchReloads: a change to a watched file rolls a reload (every worker replaced);
// cron_restart rolls one at its times (here every second, cron's six-field form).
func TestWatchReloads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	app := filepath.Join(dir, "app.js")
	os.WriteFile(app, []byte("1"), 0o644)
	s := startCluster(t, Config{Instances: 2, Cwd: dir, Watch: WatchPaths{"."}, IgnoreWatch: []string{"logs"}, WatchDelay: Duration(50 * time.Millisecond)})
	before := pids(s)
	if s.Counters().Reloads != 0 {
		t.Fatalf("reloads before any change: %d", s.Counters().Reloads)
	}
	os.WriteFile(app, []byte("2"), 0o644)
	waitFor(t, 20*time.Second, "every worker replaced after the change", func() bool {
		now := pids(s)
		for i, p := range now {
			if p == 0 || p == before[i] || s.Status()[i].Status != StateOnline {
				return false
			}
		}
		return s.Counters().Reloads >= 1
	})
}

func TestCronRestart(t *testing.T) {
	t.Parallel()
	s := startCluster(t, Config{Instances: 2, CronRestart: "* * * * * *"})
	before := pids(s)
	waitFor(t, 20*time.Second, "two reloads by cron", func() bool { return s.Counters().Reloads >= 2 })
	waitFor(t, 10*time.Second, "every worker replaced", func() bool {
		for i, p := range pids(s) {
			if p == 0 || p == before[i] {
				return false
			}
		}
		return true
	})
}

// TestInstanceVars: PM2's instance_var and increment_var, read from each worker's own
// environment.
func TestInstanceVars(t *testing.T) {
	t.Parallel()
	s := startCluster(t, Config{Instances: 2, InstanceVar: "INSTANCE_ID", IncrementVar: "SHARD", Env: map[string]string{"SHARD": "10"}})
	for _, r := range s.Status() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", r.PID))
		if err != nil {
			t.Fatal(err)
		}
		env := strings.Split(string(b), "\x00")
		for _, want := range []string{fmt.Sprintf("INSTANCE_ID=%d", r.ID), fmt.Sprintf("SHARD=%d", 10+r.ID)} {
			if !slices.Contains(env, want) {
				t.Errorf("worker %d lacks %s", r.ID, want)
			}
		}
	}
}

// TestLogDateFormat: log_date_format stamps each line a worker writes, as PM2 does.
func TestLogDateFormat(t *testing.T) {
	t.Parallel()
	out := &syncBuffer{}
	_, logs := startClusterOpts(t, Config{Instances: 1, LogDateFormat: "YYYY-MM-DD HH:mm:ss Z"},
		Options{WorkerLog: func(int) io.Writer { return out }})
	stamped := regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d\d:\d\d: fake worker up`)
	waitFor(t, 10*time.Second, "a stamped line", func() bool { return stamped.MatchString(out.String()) })
	if !regexp.MustCompile(`"?line"?[:=]\s*"?\d{4}-\d\d-\d\d`).MatchString(logs.String()) {
		t.Errorf("the supervisor's log has no stamped worker line:\n%s", logs)
	}
}
