package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/goldentest"
	"github.com/onehost/onehost/internal/proctest"
)

// ceilingProgressGolden is the progress file internal/ceiling's test writes for a sweep in
// the middle of a run: the dashboard reads what the sweep writes, without importing it, and
// this file is where the two meet.
const ceilingProgressGolden = "../../internal/ceiling/testdata/progress/running.json"

// fleetProgressGolden is the progress file internal/ceiling's test writes for `ceiling
// fleet` in the middle of a run (Kind fleet, its runs naming a balancer and H).
const fleetProgressGolden = "../../internal/ceiling/testdata/progress/fleet-running.json"

// fleetPlotGolden is one of the fleet's SVG charts, as its golden test draws it.
const fleetPlotGolden = "../../internal/ceiling/testdata/fleet-throughput-feed.golden.svg"

// ceilingPlotGolden is one of the sweep's SVG charts, as its golden test draws it.
const ceilingPlotGolden = "../../internal/ceiling/testdata/chart.golden.svg"

// fakeCeilingDir lays out a results directory as `make ceiling` does: the sweep's
// progress file in sweep/ (the golden one, its pid and start set by the caller) and the
// model's plots in plots/.
func fakeCeilingDir(t *testing.T, pid int, started time.Time) string {
	t.Helper()
	dir := t.TempDir()
	svg, err := os.ReadFile(ceilingPlotGolden)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"sweep/runs.jsonl":     nil,
		"plots/link-heavy.svg": svg, "plots/cpu-per-request.svg": svg, "plots/throughput-heavy.svg": svg,
		"old.svg": svg, // older than the plots: not the last sweep's
	} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, "old.svg"), old, old)
	writeFakeProgress(t, dir, pid, started)
	return dir
}

// writeFakeProgress writes dir/sweep/progress.json: the golden one with the sweep's pid
// and the current run's start replaced.
func writeFakeProgress(t *testing.T, dir string, pid int, started time.Time) {
	t.Helper()
	writeProgressFrom(t, ceilingProgressGolden, filepath.Join(dir, "sweep", "progress.json"), pid, started)
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

// fakeFleetDir lays out a results directory as `ceiling fleet -out DIR` does: DIR/fleet
// with its progress file (the golden one, its pid and current run's start set by the
// caller), ceiling.json and its plots beside them; an older sweep's plots in plots/.
func fakeFleetDir(t *testing.T, pid int, started time.Time) string {
	t.Helper()
	dir := t.TempDir()
	addFakeFleet(t, dir, pid, started)
	return dir
}

// addFakeFleet writes fakeFleetDir's files into dir.
func addFakeFleet(t *testing.T, dir string, pid int, started time.Time) {
	t.Helper()
	svg, err := os.ReadFile(fleetPlotGolden)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"fleet/runs.jsonl": nil, "fleet/ceiling.json": []byte("{}"),
		"fleet/fleet-cpu-per-request.svg": svg, "fleet/fleet-throughput-feed.svg": svg, "fleet/fleet-throughput-hello.svg": svg,
		"plots/throughput-heavy.svg": svg, // an earlier sweep's
	} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, "plots/throughput-heavy.svg"), old, old)
	writeProgressFrom(t, fleetProgressGolden, filepath.Join(dir, "fleet", "progress.json"), pid, started)
}

