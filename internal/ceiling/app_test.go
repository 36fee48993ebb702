package ceiling

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/proctest"
)

func TestNodeScript(t *testing.T) {
	for _, tc := range []struct {
		name   string
		argv   []string
		script string
		args   int
		ok     bool
	}{
		{"script", []string{"node", "server.js"}, "server.js", 0, true},
		{"script and args", []string{"/usr/bin/node", "server.js", "--port", "1"}, "server.js", 2, true},
		{"node options", []string{"node", "--max-old-space-size=512", "server.js"}, "", 0, false},
		{"not node", []string{"gunicorn", "app:app"}, "", 0, false},
		{"node alone", []string{"node"}, "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script, args, ok := NodeScript(tc.argv)
			if script != tc.script || len(args) != tc.args || ok != tc.ok {
				t.Errorf("NodeScript(%q) = %q, %q, %v; want %q, %d args, %v", tc.argv, script, args, ok, tc.script, tc.args, tc.ok)
			}
		})
	}
}

func TestNewSweeperAppChecks(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  SweepConfig
	}{
		{"our workload", SweepConfig{App: []string{"node", "a.js"}, Workloads: DefaultWorkloads("mix.lua")[:1]}},
		{"single mode", SweepConfig{App: []string{"node", "a.js"}, Modes: []string{ModeSingle}}},
		{"nginx mode", SweepConfig{AppConfig: "eco.config.js", Modes: []string{ModeNginx}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.WorkDir, tc.cfg.NoPin = t.TempDir(), true
			if _, err := NewSweeper(tc.cfg); err == nil {
				t.Error("NewSweeper accepted it")
			}
		})
	}
}

// TestSweepNodeApp sweeps an unmodified node:http app under the real supervisor at N = 1, 2
// for a second each, and asks of the result only what the report is built on: a judged run
// per N and a model row. Performance is not asserted (the machine is shared).
func TestSweepNodeApp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the supervisor and runs real servers")
	}
	proctest.Need(t, "node")
	dir := t.TempDir()
	// Our supervisor and our generator (bench/autocannon), so node is all it needs.
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/onehost/onehost/cmd/supervisor", "github.com/onehost/onehost/bench/autocannon")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the supervisor and autocannon: %v\n%s", err, out)
	}
	sup := filepath.Join(dir, "supervisor")
	app, err := filepath.Abs("testdata/app.js")
	if err != nil {
		t.Fatal(err)
	}
	var runs []Run
	s, err := NewSweeper(SweepConfig{
		Supervisor: sup, Autocannon: filepath.Join(dir, "autocannon"), WorkDir: dir,
		App: []string{"node", app}, Workloads: []Workload{AppRequest("GET", "/", nil, "")},
		Modes: []string{ModeCluster}, Ns: []int{1, 2}, Duration: time.Second, Warmup: -1, NoPin: true,
		ConnsPerWorker: 4, Environ: os.Environ(),
		Report: func(r Run) { runs = append(runs, r) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	byN := map[int]Run{}
	for _, r := range runs {
		t.Log(r.Line())
		if r.Purpose == PurposeSweep {
			byN[r.N] = r
		}
	}
	for _, n := range []int{1, 2} {
		r, ok := byN[n]
		switch {
		case !ok:
			t.Errorf("N=%d: no run", n)
		case r.Skipped != "":
			t.Errorf("N=%d: skipped: %s", n, r.Skipped)
		case r.Workload != AppWorkload || r.Mode != ModeCluster || r.Generator != "autocannon" || r.Requests == 0 || r.Verdict == "":
			t.Errorf("N=%d: got %s, want the app's requests served and judged", n, r.Line())
		}
	}
	var rows int
	for _, m := range Fit(runs) {
		if m.Workload == AppWorkload && m.Mode == ModeCluster {
			rows++
		}
	}
	// The fit takes only runs the server's CPU or the link bound; on a shared machine a
	// run may be judged otherwise, and then the row is missing for a reason the runs say.
	if rows == 0 {
		fitting := 0
		for _, r := range runs {
			if fitPoint(r) {
				fitting++
			}
		}
		if fitting > 0 {
			t.Errorf("no model row for the app, though %d run(s) are fit points", fitting)
		} else {
			t.Logf("no model row: no run was judged server- or link-bound here (shared machine)")
		}
	}
}
