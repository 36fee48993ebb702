package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/seedtest"
)

// upgradeKeepsHeldApps: an upgrade re-executes the supervisor with its command line, whose
// file lists every app; an app stopped (`stop APP`) stays stopped through it, and one
// deleted (`delete APP`) stays deleted, while the running app's workers serve on.
func upgradeKeepsHeldApps(t *testing.T, bins binaries) {
	dir := t.TempDir()
	var apps []string
	for _, name := range []string{"api", "jobs"} {
		d := filepath.Join(dir, name)
		os.Mkdir(d, 0o755)
		db := seedtest.Tiny(t, d, false)
		apps = append(apps, fmt.Sprintf(`{"name": %q, "script": %q, "interpreter": "none", "exec_mode": "cluster", "instances": 1,
   "wait_ready": true, "env": {"HOST": "127.0.0.1", "PORT": %s, "SQLITE_PATH": %q, "PRODUCTS_PATH": %q, "JWT_SECRET": %q, "GORACE": "atexit_sleep_ms=0"}}`,
			name, bins.worker, freePort(t), db, filepath.Join(d, "products.db"), relSecret))
	}
	eco := filepath.Join(dir, "ecosystem.config.json")
	os.WriteFile(eco, []byte(`{"apps": [`+apps[0]+",\n"+apps[1]+"]}"), 0o600)
	sock := filepath.Join(dir, "s.sock")
	ctl := &runningCluster{socket: sock}
	startSupervisorArgs(t, bins.supervisor, "-config", eco, "-socket", sock)
	var st control.Status
	waitUntil(t, 60*time.Second, "both apps online", func() bool {
		var err error
		st, err = ctl.status()
		return err == nil && len(st.Workers) == 2 && everyOnline(st)
	})

	appState := func() map[string]string {
		st, err := ctl.status()
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		m := map[string]string{}
		for _, a := range st.Apps {
			m[a.Name] = a.Status
		}
		return m
	}
	upgrade := func() {
		t.Helper()
		if out, err := ctl.cmd("upgrade"); err != nil {
			t.Fatalf("upgrade: %v\n%s", err, out)
		}
	}

	if out, err := ctl.cmd("stop", "jobs"); err != nil {
		t.Fatalf("stop jobs: %v\n%s", err, out)
	}
	st, _ = ctl.status()
	api := workerPIDs(st)
	upgrade()
	if got := appState(); got["api"] != "running" || got["jobs"] != "stopped" {
		t.Errorf("after stop jobs and an upgrade: apps %v, want api running and jobs stopped", got)
	}
	if st, _ := ctl.status(); !slices.Equal(workerPIDs(st), api) {
		t.Errorf("after the upgrade: workers %v, want api's %v alone, unchanged", workerPIDs(st), api)
	}

	if out, err := ctl.cmd("delete", "jobs"); err != nil {
		t.Fatalf("delete jobs: %v\n%s", err, out)
	}
	upgrade()
	if got := appState(); len(got) != 1 || got["api"] != "running" {
		t.Errorf("after delete jobs and an upgrade: apps %v, want api alone", got)
	}
	// Deleted is gone: `start` names no such app, as after a delete without an upgrade.
	if out, err := ctl.cmd("start", "jobs"); err == nil {
		t.Errorf("start of a deleted app: no error\n%s", out)
	}
}