// TestDashboardFrame: the JSON of one frame (golden file) from a monit sample.
func TestDashboardFrame(t *testing.T) {
	st := monitState{Addr: "127.0.0.1:3000", Steering: "bpf-rr",
		Workers: []monitRow{
			{Worker: control.Worker{ID: 0, PID: 4101, Status: "online", UptimeS: 312, Restarts: 1, CPUPercent: 23.44,
				RSSBytes: 41 << 20, RPS: 2412.26, Connections: 12, Health: cluster.HealthOK}},
			{Worker: control.Worker{ID: 1, Status: "waiting-restart", Restarts: 4}},
		},
		Host: &hostRates{CPUs: []coreBusy{{0, 87.54}, {1, 12}}, RxPerS: 1.25e6, TxPerS: 3.4e6}}
	d := newDashboard(func(context.Context) monitState { return st }, "")
	d.now = func() time.Time { return time.UnixMilli(1_778_750_000_000) }
	b, err := json.MarshalIndent(d.frame(context.Background()), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	goldentest.Check(t, "dashboard/frame.json", append(b, '\n'))
}

// TestDashboardCeiling: what the panel shows of a results directory.
func TestDashboardCeiling(t *testing.T) {
	now := time.Now()
	dir := fakeCeilingDir(t, 4242, now.Add(-2500*time.Millisecond))
	cases := []struct {
		name  string
		dir   string
		alive bool
		check func(t *testing.T, c *dashCeiling)
	}{
		{"a sweep running", dir, true, func(t *testing.T, c *dashCeiling) {
			if c.State != "running" || c.RunsDone != 1 || c.Current == nil || c.Last == nil {
				t.Fatalf("got %+v, want running with a current and a last run", c)
			}
			if cur := c.Current; cur.Workload != "static" || cur.Mode != "cluster" || cur.N != 2 || cur.ExpectedS != 4 || cur.ElapsedS != 2.5 {
				t.Errorf("current %+v, want static on the cluster of 2, 2.5 s of 4", cur)
			}
			if l := c.Last; l.Workload != "heavy" || l.RPS != 24871.3 || l.CPUUsPerReq != 78.42 || l.Verdict != "cpu" {
				t.Errorf("last %+v, want heavy at 24871.3 req/s, 78.42 µs, cpu", l)
			}
			var names []string
			for _, p := range c.Plots {
				names = append(names, p.Name)
				if !strings.HasPrefix(p.URL, "ceiling/plots/"+p.Name+".svg?v=") {
					t.Errorf("plot %s at %q, want ceiling/plots/%[1]s.svg?v=...", p.Name, p.URL)
				}
			}
			if got := strings.Join(names, " "); got != "throughput-heavy cpu-per-request link-heavy" {
				t.Errorf("plots %q, want the plots/ directory's, throughput first", got)
			}
		}},
		{"a fleet running", fakeFleetDir(t, 4242, now.Add(-1500*time.Millisecond)), true, func(t *testing.T, c *dashCeiling) {
			if c.State != "running" || c.Kind != "fleet" || c.RunsDone != 1 || c.Current == nil || c.Last == nil {
				t.Fatalf("got %+v, want a fleet running with a current and a last run", c)
			}
			if cur := c.Current; cur.Workload != "feed" || cur.Balancer != "nftables" || cur.Hosts != 2 || cur.N != 1 || cur.ElapsedS != 1.5 {
				t.Errorf("current %+v, want feed behind nftables on 2 hosts × 1 worker, 1.5 s in", cur)
			}
			if l := c.Last; l.Workload != "hello" || l.Balancer != "haproxy" || l.RPS != 23714.2 || l.CPUUsPerReq != 14.2 || l.BalancerUsPerReq != 51.9 {
				t.Errorf("last %+v, want hello behind haproxy at 23714.2 req/s, 14.2 µs servers, 51.9 µs balancer", l)
			}
			var names []string
			for _, p := range c.Plots {
				names = append(names, p.Name)
				if !strings.HasPrefix(p.URL, "ceiling/fleet/"+p.Name+".svg?v=") {
					t.Errorf("plot %s at %q, want ceiling/fleet/%[1]s.svg?v=...", p.Name, p.URL)
				}
			}
			if got := strings.Join(names, " "); got != "fleet-throughput-feed fleet-throughput-hello fleet-cpu-per-request" {
				t.Errorf("plots %q, want the fleet's, throughput first", got)
			}
		}},
		{"pointed at the fleet's own directory", filepath.Join(fakeFleetDir(t, 4242, now), "fleet"), true, func(t *testing.T, c *dashCeiling) {
			if c.State != "running" || c.Kind != "fleet" || c.Current == nil || c.Current.Hosts != 2 || len(c.Plots) != 3 {
				t.Fatalf("got %+v, want the fleet running, its three plots", c)
			}
			if p := c.Plots[0]; p.Name != "fleet-throughput-feed" || !strings.HasPrefix(p.URL, "ceiling/fleet-throughput-feed.svg?v=") {
				t.Errorf("first plot %+v, want fleet-throughput-feed at ceiling/fleet-throughput-feed.svg", p)
			}
		}},
		{"its process gone", dir, false, func(t *testing.T, c *dashCeiling) {
			if c.State != "interrupted" || c.Current != nil || c.Last == nil {
				t.Errorf("got %+v, want interrupted, no current run, the last one kept", c)
			}
		}},
		{"no results yet", filepath.Join(t.TempDir(), "absent"), true, func(t *testing.T, c *dashCeiling) {
			if c.State != "none" || c.Current != nil || len(c.Plots) != 0 || c.Error != "" {
				t.Errorf("got %+v, want none", c)
			}
			if !strings.Contains(c.Fill, "make ceiling CEILING_OUT="+c.Dir) || !strings.Contains(c.Fill, "APP=") {
				t.Errorf("fill %q, want the commands that fill %s", c.Fill, c.Dir)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, readCeiling(tc.dir, now, func(int) bool { return tc.alive }))
		})
	}

	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "progress.json"), []byte("{half"), 0o644)
	if c := readCeiling(bad, now, processAlive); c.State != "unreadable" || !strings.Contains(c.Error, "progress.json") {
		t.Errorf("a broken progress file: got %+v, want unreadable, naming the file", c)
	}
}

