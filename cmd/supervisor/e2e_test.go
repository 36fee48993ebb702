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

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/seedtest"
	"github.com/onehost/onehost/internal/token"

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
	// One worker owns the database's writes, the other forwards its writes to it.
	waitRoles := func(what string) control.Status {
		t.Helper()
		var st control.Status
		deadline := time.Now().Add(5 * time.Second)
		for {
			st, err = c.status()
			roles := map[string]int{}
			for _, w := range st.Workers {
				roles[w.Role]++
			}
			if err == nil && roles["owner"] == 1 && roles["follower"] == 1 {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: workers' write roles %v (%v), want one owner and one follower", what, roles, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitRoles("before the reload")
	table, _ := c.cmd("status")
	if !strings.Contains(table, "role") || !strings.Contains(table, "owner") {
		t.Errorf("status table without the role column:\n%s", table)
	}

	// A reload under reads and writes loses nothing: the owner hands its writes over while
	// it drains, and the workers that stay never answer a write with an error.
	reads := clustertest.StartLoad(base+"/posts/1", 4)
	writes := clustertest.StartLoadFunc(4, func(hc *http.Client, client, i int) error {
		user := 1 + (client*7919+i)%20000
		req, _ := http.NewRequest("POST", fmt.Sprintf("%s/posts/%d/like", base, 1+(client*104729+i*31)%500000), nil)
		req.Header.Set("Authorization", "Bearer "+token.Sign([]byte("twelve-dollar-challenge"), int64(user), "load", time.Now(), time.Now().Add(time.Hour)))
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 && resp.StatusCode != 201 {
			return fmt.Errorf("like: %d %s", resp.StatusCode, b)
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond)
	out, err := c.cmd("reload")
	time.Sleep(200 * time.Millisecond)
	rr, wr := reads.Stop(), writes.Stop()
	if err != nil {
		t.Fatalf("reload: %v (%s)", err, out)
	}
	t.Logf("during the reload: reads %d ok, %d failed; likes %d ok, %d failed", rr.OK, rr.Failed, wr.OK, wr.Failed)
	for _, r := range []struct {
		what string
		clustertest.Result
	}{{"reads", rr}, {"likes", wr}} {
		if r.OK == 0 {
			t.Errorf("no %s succeeded", r.what)
		}
		if r.Failed > 0 {
			t.Errorf("%d %s failed during the reload, first: %v", r.Failed, r.what, r.FirstErr)
		}
	}
	waitRoles("after the reload")
	// Each slot's own log file holds its workers' lines, both generations of them, as the
	// worker wrote them: console lines, as the supervisor's (-log-format console).
	for slot := range 2 {
		var b []byte
		var n int
		// The lines reach the file through the supervisor's copy of the worker's pipe.
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			b, _ = os.ReadFile(filepath.Join(logDir, fmt.Sprintf("worker-%d.log", slot)))
			if n = strings.Count(string(b), "  INFO  serving  {"); n >= 2 {
				break
			}
		}
		if n != 2 || !strings.Contains(string(b), fmt.Sprintf(`"worker": %d`, slot)) {
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
