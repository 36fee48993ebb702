package cluster

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseNotify(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want notifyMsg
	}{
		{"ready with status", "READY=1\nSTATUS=booted", notifyMsg{ready: true, status: "booted", hasStatus: true}},
		{"watchdog", "WATCHDOG=1", notifyMsg{watchdog: true}},
		{"stopping, reloading", "STOPPING=1\nRELOADING=1\nMONOTONIC_USEC=123", notifyMsg{stopping: true, reloading: true}},
		{"extend", "EXTEND_TIMEOUT_USEC=2500000", notifyMsg{extend: 2500 * time.Millisecond}},
		{"mainpid", "MAINPID=42", notifyMsg{mainPID: 42}},
		{"unknown and malformed ignored", "X_FOO=1\ngarbage\nREADY=0\n\n", notifyMsg{}},
		{"empty status", "STATUS=", notifyMsg{hasStatus: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseNotify([]byte(tc.in)); got != tc.want {
				t.Errorf("parseNotify(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

func FuzzParseNotify(f *testing.F) {
	f.Add("READY=1\nSTATUS=x\nEXTEND_TIMEOUT_USEC=99999999999999999999")
	f.Fuzz(func(t *testing.T, in string) {
		m := parseNotify([]byte(in))
		if m.extend < 0 {
			t.Fatalf("negative extension from %q", in)
		}
	})
}

// TestSdNotifyReadiness: a worker that says READY=1 over its notify socket (and nothing
// over our ipc) is online by it; its STATUS= shows in Status; it is not asked for
// counters, so never judged silent.
func TestSdNotifyReadiness(t *testing.T) {
	t.Parallel()
	s, logs := startClusterOpts(t, Config{Instances: 2, StatsInterval: Duration(100 * time.Millisecond),
		HeartbeatTimeout: Duration(300 * time.Millisecond)}, Options{}, "FAKE_MODE=sdnotify")
	if !strings.Contains(logs.String(), `"ready": "sd_notify"`) {
		t.Errorf("not online through sd_notify:\n%s", logs)
	}
	before := pids(s)
	time.Sleep(800 * time.Millisecond) // past the heartbeat timeout
	for i, r := range s.Status() {
		if r.Note != "fake serving" {
			t.Errorf("worker %d note %q, want its STATUS=", i, r.Note)
		}
		if r.PID != before[i] || r.Restarts != 0 {
			t.Errorf("worker %d replaced: %+v", i, r)
		}
	}
}

// TestWorkerWatchdog: with watchdog_sec, a worker gets WATCHDOG_USEC, and one that fed the
// watchdog and stopped is replaced; one that keeps feeding it is not.
func TestWorkerWatchdog(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		stopMS   string
		replaced bool
	}{
		{"stops feeding", "300", true},
		{"keeps feeding", "60000", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := startClusterOpts(t, Config{Instances: 1, WatchdogSec: Duration(400 * time.Millisecond),
				StatsInterval: Duration(100 * time.Millisecond), HeartbeatTimeout: Duration(400 * time.Millisecond)},
				Options{}, "FAKE_MODE=watchdog", "WATCHDOG_STOP_MS="+tc.stopMS)
			first := s.Status()[0]
			if first.Note != "watchdog 400000" {
				t.Errorf("worker note %q: want it to have got WATCHDOG_USEC=400000", first.Note)
			}
			time.Sleep(1500 * time.Millisecond)
			now := s.Status()[0]
			if replaced := now.PID != first.PID || now.Restarts > 0; replaced != tc.replaced {
				t.Errorf("after 1.5 s: %+v (was pid %d), want replaced %v", now, first.PID, tc.replaced)
			}
		})
	}
}

// TestReloadHonoursExtendTimeout: a reload's new worker that asks for more time with
// EXTEND_TIMEOUT_USEC gets it (the reload waits past listen_timeout), and one that does not
// still aborts the reload at listen_timeout.
func TestReloadHonoursExtendTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, mode    string
		listenTimeout time.Duration
		ok            bool
	}{
		// The worker must ask before listen_timeout: 2 s leaves a -race helper process on a
		// loaded machine the time to start; it says ready 2.5 s in, past listen_timeout.
		{"asks for the time", "extend:2500", 2 * time.Second, true},
		{"never ready", "notready", 500 * time.Millisecond, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			modeFile := filepath.Join(t.TempDir(), "mode")
			os.WriteFile(modeFile, []byte("ok"), 0o600)
			s := startCluster(t, Config{Instances: 1, ListenTimeout: Duration(tc.listenTimeout)}, "FAKE_MODE_FILE="+modeFile)
			before := pids(s)
			os.WriteFile(modeFile, []byte(tc.mode), 0o600)
			start := time.Now()
			err := s.Reload(context.Background())
			if tc.ok && err != nil {
				t.Fatalf("Reload = %v after %v, want it to wait for the extension", err, time.Since(start))
			}
			if !tc.ok && (err == nil || !strings.Contains(err.Error(), "listen_timeout")) {
				t.Fatalf("Reload = %v, want an error naming listen_timeout", err)
			}
			if replaced := !slices.Equal(pids(s), before); replaced != tc.ok {
				t.Errorf("pids %v after Reload (before %v): want replaced %v", pids(s), before, tc.ok)
			}
		})
	}
}
