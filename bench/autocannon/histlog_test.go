package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/histlog"
	"github.com/onehost/onehost/internal/journey"
)

// helperArgsEnv makes the test binary run autocannon with these arguments (unit-separator
// separated) instead of the tests: a real generator process.
const helperArgsEnv = "AUTOCANNON_TEST_HELPER_ARGS"

func TestHelperAutocannon(t *testing.T) {
	args := os.Getenv(helperArgsEnv)
	if args == "" {
		t.Skip("helper process for TestMergeTwoGeneratorProcesses")
	}
	if err := run(context.Background(), strings.Split(args, "\x1f"), os.Getenv, os.Stdout, os.Stderr); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(0)
}

// Two generator processes against one server, each writing -hist-log; `autocannon merge`
// counts every request the server answered, and its percentiles are those of the two
// histograms added.
func TestMergeTwoGeneratorProcesses(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	var logs []string
	for i, amount := range []string{"300", "200"} {
		log := filepath.Join(dir, "gen"+string(rune('a'+i))+".hlog")
		logs = append(logs, log)
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAutocannon$")
		cmd.Env = append(os.Environ(), helperArgsEnv+"="+strings.Join([]string{"-n", "-c", "2", "-a", amount, "--hist-log", log, srv.URL + "/"}, "\x1f"))
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("generator %d: %v\n%s", i, err, b)
		}
	}
	var stdout, stderr bytes.Buffer
	if err := runMerge(append([]string{"-j", "-o", filepath.Join(dir, "merged.hlog")}, logs...), &stdout, &stderr); err != nil {
		t.Fatalf("merge: %v: %s", err, stderr.String())
	}
	var r mergeJSON
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("merge output: %v\n%s", err, stdout.String())
	}
	if r.Requests != 500 || served.Load() != 500 || r.Tags["all"].Requests != 500 {
		t.Errorf("merged %d requests (tag all: %d), server answered %d, want 500", r.Requests, r.Tags["all"].Requests, served.Load())
	}
	if r.Latency["p99"] <= 0 || r.Latency["totalCount"] != 500 {
		t.Errorf("merged report has no latency table: %s", stdout.String())
	}
	var perSecond int64
	for _, s := range r.Seconds {
		perSecond += s.Requests
	}
	if len(r.Seconds) == 0 || perSecond != 500 {
		t.Errorf("per-second table %+v sums to %d, want 500", r.Seconds, perSecond)
	}

	// The merged log written with -o merges again to the same report.
	stdout.Reset()
	if err := runMerge([]string{"-j", filepath.Join(dir, "merged.hlog")}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	var again mergeJSON
	if err := json.Unmarshal(stdout.Bytes(), &again); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(r.Latency)
	b, _ := json.Marshal(again.Latency)
	if again.Requests != r.Requests || !bytes.Equal(a, b) {
		t.Errorf("re-merged: %d requests %s, want %d %s", again.Requests, b, r.Requests, a)
	}

	// Text output names the tag and the count.
	stdout.Reset()
	if err := runMerge(logs, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "Merged 2 interval log(s): 500 requests") {
		t.Errorf("text output:\n%s", stdout.String())
	}
}

// mergeJSON reads mergeReport's JSON back.
type mergeJSON struct {
	Requests int64              `json:"requests"`
	Latency  map[string]float64 `json:"latency"`
	Tags     map[string]struct {
		Requests int64 `json:"requests"`
	} `json:"tags"`
	Seconds []mergedSecond `json:"seconds"`
}

func TestMergeErrors(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := runMerge(nil, &out, &errOut); err == nil {
		t.Error("merge with no files: no error")
	}
	bad := filepath.Join(t.TempDir(), "bad.hlog")
	os.WriteFile(bad, []byte("1,2\n"), 0o644)
	if err := runMerge([]string{bad}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("merge of a malformed log: got %v, want an error naming line 1", err)
	}
}

