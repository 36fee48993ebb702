package cluster

import (
	"testing"
	"time"

	"github.com/onehost/onehost/internal/cluster/clustertest"
	"github.com/onehost/onehost/internal/ipc"
)

// TestMemoryRestartUnderLoadDropsNothing: every worker holds 128 MB against a limit of
// 96 MB, so each is replaced by max_memory_restart soon after it starts, again and again,
// while clients keep sending requests on keep-alive and fresh connections: a memory
// restart is a graceful reload of one slot, and none of those requests may fail.
func TestMemoryRestartUnderLoadDropsNothing(t *testing.T) {
	t.Parallel()
	s := startCluster(t, Config{Instances: 2, MaxMemoryRestart: 96 << 20,
		StatsInterval: Duration(100 * time.Millisecond)}, "FAKE_MODE=alloc:128")
	l := clustertest.StartLoad("http://"+s.Addr()+"/", 4)
	restarts := func() int {
		n := 0
		for _, r := range s.Status() {
			n += r.Restarts
		}
		return n
	}
	waitFor(t, 30*time.Second, "three memory restarts under load", func() bool { return restarts() >= 3 })
	l.Finish(t)
	t.Logf("%d memory restarts", restarts())
}

func TestHealthOf(t *testing.T) {
	tests := []struct {
		name      string
		m         ipc.Msg
		want, why string
	}{
		{"healthy", ipc.Msg{Healthy: true}, HealthOK, ""},
		{"unhealthy", ipc.Msg{Error: "database file was deleted"}, HealthUnhealthy, "database file was deleted"},
		{"says nothing", ipc.Msg{Requests: 3}, "", ""},
		{"healthy wins", ipc.Msg{Healthy: true, Error: "stale"}, HealthOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, why := healthOf(tt.m); got != tt.want || why != tt.why {
				t.Errorf("healthOf(%+v) = %q %q, want %q %q", tt.m, got, why, tt.want, tt.why)
			}
		})
	}
}
