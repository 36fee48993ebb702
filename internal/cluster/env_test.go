package cluster

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestWithoutVars(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		keys []string
		want []string
	}{
		{"none named", []string{"A=1", "B=2"}, nil, []string{"A=1", "B=2"}},
		{"every entry of a key", []string{"A=1", "LISTEN_PID=1", "B=", "LISTEN_PID=2"}, []string{"LISTEN_PID", "B"}, []string{"A=1"}},
		{"a key is not a prefix", []string{"LISTEN_FDS_X=1", "LISTEN_FDS=1"}, []string{"LISTEN_FDS"}, []string{"LISTEN_FDS_X=1"}},
		{"an entry without =", []string{"ODD", "A=1"}, []string{"ODD"}, []string{"A=1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := withoutVars(tc.env, tc.keys...); !slices.Equal(got, tc.want) {
				t.Errorf("withoutVars(%q, %q) = %q, want %q", tc.env, tc.keys, got, tc.want)
			}
		})
	}
}

// TestWorkerEnvironment: the variables of the supervisor's own environment that would say
// something false about a worker (another socket activation, a watchdog, a Node channel)
// are absent from the worker's, not set empty: gunicorn's int(os.environ.get('LISTEN_FDS',
// 0)) dies on an empty value.
func TestWorkerEnvironment(t *testing.T) {
	t.Parallel()
	inherited := []string{"LISTEN_FDS=7", "LISTEN_PID=1", "LISTEN_FDNAMES=other", "NODE_CHANNEL_FD=9",
		"NODE_CHANNEL_SERIALIZATION_MODE=json", "WATCHDOG_USEC=5", "WATCHDOG_PID=1", "NOTIFY_SOCKET=/nowhere"}
	tests := []struct {
		name     string
		selfBind bool
		set      []string // KEY=VALUE that must be there
		absent   []string // keys that must not be there at all
	}{
		{"inherited socket", false,
			[]string{"LISTEN_FDS=1", "LISTEN_FDNAMES=http"},
			[]string{"LISTEN_PID", "NODE_CHANNEL_FD", "NODE_CHANNEL_SERIALIZATION_MODE", "WATCHDOG_USEC", "WATCHDOG_PID"}},
		{"self_bind", true,
			[]string{"HOST=127.0.0.1"},
			[]string{"LISTEN_FDS", "LISTEN_FDNAMES", "LISTEN_PID", "NODE_CHANNEL_FD", "NODE_CHANNEL_SERIALIZATION_MODE", "WATCHDOG_USEC", "WATCHDOG_PID"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			envFile := filepath.Join(t.TempDir(), "env")
			cfg := Config{Instances: 1, SelfBind: tc.selfBind}
			if tc.selfBind {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				cfg.Listen = ln.Addr().String()
				ln.Close()
			}
			startCluster(t, cfg, append(inherited, "FAKE_ENV_FILE="+envFile)...)
			var b []byte
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				var err error
				if b, err = os.ReadFile(envFile); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the worker wrote no environment: %v", err)
				}
			}
			env := strings.Split(string(b), "\n")
			for _, kv := range tc.set {
				if !slices.Contains(env, kv) {
					t.Errorf("worker's environment lacks %s", kv)
				}
			}
			for _, kv := range env {
				k, _, _ := strings.Cut(kv, "=")
				if slices.Contains(tc.absent, k) {
					t.Errorf("worker's environment has %q, want %s absent", kv, k)
				}
			}
			// The notify socket is the worker's own, never the inherited one.
			if slices.Contains(env, "NOTIFY_SOCKET=/nowhere") {
				t.Error("worker inherited the supervisor's NOTIFY_SOCKET")
			}
		})
	}
}
