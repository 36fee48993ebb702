package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/onehost/onehost/internal/genhealth"
	"github.com/onehost/onehost/internal/loadgen"
	"github.com/onehost/onehost/internal/procstat"
)

// runCmd runs the command line against url and returns its stdout.
func runCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, func(string) string { return "" }, &stdout, &stderr)
	return stdout.String(), err
}

func helloServer(t *testing.T, status int) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(`{"hello":"world"}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}

func TestRunText(t *testing.T) {
	url := helloServer(t, 200)
	procs := runtime.GOMAXPROCS(0)
	out, err := runCmd(t, "-c", "2", "-p", "2", "-a", "50", "-w", "1", "--renderStatusCodes", "-l", url)
	if err != nil {
		t.Fatal(err)
	}
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS %d after the run, want it restored to %d", got, procs)
	}
	for _, want := range []string{
		"Running 50 requests test @ " + url + "\n2 connections with 2 pipelining factor\n1 workers\n\n\n┌",
		"│ Stat    │ 2.5%", "│ Latency │",
		"│ Stat      │ 1%", "│ Req/Sec   │", "│ Bytes/Sec │",
		"│ Code │ Count │", "│ 200  │ 50    │",
		"Req/Bytes counts sampled once per second.\n# of samples: 0\n",
		"│ Percentile │ Latency (ms) │", "│ 99.999     │",
		"\n50 requests in ",
		"connections: 2 from the kernel's choice of source address, opened all at once, 0 reconnects\n",
		"generator: ",
		"\ngenerator: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "non 2xx") || strings.Contains(out, "errors (") {
		t.Errorf("output reports failures that did not happen:\n%s", out)
	}
}

func TestRunNon2xx(t *testing.T) {
	url := helloServer(t, 404)
	out, err := runCmd(t, "-c", "1", "-a", "20", url)
	if err != nil {
		t.Fatalf("a run with non-2xx responses must succeed, got %v", err)
	}
	if !strings.Contains(out, "0 2xx responses, 20 non 2xx responses\n20 requests in") {
		t.Errorf("output lacks the non-2xx line:\n%s", out)
	}
}

// TestRunJSON checks the JSON's key set against autocannon's (as of v8) plus the
// documented extensions.
func TestRunJSON(t *testing.T) {
	url := helloServer(t, 200)
	out, err := runCmd(t, "-j", "-c", "2", "-a", "30", "-w", "2", "--server-pid", strconv.Itoa(os.Getpid()), "-T", "x", url)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(out, "\n") != 1 {
		t.Errorf("want exactly one line of JSON, got:\n%s", out)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	pcts := []string{"p0_001", "p0_01", "p0_1", "p1", "p2_5", "p10", "p25", "p50", "p75", "p90", "p97_5", "p99", "p99_9", "p99_99", "p99_999"}
	stats := []string{"average", "mean", "stddev", "min", "max"}
	keySets := map[string][]string{
		"": {"title", "url", "connections", "sampleInt", "pipelining", "workers", "duration", "samples", "start", "finish",
			"errors", "timeouts", "mismatches", "non2xx", "resets", "1xx", "2xx", "3xx", "4xx", "5xx", "statusCodeStats",
			"latency", "requests", "throughput", "mode", "rate", "spread", "connect_rate", "reconnects", "per_second", "generator", "server",
			"wire_bytes_per_req", "check_decode", "bad_bodies"},
		"spread":     {"addrs", "auto", "connections", "max_per_pair"},
		"latency":    append(append(slices.Clone(stats), pcts...), "totalCount"),
		"requests":   append(append(slices.Clone(stats), pcts...), "total", "sent"),
		"throughput": append(append(slices.Clone(stats), pcts...), "total"),
		"generator":  {"workers", "cpu_user_s", "cpu_sys_s", "max_worker_cpu", "avg_worker_cpu", "cpu_us_per_req", "bound", "verdict"},
		"server": {"pid", "cpu_user_us_per_req", "cpu_sys_us_per_req", "cpu_us_per_req", "cpu_user_s", "cpu_sys_s",
			"peak_rss_bytes", "peak_connections", "bytes_per_req", "net_rx_bytes", "net_tx_bytes", "host", "samples"},
	}
	for path, want := range keySets {
		obj := got
		if path != "" {
			obj, _ = got[path].(map[string]any)
		}
		var keys []string
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		want = slices.Sorted(slices.Values(want))
		if !slices.Equal(keys, want) {
			t.Errorf("%q keys\n got %v\nwant %v", path, keys, want)
		}
	}
	// The keys must also come in autocannon's order, for eyes that diff the two.
	if i, j := strings.Index(out, `"p99_999"`), strings.Index(out, `"totalCount"`); i < 0 || j < i {
		t.Errorf("latency.totalCount should follow the percentiles:\n%s", out)
	}
	req := got["requests"].(map[string]any)
	if req["total"] != 30.0 || req["sent"] != 30.0 || got["2xx"] != 30.0 || got["workers"] != 2.0 || got["mode"] != "closed" {
		t.Errorf("requests %v, 2xx %v, workers %v, mode %v; want 30, 30, 2, closed", req, got["2xx"], got["workers"], got["mode"])
	}
	codes, _ := got["statusCodeStats"].(map[string]any)
	if c, _ := codes["200"].(map[string]any); c["count"] != 30.0 {
		t.Errorf("statusCodeStats %v, want 200: {count: 30}", codes)
	}
}

func TestRunFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/"
	ln.Close()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "nothing listening", args: []string{"-a", "5", closed}, want: "connect to"},
		{name: "bad flag", args: []string{"-c", "x", closed}, want: "-c"},
		{name: "no such server pid", args: []string{"--server-pid", "999999999", "-a", "1", closed}, want: "sample server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runCmd(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestRunHelp(t *testing.T) {
	out, err := runCmd(t, "-h")
	if err != nil || !strings.Contains(out, "-c/--connections") {
		t.Errorf("help: err %v, output %q", err, out)
	}
}

func TestFormats(t *testing.T) {
	tests := []struct{ got, want string }{
		// Values from autocannon's own output and from pretty-bytes and toLocaleString.
		{prettyBytes(0), "0 B"}, {prettyBytes(81.1), "81.1 B"}, {prettyBytes(1000), "1 kB"},
		{prettyBytes(961000), "961 kB"}, {prettyBytes(999999), "1000 kB"}, {prettyBytes(15900000), "15.9 MB"},
		{prettyBytes(1234567890), "1.23 GB"},
		{jsNumber(7954.84), "7,954.84"}, {jsNumber(25183), "25,183"}, {jsNumber(0.48), "0.48"},
		{jsNumber(1234567.5), "1,234,567.5"}, {jsNumber(999), "999"},
		{thousands(999), "999"}, {thousands(92668), "93k"}, {thousands(1500), "2k"},
		{percentileKey(0.001), "p0_001"}, {percentileKey(97.5), "p97_5"}, {percentileKey(50), "p50"},
		{table([]string{"Code", "Count"}, [][]string{{"200", "92668"}}),
			"┌──────┬───────┐\n│ Code │ Count │\n├──────┼───────┤\n│ 200  │ 92668 │\n└──────┴───────┘\n"},
	}
	for i, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("case %d: got %q, want %q", i, tt.got, tt.want)
		}
	}
}

func TestCountDist(t *testing.T) {
	d := countDist([]int64{10, 30, 20, 40}, 100)
	// Nearest rank: p50 of 4 samples is the 2nd smallest, p97.5 the largest.
	if d.Mean != 25 || d.Min != 10 || d.Max != 40 || d.P[p50] != 20 || d.P[p97_5] != 40 || d.P[p1] != 10 || *d.Total != 100 {
		t.Errorf("countDist = %+v", d)
	}
	if d.Stddev != 11.19 { // sqrt(125) = 11.1803..., rounded up to two decimals as autocannon does
		t.Errorf("stddev %v, want 11.19", d.Stddev)
	}
}

func TestProgressLine(t *testing.T) {
	var b bytes.Buffer
	p := &progressPrinter{w: &b, interval: 1e9, total: 20e9}
	p.update(loadgen.Progress{Elapsed: 5e9, Sample: loadgen.Sample{Requests: 36120, Bytes: 6200000}, Total: 150000})
	p.done()
	if want := "running 5s/20s: 36,120 req/s, 6.2 MB/s, 150,000 responses, 0 errors\n"; b.String() != want {
		t.Errorf("progress %q, want %q", b.String(), want)
	}
}

func TestPrintTextExtensions(t *testing.T) {
	o := options{url: "http://h/", connections: 1, pipelining: 1, workers: 2, sampleInt: time.Second, duration: time.Second}
	res := &loadgen.Result{
		Mode: "closed", Start: time.Unix(0, 0), Finish: time.Unix(2, 0), Sent: 1000, Responses: 1000, Bytes: 150000,
		StatusCodes: map[int]int64{200: 1000}, Latency: hdrhistogram.New(1, 60_000_000, 3),
		Generator: loadgen.GeneratorCPU{Workers: 2, UserSec: 0.02, SysSec: 0.02, MaxWorkerCPU: 0.9, Bound: true},
		Health:    genhealth.Verdict{Saturated: true, Signal: genhealth.SignalHiccup, Value: 42.5, At: 1, Windows: 2, CPUs: 2},
	}
	srv := &procstat.Summary{UserSec: 0.012, SysSec: 0.008, PeakRSS: 45_200_000,
		Host: procstat.HostCPU{User: 57, System: 21, Idle: 2, Steal: 0.4, SoftIRQ: 3}}
	var b bytes.Buffer
	printText(&b, o, newReport(o, res, srv))
	for _, want := range []string{
		"1k requests in 2s, 150 kB read\n",
		"generator: 1% CPU of 2 workers (peak 90%), 40 µs CPU per request\n",
		"generator-bound: in its busiest second the generator used 90% of its 2 workers' CPU",
		"generator: SATURATED (hiccup p99 42.5 ms at 1 s): the run is invalid\n",
		"server: 20 µs CPU per request (12 user + 8 system), peak RSS 45.2 MB, 150 B per request\n",
		"host CPU: 57.0% user, 21.0% system, 2.0% idle, 0.4% steal, 3.0% softirq, 0.0% iowait\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

func TestBodyWarning(t *testing.T) {
	for _, tc := range []struct {
		name, method, body string
		warn               bool
	}{
		{"body with default method", "", "{}", true},
		{"body with GET", "GET", "{}", true},
		{"body with PATCH", "PATCH", "{}", false},
		{"GET without body", "GET", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := bodyWarning(tc.method, []byte(tc.body)) != ""; got != tc.warn {
				t.Errorf("warned %v, want %v", got, tc.warn)
			}
		})
	}
}
