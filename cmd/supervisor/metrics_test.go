package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape GETs url through c and parses the exposition.
func scrape(t *testing.T, c *http.Client, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the exposition: %v", err)
	}
	return fams
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return 0
}

// TestMetrics: /metrics on the control socket and on -metrics HOST:PORT, in Prometheus's
// exposition format, with per-worker, cluster and host series that move with the cluster.
func TestMetrics(t *testing.T) {
	c := startRun(t, fmt.Sprintf("instances: 2\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv),
		"-metrics", "127.0.0.1:0", "--", os.Args[0])
	unixClient := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", c.socket)
	}}}
	time.Sleep(1200 * time.Millisecond) // one stats round: CPU and memory sampled
	fams := scrape(t, unixClient, "http://supervisor/metrics")
	want := map[string]int{ // family: samples
		"onehost_worker_up": 2, "onehost_worker_restarts_total": 2, "onehost_worker_cpu_seconds_total": 2,
		"onehost_worker_resident_memory_bytes": 2, "onehost_worker_requests_total": 2, "onehost_worker_open_connections": 2,
		"onehost_reloads_total": 1, "onehost_reloads_aborted_total": 1, "onehost_scale_events_total": 1, "onehost_steering_info": 1,
		"onehost_host_network_receive_bytes_total": 1, "onehost_host_network_transmit_bytes_total": 1,
	}
	for name, n := range want {
		f, ok := fams[name]
		if !ok {
			t.Errorf("no %s", name)
			continue
		}
		if len(f.Metric) != n {
			t.Errorf("%s: %d samples, want %d", name, len(f.Metric), n)
		}
	}
	for _, m := range fams["onehost_worker_up"].GetMetric() {
		if value(m) != 1 {
			t.Errorf("worker_up %v = %v, want 1", m.GetLabel(), value(m))
		}
	}
	for _, m := range fams["onehost_worker_resident_memory_bytes"].GetMetric() {
		if value(m) <= 0 {
			t.Errorf("resident memory %v = %v", m.GetLabel(), value(m))
		}
	}
	if f := fams["onehost_host_cpu_seconds_total"]; f == nil || len(f.Metric) < 8 {
		t.Errorf("host cpu series: %v", f)
	}
	// The TCP endpoint serves the same, and the reload counter moves.
	if out, err := c.cmd("reload"); err != nil {
		t.Fatalf("reload: %v %s", err, out)
	}
	m := regexp.MustCompile(`"url": ?"(http://[^"]+/metrics)"`).FindStringSubmatch(c.logs.String())
	if m == nil {
		t.Fatalf("no metrics URL in the log:\n%s", c.logs)
	}
	fams = scrape(t, http.DefaultClient, m[1])
	if got := value(fams["onehost_reloads_total"].GetMetric()[0]); got != 1 {
		t.Errorf("reloads_total %v after one reload", got)
	}
	for _, m := range fams["onehost_worker_restarts_total"].GetMetric() {
		if value(m) != 1 {
			t.Errorf("restarts_total %v = %v after one reload, want 1", m.GetLabel(), value(m))
		}
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics of the supervisor")
	}
}

// TestMetricsLint: the names, types and help texts of what a running supervisor exports
// pass Prometheus's linter.
func TestMetricsLint(t *testing.T) {
	c := startRun(t, fmt.Sprintf("instances: 1\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv), "--", os.Args[0])
	body, err := controlCall(context.Background(), c.socket, "GET", "/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
