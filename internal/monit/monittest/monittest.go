// Package monittest lays out what the dashboard reads, for tests: a ceiling sweep's and a
// fleet's results directories, from the files internal/ceiling's own golden tests write
// (where the two meet: the dashboard reads what the sweep writes without importing it).
package monittest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// ceilingTestdata is internal/ceiling's testdata, found from this file's place, so that
// tests in any package's directory reach it.
var ceilingTestdata = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "ceiling", "testdata")
}()

// CeilingProgressGolden is the progress file internal/ceiling's test writes for a sweep in
// the middle of a run: the dashboard reads what the sweep writes, without importing it, and
// this file is where the two meet.
var CeilingProgressGolden = ceilingTestdata + "/progress/running.json"

// FleetProgressGolden is the progress file internal/ceiling's test writes for `ceiling
// fleet` in the middle of a run (Kind fleet, its runs naming a balancer and H).
var FleetProgressGolden = ceilingTestdata + "/progress/fleet-running.json"

// FleetPlotGolden is one of the fleet's SVG charts, as its golden test draws it.
var FleetPlotGolden = ceilingTestdata + "/fleet-throughput-feed.golden.svg"

// CeilingPlotGolden is one of the sweep's SVG charts, as its golden test draws it.
var CeilingPlotGolden = ceilingTestdata + "/chart.golden.svg"

// FakeCeilingDir lays out a results directory as `make ceiling` does: the sweep's
// progress file in sweep/ (the golden one, its pid and start set by the caller) and the
// model's plots in plots/.
func FakeCeilingDir(t *testing.T, pid int, started time.Time) string {
	t.Helper()
	dir := t.TempDir()
	svg, err := os.ReadFile(CeilingPlotGolden)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string][]byte{
		"sweep/runs.jsonl":     nil,
		"plots/link-heavy.svg": svg, "plots/cpu-per-request.svg": svg, "plots/throughput-heavy.svg": svg,
		"old.svg": svg, // older than the plots: not the last sweep's
	}, "old.svg")
	WriteFakeProgress(t, dir, pid, started)
	return dir
}

// WriteFakeProgress writes dir/sweep/progress.json: the golden one with the sweep's pid
// and the current run's start replaced.
func WriteFakeProgress(t *testing.T, dir string, pid int, started time.Time) {
	t.Helper()
	writeProgressFrom(t, CeilingProgressGolden, filepath.Join(dir, "sweep", "progress.json"), pid, started)
}

// writeProgressFrom writes the progress file golden to path, its pid and its current
// run's start replaced.
func writeProgressFrom(t *testing.T, golden, path string, pid int, started time.Time) {
	t.Helper()
	b, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	p["pid"] = pid
	p["current"].(map[string]any)["started"] = started.UTC().Format(time.RFC3339Nano)
	b, _ = json.Marshal(p)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// FakeFleetDir lays out a results directory as `ceiling fleet -out DIR` does: DIR/fleet
// with its progress file (the golden one, its pid and current run's start set by the
// caller), ceiling.json and its plots beside them; an older sweep's plots in plots/.
func FakeFleetDir(t *testing.T, pid int, started time.Time) string {
	t.Helper()
	dir := t.TempDir()
	AddFakeFleet(t, dir, pid, started)
	return dir
}

// AddFakeFleet writes FakeFleetDir's files into dir.
func AddFakeFleet(t *testing.T, dir string, pid int, started time.Time) {
	t.Helper()
	svg, err := os.ReadFile(FleetPlotGolden)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string][]byte{
		"fleet/runs.jsonl": nil, "fleet/ceiling.json": []byte("{}"),
		"fleet/fleet-cpu-per-request.svg": svg, "fleet/fleet-throughput-feed.svg": svg, "fleet/fleet-throughput-hello.svg": svg,
		"plots/throughput-heavy.svg": svg, // an earlier sweep's
	}, "plots/throughput-heavy.svg")
	writeProgressFrom(t, FleetProgressGolden, filepath.Join(dir, "fleet", "progress.json"), pid, started)
}

// writeFiles writes files (by their path under dir) and dates old an hour back: an earlier
// sweep's, which the page must not take for the last one's.
func writeFiles(t *testing.T, dir string, files map[string][]byte, old string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	then := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, old), then, then)
}