// Two journey runs with -hist-log merge to the sum of their hold histograms, per route.
func TestUsersHistLogMerge(t *testing.T) {
	srv := httptest.NewServer(&usersFake{})
	t.Cleanup(srv.Close)
	tokens := writeTestTokens(t, 4)
	dir := t.TempDir()
	want := map[string]int64{}
	var logs []string
	for i := range 2 {
		log := filepath.Join(dir, "users"+string(rune('a'+i))+".hlog")
		logs = append(logs, log)
		var stdout, stderr bytes.Buffer
		args := strings.Fields("-saturation hiccup=1s,send-lag=1s,cpu=100 -n 4 -ramp 50ms -hold 500ms -rampdown 50ms -time-scale 1000 -j -hist-log " + log + " -tokens " + tokens + " " + srv.URL)
		if err := runUsers(context.Background(), args, func(string) string { return "" }, &stdout, &stderr); err != nil {
			t.Fatalf("users %d: %v\n%s", i, err, stderr.String())
		}
		var out usersOutput
		if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		for name, c := range out.Result.Routes {
			want[name] += c.Hist.TotalCount()
		}
	}
	var stdout, stderr bytes.Buffer
	if err := runMerge(append([]string{"-j"}, logs...), &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	var r mergeJSON
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	var total int64
	for name, n := range want {
		if n > 0 && r.Tags[name].Requests != n {
			t.Errorf("route %s: merged %d, want %d", name, r.Tags[name].Requests, n)
		}
		total += n
	}
	if total == 0 || r.Requests != total {
		t.Errorf("merged %d requests, want %d (> 0)", r.Requests, total)
	}
}

// Two shares of one run (as two load hosts run them: their own user ranges, one agreed
// start) merge to a result of all the users, each share's users signed in with their own
// tokens.
func TestUsersShares(t *testing.T) {
	srv := httptest.NewServer(&usersFake{})
	t.Cleanup(srv.Close)
	tokens := writeTestTokens(t, 4)
	startAt := strconv.FormatInt(time.Now().Add(300*time.Millisecond).UnixMilli(), 10)
	parts := make([]journey.Result, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, first := range []string{"1", "3"} {
		wg.Add(1)
		go func() { // both shares run at once, as on two hosts
			defer wg.Done()
			var stdout, stderr bytes.Buffer
			args := strings.Fields("-saturation hiccup=1s,send-lag=1s,cpu=100 -n 2 -first-user " + first + " -total-users 4 -start-at " + startAt + " -seed 7 -ramp 50ms -hold 500ms -rampdown 50ms -time-scale 1000 -j -tokens " + tokens + " " + srv.URL)
			if err := runUsers(context.Background(), args, func(string) string { return "" }, &stdout, &stderr); err != nil {
				errs[i] = fmt.Errorf("share from user %s: %w\n%s", first, err, stderr.String())
				return
			}
			var out usersOutput
			errs[i] = json.Unmarshal(stdout.Bytes(), &out)
			parts[i] = out.Result
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	m := journey.Merge(parts...)
	if m.Users != 4 || m.Requests == 0 || m.Histogram().TotalCount() != m.Requests || !m.Pass {
		t.Errorf("merged: %d users, %d requests, histogram %d, pass %v; want 4 users, all requests, PASS",
			m.Users, m.Requests, m.Histogram().TotalCount(), m.Pass)
	}
}

// TestMergeGenerators: the merged verdict is saturated if any log's generator was, and
// says which logs carried none.
func TestMergeGenerators(t *testing.T) {
	ok := "generator: ok (worst second: hiccup p99 0.4 ms, send lag p99 1.2 ms, CPU 31% of 1 CPU, connect p99 0.1 ms)"
	sat := "generator: SATURATED (hiccup p99 87.0 ms at 3.0 s): the run is invalid"
	tests := []struct {
		name    string
		lines   []string
		wantSat bool
		want    string
	}{
		{"all ok", []string{ok, ok}, false, "generator: ok in all 2 logs"},
		{"one saturated", []string{ok, sat}, true, "generator: SATURATED (b: hiccup p99 87.0 ms at 3.0 s): the merged run is invalid"},
		{"one without", []string{ok, ""}, false, "generator: not measured in 1 of 2 logs (b)"},
		{"saturated beats unmeasured", []string{"", sat}, true, "generator: SATURATED (b: hiccup p99 87.0 ms at 3.0 s): the merged run is invalid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var logs []histlog.Log
			for _, l := range tc.lines {
				logs = append(logs, histlog.Log{Generator: l})
			}
			g := mergeGenerators([]string{"a", "b"}, logs)
			if g.Saturated != tc.wantSat || g.Verdict != tc.want {
				t.Errorf("got %v %q, want %v %q", g.Saturated, g.Verdict, tc.wantSat, tc.want)
			}
		})
	}
}
