package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/monit/monittest"
)

// TestDashboardChromium: the page in a real headless Chromium against a real supervisor
// with two workers under light load: it loads without console errors, its charts move,
// the ceiling panel shows a sweep's run and plots, and a screenshot is taken (copied to
// $ONEHOST_SCREENSHOT_DIR/dashboard.png when that is set, for the docs); then a fleet's run
// and plots in the same directory (dashboard-fleet.png).
func TestDashboardChromium(t *testing.T) {
	b := startBrowser(t) // first: skips (or fails, in CI) before anything starts when chromium is absent
	ceil := monittest.FakeCeilingDir(t, os.Getpid(), time.Now().Add(-1500*time.Millisecond))
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
	monittest.WriteFakeProgress(t, ceil, os.Getpid(), time.Now().Add(-2500*time.Millisecond))
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
	monittest.AddFakeFleet(t, ceil, os.Getpid(), time.Now().Add(-1500*time.Millisecond))
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