// TestProcessAlive: the dashboard's check that a sweep's process still runs says no for a
// sweep that has exited, reaped or not (a zombie answers kill(pid, 0) all the same).
func TestProcessAlive(t *testing.T) {
	zombie, reap := proctest.Zombie(t)
	tests := []struct {
		name string
		pid  int
		want bool
	}{
		{"this process", os.Getpid(), true},
		{"init, another user's where not root", 1, true},
		{"exited, not reaped", zombie, false},
		{"no pid", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := processAlive(tc.pid); got != tc.want {
				t.Errorf("processAlive(%d) = %v, want %v", tc.pid, got, tc.want)
			}
		})
	}
	reap()
	if processAlive(zombie) {
		t.Errorf("processAlive(%d) after it was reaped = true", zombie)
	}
}

// TestDashboardPlots: GET /ceiling/... serves the directory's SVG files and nothing else.
func TestDashboardPlots(t *testing.T) {
	dir := fakeCeilingDir(t, 1, time.Now())
	outside := filepath.Join(t.TempDir(), "secret.svg")
	os.WriteFile(outside, []byte("<svg>secret</svg>"), 0o644)
	os.Symlink(outside, filepath.Join(dir, "plots", "escape.svg"))
	os.WriteFile(filepath.Join(dir, "plots", ".hidden.svg"), []byte("<svg/>"), 0o644)
	srv := httptest.NewServer(newDashboard(nil, dir).handler())
	defer srv.Close()
	cases := []struct {
		path string
		want int
	}{
		{"/ceiling/plots/throughput-heavy.svg?v=1", 200},
		{"/ceiling/old.svg", 200},
		{"/ceiling/sweep/progress.json", 404},
		{"/ceiling/plots/escape.svg", 404}, // a link out of the directory
		{"/ceiling/plots/.hidden.svg", 404},
		{"/ceiling/%2e%2e/secret.svg", 404},
		{"/ceiling/plots/..%2f..%2fsecret.svg", 404},
		{"/ceiling/plots/", 404},
		{"/ceiling/absent.svg", 404},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			resp, err := http.Get(srv.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("GET %s: %d, want %d", tc.path, resp.StatusCode, tc.want)
			}
			if strings.Contains(string(body), "secret") {
				t.Errorf("GET %s served the file outside the directory", tc.path)
			}
			if tc.want == 200 {
				if ct := resp.Header.Get("Content-Type"); ct != "image/svg+xml" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
					t.Errorf("GET %s: Content-Type %q, CSP %q; want an SVG that runs nothing", tc.path, ct, resp.Header.Get("Content-Security-Policy"))
				}
			}
		})
	}
	// Without a ceiling directory there is nothing to serve at all.
	none := httptest.NewServer(newDashboard(nil, "").handler())
	defer none.Close()
	if resp, err := http.Get(none.URL + "/ceiling/old.svg"); err != nil || resp.StatusCode != 404 {
		t.Errorf("no ceiling directory: %v %v, want 404", resp.StatusCode, err)
	}
}

