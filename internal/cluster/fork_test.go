package cluster

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestForkMode: exec_mode fork runs the program as a process of its own with no socket of
// ours (it binds its port alone, as a PM2 fork-mode app does); a reload restarts it, the
// old one gone before the new one starts (the new one could not bind the port otherwise);
// a crash restarts it.
func TestForkMode(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	envFile := filepath.Join(t.TempDir(), "env")
	s, _ := startClusterOpts(t, Config{ExecMode: ExecFork, Env: map[string]string{"FAKE_BIND": addr}},
		Options{Name: "mailer"}, "FAKE_ENV_FILE="+envFile)
	if s.Addr() != "" {
		t.Errorf("Addr() = %q, want none in fork mode", s.Addr())
	}
	rows := s.Status()
	if len(rows) != 1 || rows[0].App != "mailer" || rows[0].Status != StateOnline {
		t.Fatalf("status %+v, want one online process of app mailer (fork mode's default instances: 1)", rows)
	}
	if got := get(t, addr); !strings.Contains(got, "pid") {
		t.Fatalf("GET its own port: %q", got)
	}
	env, _ := os.ReadFile(envFile)
	for _, v := range []string{"LISTEN_FDS=", "LISTEN_PID=", "\nPORT=", "\nHOST="} {
		if strings.Contains("\n"+string(env), v) {
			t.Errorf("fork-mode process got %s: no socket of ours, and its PORT is its own", strings.TrimSpace(v))
		}
	}

	first := rows[0].PID
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Reload(ctx); err != nil {
		t.Fatalf("reload (a restart in fork mode): %v", err)
	}
	r := s.Status()[0]
	if r.PID == first || r.Status != StateOnline || r.Restarts != 1 || !gone(first) {
		t.Fatalf("after reload %+v (first pid %d gone: %v), want a new online process, one restart", r, first, gone(first))
	}
	if got := get(t, addr); !strings.Contains(got, "pid") {
		t.Fatalf("GET after the restart: %q", got)
	}

	second := r.PID
	syscall.Kill(second, syscall.SIGKILL)
	waitFor(t, 15*time.Second, "restarted after kill -9", func() bool {
		r := s.Status()[0]
		return r.Status == StateOnline && r.PID != second && r.PID != 0
	})
}

// TestRestart: Restart replaces every worker one slot at a time, each stopped before its
// successor starts; the cluster keeps serving from the other slots meanwhile.
func TestRestart(t *testing.T) {
	t.Parallel()
	s := startCluster(t, Config{Instances: 2})
	before := pids(s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	for i, r := range s.Status() {
		if r.PID == before[i] || !gone(before[i]) || r.Status != StateOnline || r.Restarts != 1 {
			t.Errorf("slot %d after restart: %+v (was pid %d), want a new online worker, the old one gone, one restart", i, r, before[i])
		}
	}
	if got := get(t, s.Addr()); !strings.HasPrefix(got, "slot ") {
		t.Errorf("GET after restart: %q", got)
	}
}
