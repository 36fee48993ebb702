package daemon

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// TestGrafanaDashboard: the shipped dashboard is valid JSON and asks only for series the
// supervisor exports.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../../configs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("configs/grafana-dashboard.json: %v", err)
	}
	known := map[string]bool{}
	for _, name := range []string{"worker_up", "worker_restarts_total", "worker_cpu_seconds_total", "worker_resident_memory_bytes",
		"worker_requests_total", "worker_open_connections", "worker_healthy", "worker_role_info", "reloads_total",
		"reloads_aborted_total", "scale_events_total", "steering_info", "host_cpu_seconds_total",
		"host_network_receive_bytes_total", "host_network_transmit_bytes_total"} {
		known["onehost_"+name] = true
	}
	// Every name used must be one newMetrics describes.
	descs := make(chan *prometheus.Desc, 64)
	newMetrics(nil, zap.NewNop()).Describe(descs)
	close(descs)
	described := map[string]bool{}
	for d := range descs {
		if m := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String()); m != nil {
			described[m[1]] = true
		}
	}
	for name := range known {
		if !described[name] {
			t.Errorf("test list names %s, which the supervisor does not export", name)
		}
	}
	series := regexp.MustCompile(`onehost_[a-z_]+`)
	n := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, name := range series.FindAllString(tg.Expr, -1) {
				n++
				if !described[name] {
					t.Errorf("panel %q asks for %s, which the supervisor does not export", p.Title, name)
				}
			}
		}
	}
	if n == 0 {
		t.Error("the dashboard asks for no onehost series")
	}
}
