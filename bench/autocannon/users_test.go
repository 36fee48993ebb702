package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/onehost/onehost/internal/journey"
	"github.com/onehost/onehost/internal/srcaddr"
)

func TestParseUsersArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    string
		check   func(o usersOptions) string // a mismatch, or ""
		wantErr string
	}{
		{"defaults", "-tokens t.json 127.0.0.1:3000", func(o usersOptions) string {
			if o.url != "http://127.0.0.1:3000" || o.users != 1000 || o.ramp != time.Minute || o.hold != 5*time.Minute ||
				o.rampDown != 30*time.Second || o.timeScale != 1 || o.procs != 0 || o.localAddrs != nil || o.search || o.json {
				return fmt.Sprintf("%+v", o)
			}
			return ""
		}, ""},
		{"everything", "-n 30000 -ramp 20s -hold 1m -rampdown 5s -tokens t.json -time-scale 10 -procs 3 " +
			"-local-addrs 127.0.0.2-127.0.0.9 -j -search -warmup 0 -start 100 -step 10 -confirm-hold 2m http://h:1", func(o usersOptions) string {
			if o.users != 30000 || o.ramp != 20*time.Second || o.hold != time.Minute || o.rampDown != 5*time.Second ||
				o.timeScale != 10 || o.procs != 3 || len(o.localAddrs) != 8 || !o.json || !o.search ||
				o.warmup != -1 || o.start != 100 || o.step != 10 || o.confirmHold != 2*time.Minute || o.url != "http://h:1" {
				return fmt.Sprintf("%+v", o)
			}
			return ""
		}, ""},
		{"flags after the URL", "http://h:1 -n 7 -tokens t.json", func(o usersOptions) string {
			if o.users != 7 || o.tokens != "t.json" {
				return fmt.Sprintf("%+v", o)
			}
			return ""
		}, ""},
		{"no URL", "-tokens t.json", nil, "one URL"},
		{"two URLs", "-tokens t.json http://a:1 http://b:1", nil, "one URL"},
		{"no tokens", "http://h:1", nil, "-tokens"},
		{"no users", "-n 0 -tokens t.json http://h:1", nil, "-n 0"},
		{"bad scale", "-time-scale 0 -tokens t.json http://h:1", nil, "-time-scale"},
		{"bad procs", "-procs -1 -tokens t.json http://h:1", nil, "-procs"},
		{"bad range", "-local-addrs 127.0.0.9-127.0.0.2 -tokens t.json http://h:1", nil, "-local-addrs"},
		{"unknown flag", "-c 5 -tokens t.json http://h:1", nil, "not defined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseUsersArgs(strings.Fields(tc.args), io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseUsersArgs error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if bad := tc.check(o); bad != "" {
				t.Errorf("parseUsersArgs(%q) = %s", tc.args, bad)
			}
		})
	}
}

