package monit

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
	"github.com/onehost/onehost/internal/monit/monittest"
	"github.com/onehost/onehost/internal/proctest"
)

// TestDashboardFrame: the JSON of one frame (golden file) from a monit sample.
func TestDashboardFrame(t *testing.T) {
	st := State{Addr: "127.0.0.1:3000", Steering: "bpf-rr",
		Workers: []Row{
			{Worker: control.Worker{ID: 0, PID: 4101, Status: "online", UptimeS: 312, Restarts: 1, CPUPercent: 23.44,
				RSSBytes: 41 << 20, RPS: 2412.26, Connections: 12, Health: cluster.HealthOK}},
			{Worker: control.Worker{ID: 1, Status: "waiting-restart", Restarts: 4}},
		},
		Host: &HostRates{CPUs: []CoreBusy{{0, 87.54}, {1, 12}}, RxPerS: 1.25e6, TxPerS: 3.4e6}}
	d := NewDashboard(func(context.Context) State { return st }, "")
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
	dir := monittest.FakeCeilingDir(t, 4242, now.Add(-2500*time.Millisecond))
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
		{"a fleet running", monittest.FakeFleetDir(t, 4242, now.Add(-1500*time.Millisecond)), true, func(t *testing.T, c *dashCeiling) {
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
		{"pointed at the fleet's own directory", filepath.Join(monittest.FakeFleetDir(t, 4242, now), "fleet"), true, func(t *testing.T, c *dashCeiling) {
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
	dir := monittest.FakeCeilingDir(t, 1, time.Now())
	outside := filepath.Join(t.TempDir(), "secret.svg")
	os.WriteFile(outside, []byte("<svg>secret</svg>"), 0o644)
	os.Symlink(outside, filepath.Join(dir, "plots", "escape.svg"))
	os.WriteFile(filepath.Join(dir, "plots", ".hidden.svg"), []byte("<svg/>"), 0o644)
	srv := httptest.NewServer(NewDashboard(nil, dir).Handler())
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
	none := httptest.NewServer(NewDashboard(nil, "").Handler())
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
	d := NewDashboard(func(context.Context) State {
		n++ // only run's goroutine calls sample
		return State{Addr: fmt.Sprint("sample-", n)}
	}, "")
	d.interval = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	go d.Run(ctx)
	srv := httptest.NewServer(d.Handler())
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
	srv := httptest.NewServer(NewDashboard(nil, "").Handler())
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
		if got := CeilingDir(tc.flag); got != tc.want {
			t.Errorf("CeilingDir(%q) = %q, want %q", tc.flag, got, tc.want)
		}
	}
}

// waitUntil polls cond every 20 ms until it holds, failing the test after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// fetch GETs url on a fresh connection: its status and body.
func fetch(url string, timeout time.Duration) (int, string, error) {
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