// TestDashboardEvents: a stream starts with the backlog and then gets a frame each
// interval; streams beyond the bound are refused; every stream ends when the dashboard
// stops.
func TestDashboardEvents(t *testing.T) {
	n := 0
	d := newDashboard(func(context.Context) monitState {
		n++ // only run's goroutine calls sample
		return monitState{Addr: fmt.Sprint("sample-", n)}
	}, "")
	d.interval = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	go d.run(ctx)
	srv := httptest.NewServer(d.handler())
	defer srv.Close()
	time.Sleep(100 * time.Millisecond) // a few frames of backlog

	open := func() (*http.Response, *bufio.Reader) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/events")
		if err != nil {
			t.Fatal(err)
		}
		return resp, bufio.NewReader(resp.Body)
	}
	resp, r := open()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("GET /events: %d %q", resp.StatusCode, ct)
	}
	var addrs []string
	for len(addrs) < 8 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d frames: %v", len(addrs), err)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var f dashFrame
			if err := json.Unmarshal([]byte(data), &f); err != nil {
				t.Fatalf("frame %q: %v", data, err)
			}
			addrs = append(addrs, f.Addr)
		}
	}
	for i, a := range addrs {
		if a != fmt.Sprint("sample-", i+1) {
			t.Fatalf("frames %v, want sample-1, sample-2, ... in order (backlog first, none lost)", addrs)
		}
	}

	streams := []*http.Response{resp}
	for range dashMaxStreams - 1 {
		resp, _ := open()
		if resp.StatusCode != 200 {
			t.Fatalf("stream %d refused: %d", len(streams)+1, resp.StatusCode)
		}
		streams = append(streams, resp)
	}
	if extra, _ := open(); extra.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("stream %d: %d, want 503", dashMaxStreams+1, extra.StatusCode)
	} else {
		extra.Body.Close()
	}
	// One closed makes room for another.
	streams[len(streams)-1].Body.Close()
	streams = streams[:len(streams)-1]
	waitUntil(t, 5*time.Second, "a slot freed by a closed stream", func() bool {
		resp, _ := open()
		if resp.StatusCode == 200 {
			streams = append(streams, resp)
			return true
		}
		resp.Body.Close()
		return false
	})

	cancel()
	<-d.done
	for i, s := range streams {
		done := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, s.Body); done <- err }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("stream %d still open 5 s after the dashboard stopped", i)
		}
		s.Body.Close()
	}
}

// TestDashboardAssets: the page and what it loads are in the binary, and the page names
// nothing from elsewhere (it must work with no network).
func TestDashboardAssets(t *testing.T) {
	srv := httptest.NewServer(newDashboard(nil, "").handler())
	defer srv.Close()
	for _, p := range []string{"/", "/dashboard.js", "/dashboard.css", "/favicon.svg"} {
		code, body, err := fetch(srv.URL+p, 5*time.Second)
		if err != nil || code != 200 || len(body) == 0 {
			t.Errorf("GET %s: %d, %d bytes, %v", p, code, len(body), err)
		}
		body = strings.ReplaceAll(body, `xmlns="http://www.w3.org/2000/svg"`, "") // a name, not a download
		for _, ref := range []string{"http://", "https://", "//cdn", "@import"} {
			if strings.Contains(body, ref) {
				t.Errorf("GET %s refers to %q: every asset must be the supervisor's own", p, ref)
			}
		}
	}
}

