package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/proctest"
)

// startSupervisorIn runs `supervisor run ARGS...` as a process of its own (this test
// binary, TestMain's "supervisor") in the working directory wd, where a PM2 user runs
// `pm2 start ecosystem.config.js`, and stops it at the end.
func startSupervisorIn(t *testing.T, wd string, args ...string) *runningCluster {
	t.Helper()
	c := &runningCluster{socket: filepath.Join(t.TempDir(), "s.sock"), logs: &syncBuffer{}}
	cmd := exec.Command(os.Args[0], append([]string{"run", "-socket", c.socket}, args...)...)
	cmd.Dir = wd
	cmd.Env = append(os.Environ(), roleEnv+"=supervisor", "GORACE=atexit_sleep_ms=0")
	cmd.Stderr = c.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("supervisor log:\n%s", c.logs)
		}
	})
	return c
}

// TestPM2TemplatesRun: the ecosystem files PM2 7 writes (internal/cluster/testdata/pm2),
// unmodified, start with the apps they name (each a Node program that runs until stopped),
// as PM2 runs them: fork mode, one process each; the `pm2 ecosystem` one watches, and a
// change to index.js reloads the app that watches it and not the other.
func TestPM2TemplatesRun(t *testing.T) {
	t.Parallel()
	proctest.Need(t, "node")
	const idle = "console.log(require('path').basename(__filename), 'up'); setInterval(() => {}, 1 << 30);\n"
	for _, tc := range []struct {
		name  string
		files []string // the apps the template names
		apps  int
	}{
		{"init-simple", []string{"app.js"}, 1},
		{"ecosystem", []string{"index.js", "service-worker/index.js"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wd := t.TempDir()
			tpl, err := os.ReadFile(filepath.Join("..", "..", "internal", "cluster", "testdata", "pm2", tc.name, "ecosystem.config.js"))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(wd, "ecosystem.config.js"), tpl, 0o644)
			for _, f := range tc.files {
				os.MkdirAll(filepath.Join(wd, filepath.Dir(f)), 0o755)
				os.WriteFile(filepath.Join(wd, f), []byte(idle), 0o644)
			}
			c := startSupervisorIn(t, wd, "-config", "ecosystem.config.js")
			var st control.Status
			waitUntil(t, 30*time.Second, "every app online", func() bool {
				var err error
				st, err = c.status()
				return err == nil && len(st.Workers) == tc.apps && everyOnline(st)
			})
			for _, a := range st.Apps {
				if a.Mode != "fork" {
					t.Errorf("app %s in %s mode, want fork (PM2's without instances)", a.Name, a.Mode)
				}
			}
			if tc.name != "ecosystem" {
				return
			}
			before := pidsByApp(st)
			os.WriteFile(filepath.Join(wd, "index.js"), []byte("// changed\n"+idle), 0o644)
			waitUntil(t, 30*time.Second, "index reloaded by watch", func() bool {
				st, err = c.status()
				now := pidsByApp(st)
				return err == nil && everyOnline(st) && now["index/0"] != 0 && now["index/0"] != before["index/0"]
			})
			if now := pidsByApp(st); now["service-worker/0"] != before["service-worker/0"] {
				t.Errorf("service-worker restarted (%d, was %d): it watches ./service-worker only", now["service-worker/0"], before["service-worker/0"])
			}
		})
	}
}
