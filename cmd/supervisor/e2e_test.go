package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/seedtest"

	"github.com/onehost/onehost/internal/cluster/clustertest"
)

// TestRealWorkerCluster runs the real worker, two instances, under `supervisor run`:
// the feed API answers through the shared port, and a reload under load loses nothing.
func TestRealWorkerCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the worker and copies the seed database")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "worker")
	build := exec.Command("go", "build", "-o", bin, "github.com/onehost/onehost/cmd/worker")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build worker: %v\n%s", err, out)
	}
	db := seedtest.Path(t)
	logDir := t.TempDir()
	c := startRun(t, fmt.Sprintf("instances: 2\nenv: {SQLITE_PATH: %q, JWT_SECRET: twelve-dollar-challenge}\n", db),
		"-log-dir", logDir, "--", bin)
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + st.Addr
	want, err := os.ReadFile("../../testdata/golden/post-1.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/health", "/posts/1"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s = %d %s, want 200", path, resp.StatusCode, body)
		}
		if path == "/posts/1" && string(body) != string(want) {
			t.Errorf("GET /posts/1 = %s, want %s", body, want)
		}
	}
	l := clustertest.StartLoad(base+"/posts/1", 4)
	time.Sleep(200 * time.Millisecond)
	out, err := c.cmd("reload")
	time.Sleep(200 * time.Millisecond)
	r := l.Stop()
	if err != nil {
		t.Fatalf("reload: %v (%s)", err, out)
	}
	t.Logf("load: %d ok, %d failed", r.OK, r.Failed)
	if r.OK == 0 {
		t.Fatal("no request succeeded")
	}
	if r.Failed > 0 {
		t.Errorf("%d requests failed during the reload, first: %v", r.Failed, r.FirstErr)
	}
	// Each slot's own log file holds its workers' lines, both generations of them.
	for slot := range 2 {
		var b []byte
		var n int
		// The lines reach the file through the supervisor's copy of the worker's pipe.
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			b, _ = os.ReadFile(filepath.Join(logDir, fmt.Sprintf("worker-%d.log", slot)))
			if n = strings.Count(string(b), `"msg":"serving"`); n >= 2 {
				break
			}
		}
		if n != 2 || !strings.Contains(string(b), fmt.Sprintf(`"worker":%d`, slot)) {
			t.Errorf("worker-%d.log has %d \"serving\" lines, want 2 (before and after the reload), from slot %d:\n%s", slot, n, slot, b)
		}
	}
	after, _ := c.status()
	for i, w := range after.Workers {
		if w.Status != "online" || w.PID == st.Workers[i].PID {
			t.Errorf("after reload: %+v, want online with a new pid (was %d)", w, st.Workers[i].PID)
		}
	}
}