// TestDashboardChromium: the page in a real headless Chromium against a real supervisor
// with two workers under light load: it loads without console errors, its charts move,
// the ceiling panel shows a sweep's run and plots, and a screenshot is taken (copied to
// $ONEHOST_SCREENSHOT_DIR/dashboard.png when that is set, for the docs); then a fleet's run
// and plots in the same directory (dashboard-fleet.png).
func TestDashboardChromium(t *testing.T) {
	b := startBrowser(t) // first: skips (or fails, in CI) before anything starts when chromium is absent
	ceil := fakeCeilingDir(t, os.Getpid(), time.Now().Add(-1500*time.Millisecond))
	c := startRun(t, fmt.Sprintf("instances: 2\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv),
		"-dashboard", "127.0.0.1:0", "-dashboard-ceiling", ceil, "--", os.Args[0])
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	stopLoad := startLoad(t, st.Addr)
	defer stopLoad()
	url := dashboardURL(t, c)

	// A bound, not a wait: the screenshot for the docs waits 20 s more, on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	page, err := b.page(ctx, 1280, 720)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.navigate(ctx, page, url); err != nil {
		t.Fatal(err)
	}
	type pageState struct {
		Frames, Draws, Points, Plots int
		LastT                        int64
		TotalRPS                     float64
		Connected                    bool
	}
	read := func() pageState {
		var s pageState
		if err := b.eval(ctx, page, "window.dashboard", &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	var first pageState
	waitUntil(t, 10*time.Second, "the page drawing frames with requests served", func() bool {
		first = read()
		return first.Connected && first.Frames >= 2 && first.TotalRPS > 0 && first.Points > 0
	})
	// The charts move: new frames are drawn, with more points, a second or two later.
	time.Sleep(2500 * time.Millisecond)
	second := read()
	shotDir := os.Getenv("ONEHOST_SCREENSHOT_DIR")
	if shotDir != "" {
		// For the docs: charts with some history, and the sweep's run well under way.
		time.Sleep(20 * time.Second)
	}
	writeFakeProgress(t, ceil, os.Getpid(), time.Now().Add(-2500*time.Millisecond))
	time.Sleep(1100 * time.Millisecond) // a frame that has read it
	if second.Frames <= first.Frames || second.Draws <= first.Draws || second.LastT <= first.LastT || second.Points <= first.Points {
		t.Errorf("page state %+v then %+v 2.5 s later: want more frames, draws and points", first, second)
	}
	var dom map[string]string
	err = b.eval(ctx, page, `(() => { const t = (id) => document.getElementById(id).textContent;
		const img = document.getElementById("plot-img");
		return {rps: t("kpi-rps"), workers: t("kpi-workers"), rows: String(document.querySelectorAll("#workers tbody tr").length),
			state: t("ceiling-state"), current: t("cur-name"), verdict: t("last-verdict"), lastCPU: t("last-cpu"),
			plot: img.complete && img.naturalWidth > 0 ? img.alt : "not loaded"}; })()`, &dom)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"workers": "2 / 2", "rows": "2", "state": "running", "current": "static · cluster · N=2",
		"verdict": "CPU", "lastCPU": "78.4"}
	for k, v := range want {
		if dom[k] != v {
			t.Errorf("page %s = %q, want %q (all: %v)", k, dom[k], v, dom)
		}
	}
	if p := dom["plot"]; p != "throughput-heavy" && p != "cpu-per-request" && p != "link-heavy" { // they take turns
		t.Errorf("page plot = %q, want one of the last sweep's, loaded", p)
	}
	if dom["rps"] == "" || dom["rps"] == "–" || dom["rps"] == "0.0" {
		t.Errorf("page req/s %q, want the load's", dom["rps"])
	}

	png, err := b.screenshot(ctx, page)
	if err != nil {
		t.Fatal(err)
	}
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot is not a PNG (%d bytes)", len(png))
	}
	shot := filepath.Join(t.TempDir(), "dashboard.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	if shotDir != "" {
		if err := os.WriteFile(filepath.Join(shotDir, "dashboard.png"), png, 0o644); err != nil {
			t.Errorf("copy the screenshot: %v", err)
		}
	}
	t.Logf("screenshot %s (%d bytes); page state %+v", shot, len(png), second)
	// A `ceiling fleet` then writes into the same directory: the panel follows its
	// progress file and its plots (the newest). Its own deadline: the screenshot's wait
	// above can use most of ctx's.
	ctx, cancel = context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	addFakeFleet(t, ceil, os.Getpid(), time.Now().Add(-1500*time.Millisecond))
	time.Sleep(1100 * time.Millisecond)
	var fleetDOM map[string]string
	waitUntil(t, 5*time.Second, "the panel showing the fleet's run and one of its plots", func() bool {
		err = b.eval(ctx, page, `(() => { const t = (id) => document.getElementById(id).textContent;
			const img = document.getElementById("plot-img");
			return {kind: t("ceiling-kind"), current: t("cur-name"), last: t("last-name"), lastCPU: t("last-cpu"), cpuLabel: t("last-cpu-label"),
				plot: img.complete && img.naturalWidth > 0 ? img.alt : "not loaded"}; })()`, &fleetDOM)
		return err == nil && strings.HasPrefix(fleetDOM["plot"], "fleet-")
	})
	for k, v := range map[string]string{"kind": "fleet", "current": "feed · nftables · H=2 × N=1",
		"last": "hello · haproxy · H=2 × N=1", "lastCPU": "14.2", "cpuLabel": "servers' CPU µs / req · balancer 51.9"} {
		if fleetDOM[k] != v {
			t.Errorf("fleet: page %s = %q, want %q (all: %v)", k, fleetDOM[k], v, fleetDOM)
		}
	}

	if shotDir != "" {
		if png, err := b.screenshot(ctx, page); err != nil {
			t.Error(err)
		} else if err := os.WriteFile(filepath.Join(shotDir, "dashboard-fleet.png"), png, 0o644); err != nil {
			t.Errorf("copy the screenshot: %v", err)
		}
	}
	if errs := b.consoleErrors(page); len(errs) > 0 {
		t.Errorf("the page reported errors:\n%s", strings.Join(errs, "\n"))
	}
}

// dashboardURL is the dashboard's address, as the supervisor's log says it.
func dashboardURL(t *testing.T, c *runningCluster) string {
	t.Helper()
	var url string
	waitUntil(t, 5*time.Second, "the dashboard's address in the log", func() bool {
		for _, line := range strings.Split(c.logs.String(), "\n") {
			msg, f, ok := logEntry(line)
			if u, _ := f["url"].(string); ok && msg == "dashboard" && u != "" {
				url = u
				return true
			}
		}
		return false
	})
	return url
}

// TestDashboardCeilingDir: what -dashboard-ceiling resolves to.
func TestDashboardCeilingDir(t *testing.T) {
	abs, _ := filepath.Abs("results")
	cases := []struct{ flag, want string }{
		{"-", ""},
		{"", ""}, // no data/ceiling under cmd/supervisor: no panel
		{"results", abs},
		{"/srv/ceiling", "/srv/ceiling"},
	}
	for _, tc := range cases {
		if got := ceilingDir(tc.flag); got != tc.want {
			t.Errorf("ceilingDir(%q) = %q, want %q", tc.flag, got, tc.want)
		}
	}
}
