package ceiling

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/goldentest"
	"github.com/onehost/onehost/internal/progress"
)

// TestProgressFile: what progress.json says at each step of a sweep, one golden file per
// step (go test -update rewrites them). The "running" golden file is also what the
// supervisor's dashboard test reads (cmd/supervisor), so the two sides of the file agree.
func TestProgressFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, progress.FileName)
	clock := time.Date(2026, 5, 14, 9, 30, 0, 0, time.UTC)
	w := newProgressWriter(path, zap.NewNop(), func() time.Time { return clock })
	w.p.PID = 4242 // the test binary's own would change from run to run
	heavy := Run{Workload: "heavy", Mode: ModeCluster, Purpose: PurposeSweep, N: 2, Started: clock.Add(time.Second)}
	done := heavy
	done.DurationS, done.RPS, done.ServerCPUUsPerReq, done.P99Ms, done.Verdict = 3.001, 24871.3, 78.42, 4.18, VerdictCPU
	static := Run{Workload: "static", Mode: ModeCluster, Purpose: PurposeSweep, N: 2, Started: clock.Add(5 * time.Second)}

	steps := []struct {
		name string
		do   func()
	}{
		{"begin", func() { w.begin(heavy, 4*time.Second) }},
		{"finish", func() { w.finish(done) }},
		{"running", func() { w.begin(static, 4*time.Second) }},
		{"ended-early", func() { w.end(context.Canceled) }},
	}
	for _, st := range steps {
		clock = clock.Add(1500 * time.Millisecond)
		st.do()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		var p progress.File
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatalf("%s: progress.json does not parse: %v\n%s", st.name, err, b)
		}
		if !p.Updated.Equal(clock) {
			t.Errorf("%s: updated %v, want %v", st.name, p.Updated, clock)
		}
		goldentest.Check(t, "progress/"+st.name+".json", b)
	}
	// Nothing but the file is left in the directory: the temporary files were renamed.
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("directory holds %d entries, want progress.json alone", len(ents))
	}
}

// TestProgressFromSweep: a sweep given a progress file keeps it and leaves it saying
// done, with every run counted and the last one's figures.
func TestProgressFromSweep(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	seed := filepath.Join(dir, "seed.db")
	os.WriteFile(seed, []byte("not really sqlite"), 0o644)
	path := filepath.Join(dir, progress.FileName)
	var seen []progress.File // what the file said as each run was reported
	cfg := SweepConfig{
		Supervisor: exe, Worker: exe, SeedDB: seed, WorkDir: dir, Ns: []int{1}, Modes: []string{ModeSingle},
		Duration: time.Second, Warmup: -1, NoPin: true, Progress: path,
		Workloads: []Workload{{Name: "hello", Path: "/api/hello"}, {Name: "missing", Path: "/api/missing"}},
		Environ:   append(os.Environ(), fakeEnv+"=worker"),
		Report: func(Run) {
			var p progress.File
			b, _ := os.ReadFile(path)
			json.Unmarshal(b, &p)
			seen = append(seen, p)
		},
	}
	cfg.Wrk = wrapWrk(t, dir, exe)
	s, err := NewSweeper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The file is rewritten before the run is reported: a dashboard is never behind the log.
	if len(seen) != 2 || seen[0].State != progress.Running || seen[0].RunsDone != 1 || seen[0].Current != nil ||
		seen[0].Last == nil || seen[0].Last.Workload != "hello" || seen[0].Last.RPS != 20 || seen[0].Last.Verdict == "" {
		t.Errorf("as the first run was reported the file said %+v, want running, hello done at 20 req/s with a verdict", seen)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p progress.File
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("progress.json does not parse: %v\n%s", err, b)
	}
	if p.State != progress.Done || p.PID != os.Getpid() || p.RunsDone != 2 || p.Current != nil || p.Error != "" {
		t.Errorf("at the end: %s\nwant done, pid %d, 2 runs, no current run, no error", b, os.Getpid())
	}
	if l := p.Last; l == nil || l.Workload != "missing" || !strings.Contains(l.Skipped, "404") {
		t.Errorf("last run %+v, want missing, skipped with 404", p.Last)
	}
}

// TestProgressNone: without a path nothing is written and nothing fails.
func TestProgressNone(t *testing.T) {
	w := newProgressWriter("", zap.NewNop(), time.Now)
	w.begin(Run{}, time.Second)
	w.finish(Run{})
	w.end(errors.New("x"))
	if w != nil {
		t.Errorf("got a writer for no path")
	}
}