func TestSplitAddrs(t *testing.T) {
	addrs, _ := srcaddr.ParseList("127.0.0.2-127.0.0.9")
	tests := []struct {
		name  string
		addrs []netip.Addr
		k     int
		want  string
	}{
		{"none", nil, 3, "[] [] []"},
		{"even", addrs, 2, "[127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5] [127.0.0.6 127.0.0.7 127.0.0.8 127.0.0.9]"},
		{"uneven", addrs, 3, "[127.0.0.2 127.0.0.3] [127.0.0.4 127.0.0.5 127.0.0.6] [127.0.0.7 127.0.0.8 127.0.0.9]"},
		{"fewer addresses than children", addrs[:2], 3, "[127.0.0.2] [127.0.0.3] [127.0.0.2]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var parts []string
			for i := range tc.k {
				parts = append(parts, fmt.Sprint(splitAddrs(tc.addrs, i, tc.k)))
			}
			if got := strings.Join(parts, " "); got != tc.want {
				t.Errorf("split = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestUsersChildProcess is not a test: it is the child of a split run when the test
// binary is re-executed with usersChildEnv set.
func TestUsersChildProcess(t *testing.T) {
	if os.Getenv(usersChildEnv) == "" {
		t.Skip("the child process of TestUsersSplit")
	}
	if err := runUsers(context.Background(), nil, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// usersFake is a minimal feed API: a feed of posts 1..3, reads, likes and writes.
type usersFake struct {
	status int // every answer's status; 0: the contract's

	mu      sync.Mutex
	sources map[string]int // requests by client address
}

func (f *usersFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	f.mu.Lock()
	if f.sources == nil {
		f.sources = make(map[string]int)
	}
	f.sources[host]++
	f.mu.Unlock()
	status, body := http.StatusOK, `{}`
	switch {
	case r.URL.Path == "/feed":
		body = `{"posts":[{"id":3,"body":"c"},{"id":2,"body":"b"},{"id":1,"body":"a"}]}`
	case r.Method == "POST":
		status = http.StatusCreated
	}
	if f.status != 0 {
		status = f.status
	}
	w.WriteHeader(status)
	io.WriteString(w, body)
}

func writeTestTokens(t *testing.T, n int) string {
	t.Helper()
	var toks []map[string]any
	for i := 1; i <= n; i++ {
		toks = append(toks, map[string]any{"id": i, "username": fmt.Sprintf("user_%d", i), "token": fmt.Sprintf("tok.%d", i)})
	}
	b, _ := json.Marshal(toks)
	path := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestUsersSplit runs six users in two child processes (the test binary), each on its
// own source address, and checks the merged result.
func TestUsersSplit(t *testing.T) {
	fake := &usersFake{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	tokens := writeTestTokens(t, 4)

	var mu sync.Mutex
	children := 0
	var stdout, stderr bytes.Buffer
	c := &usersCmd{
		getenv: func(string) string { return "" },
		stdout: &stdout,
		stderr: &lockedWriter{w: &stderr},
		lead:   300 * time.Millisecond,
		command: func(ctx context.Context) (*exec.Cmd, error) {
			mu.Lock()
			children++
			mu.Unlock()
			return exec.CommandContext(ctx, os.Args[0], "-test.run=^TestUsersChildProcess$"), nil
		},
	}
	args := strings.Fields("-n 6 -procs 2 -ramp 100ms -hold 1s -rampdown 100ms -time-scale 1000 -seed 7 -j " +
		"-saturation hiccup=1s,send-lag=1s,cpu=100 " +
		"-local-addrs 127.0.0.2-127.0.0.3 -tokens " + tokens + " " + srv.URL)
	if err := c.run(context.Background(), args); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	var out usersOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout.String())
	}
	r := out.Result
	if children != 2 || r.Users != 6 || r.UserEquivalents != 6000 || !r.Pass {
		t.Errorf("children %d, users %d, user-equivalents %v, pass %v %q; want 2 children, 6 users, 6000, PASS",
			children, r.Users, r.UserEquivalents, r.Pass, r.Reasons)
	}
	if h := r.Health; h.Parts != 2 || h.Windows == 0 || h.Saturated || h.Peak.Sends == 0 {
		t.Errorf("merged generator verdict %s (%d parts, %d windows, peak %+v): want ok from both children", h, h.Parts, h.Windows, h.Peak)
	}
	if got := r.Histogram().TotalCount(); r.Requests == 0 || got != r.Requests {
		t.Errorf("requests %d, merged histogram %d values; want equal and positive", r.Requests, got)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	var served int64
	for _, n := range fake.sources {
		served += int64(n)
	}
	if served != r.Requests || fake.sources["127.0.0.2"] == 0 || fake.sources["127.0.0.3"] == 0 {
		t.Errorf("the server saw %v (%d requests), want %d requests from 127.0.0.2 and 127.0.0.3", fake.sources, served, r.Requests)
	}
}

// TestUsersVerdict runs in one process and checks the summary and the exit status.
func TestUsersVerdict(t *testing.T) {
	// Generous thresholds keep a busy machine's stalls from making the pass and fail cases
	// invalid; a CPU share no process stays under makes the saturated one.
	const generous = "-saturation hiccup=1s,send-lag=1s,cpu=100"
	tests := []struct {
		name    string
		status  int
		flags   string
		want    []string
		wantErr string
	}{
		{"pass", 0, generous, []string{"users: 4 (4000 user-equivalents)", "PASS", "requests by route: feed",
			"latency by route in the hold:\n  feed   ", "\ngenerator: ok (worst second: hiccup p99 "}, ""},
		{"fail", http.StatusInternalServerError, generous, []string{"FAIL: failures 100.00% >= 1%", "status: 500×"}, "FAIL"},
		{"saturated", 0, "-saturation cpu=0.000001", []string{"\ngenerator: SATURATED (CPU ",
			"INVALID: the generator, not the server, was measured; neither PASS nor FAIL\n"}, "INVALID: the generator was SATURATED (CPU "},
		{"saturated and failing", http.StatusInternalServerError, "-saturation cpu=0.000001", []string{"\ngenerator: SATURATED (CPU "}, "INVALID"},
	}
	tokens := writeTestTokens(t, 4)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(&usersFake{status: tc.status})
			defer srv.Close()
			var stdout, stderr bytes.Buffer
			args := strings.Fields(tc.flags + " -n 4 -ramp 50ms -hold 1s -rampdown 50ms -time-scale 1000 -tokens " + tokens + " " + srv.URL)
			err := runUsers(context.Background(), args, func(string) string { return "" }, &stdout, &stderr)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("runUsers error = %v, want %q", err, tc.wantErr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, stdout.String())
				}
			}
		})
	}
}

func TestUsersChildBadSpec(t *testing.T) {
	getenv := func(k string) string {
		if k == usersChildEnv {
			return "{not json"
		}
		return ""
	}
	err := runUsers(context.Background(), nil, getenv, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), usersChildEnv) {
		t.Errorf("runUsers error = %v, want one naming %s", err, usersChildEnv)
	}
}

// TestPrintRouteLatencies checks the per-route lines of the summary: routes with
// latencies in the hold, in the journey's order, and none for a result without them.
func TestPrintRouteLatencies(t *testing.T) {
	hist := func(us ...int64) journey.Histogram {
		h := hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)
		for _, v := range us {
			h.RecordValue(v)
		}
		return journey.Histogram{Histogram: h}
	}
	tests := []struct {
		name   string
		routes map[string]journey.RouteCounts
		want   string
	}{
		{"routes with hold requests", map[string]journey.RouteCounts{
			journey.RouteLike:   {Requests: 3, Failures: 1, Hist: hist(4000, 5000)},
			journey.RouteFeed:   {Requests: 12, Hist: hist(1000, 1000, 1000, 2000, 20000)},
			journey.RouteCreate: {Requests: 1, Hist: hist()}, // its one request fell in a ramp
		}, "latency by route in the hold:\n" +
			"  feed         5 requests, p50 1.0 ms, p99 20.0 ms, max 20.0 ms (whole run: 12 requests, 0 failures)\n" +
			"  like         2 requests, p50 4.0 ms, p99 5.0 ms, max 5.0 ms (whole run: 3 requests, 1 failures)\n"},
		{"no hold requests", map[string]journey.RouteCounts{journey.RouteFeed: {Requests: 2, Hist: hist()}}, ""},
		{"a result without route histograms", map[string]journey.RouteCounts{journey.RouteFeed: {Requests: 2}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := journey.Merge(journey.Result{Users: 1, TimeScale: 1, Routes: tc.routes}) // fills in the latencies
			var b strings.Builder
			printRouteLatencies(&b, r)
			if b.String() != tc.want {
				t.Errorf("printRouteLatencies wrote\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
}

// TestProcsFor checks how a run is split: by the -procs flag, else by the users one
// process has descriptors for.
func TestProcsFor(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		perProcess, users, flag int
		want                    int
	}{
		{"fits in one", 19488, 16000, 0, 1},
		{"exactly full", 19488, 19488, 0, 1},
		{"one over", 19488, 19489, 0, 2},
		{"three", 15000, 40000, 0, 3},
		{"flag wins", 19488, 16000, 2, 2},
		{"no more processes than users", 19488, 3, 10, 3},
		{"no users", 19488, 0, 0, 1},
		{"no capacity measured", 0, 5, 0, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &usersCmd{perProcess: tc.perProcess}
			if got := c.procsFor(tc.users, tc.flag); got != tc.want {
				t.Errorf("procsFor(%d, %d) with %d per process = %d, want %d", tc.users, tc.flag, tc.perProcess, got, tc.want)
			}
		})
	}
}

// TestUsersPerProcess checks that the split follows this process's open-file limit.
func TestUsersPerProcess(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("getrlimit: %v", err)
	}
	if lim.Cur < 2*fdReserve || lim.Cur > 1<<30 {
		t.Skipf("open-file limit %d: outside the range this checks", lim.Cur)
	}
	if got, want := usersPerProcess(), int(lim.Cur)-fdReserve; got != want {
		t.Errorf("usersPerProcess() = %d with an open-file limit of %d, want %d", got, lim.Cur, want)
	}
}
