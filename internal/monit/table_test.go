package monit

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/goldentest"
)

// statusFixtures are status replies as the control socket gives them, one per shape the
// table takes: one app without a name; several apps, one stopped and one in fork mode; a
// drained host; a program without our ipc (counters unknown); the notes below the table.
var statusFixtures = []struct {
	name string
	st   control.Status
}{
	{"one-app", control.Status{Addr: "127.0.0.1:3000", Steering: "bpf-rr", Agent: "127.0.0.1:9777",
		Apps: []control.App{{Mode: "cluster", Status: "running", Addr: "127.0.0.1:3000", Steering: "bpf-rr", Workers: 2}},
		Workers: []control.Worker{
			{ID: 0, PID: 4100, Status: "online", UptimeS: 4000, Restarts: 1, CPUPercent: 37.25, CPUSeconds: 12.5, RSSBytes: 41 << 20,
				Requests: 123456, RPS: 2034.56, Connections: 12, LoopConnections: []int64{6, 6}, Health: cluster.HealthOK, Role: "owner",
				Report: json.RawMessage(`{"write_path":{"writes":80,"write_ns":160000}}`)},
			{ID: 1, PID: 4101, Status: "online", UptimeS: 90, CPUPercent: 35, RSSBytes: 39 << 20, Requests: 120000, RPS: 1999, Connections: 11,
				Health: cluster.HealthUnhealthy, HealthError: "database: disk I/O error", Role: "follower", Note: "warming the cache"},
		}}},
	{"several-apps", control.Status{Addr: "127.0.0.1:3000", Steering: "hash", Drained: true,
		Apps: []control.App{
			{Name: "api", Mode: "cluster", Status: "running", Addr: "127.0.0.1:3000", Steering: "hash", Workers: 1},
			{Name: "jobs", Mode: "fork", Status: "running", Workers: 1},
			{Name: "admin", Mode: "cluster", Status: "stopped"},
		},
		Workers: []control.Worker{
			{App: "api", ID: 0, PID: 5000, Status: "online", UptimeS: 3 * 86400, Restarts: 4, CPUPercent: 1, RSSBytes: 3 << 30, Requests: 7, RPS: 0.5, Connections: 1, Adopted: true},
			{App: "jobs", ID: 0, PID: 5001, Status: "online", UptimeS: 42, RSSBytes: 512 << 10, NoCounters: true},
		}}},
	{"not-serving", control.Status{Addr: "127.0.0.1:3000", Steering: "bpf-rr", UpgradeError: "the new binary exited: status 2",
		Apps: []control.App{{Mode: "cluster", Status: "running", Addr: "127.0.0.1:3000", Steering: "bpf-rr", Workers: 2}},
		Workers: []control.Worker{
			{ID: 0, Status: "waiting-restart", Restarts: 3},
			{ID: 1, PID: 77, Status: "not-serving", UptimeS: 5, NotServing: "it listens on 8080, not on the slot's socket", NoCounters: true},
		}}},
}

// TestStatusGolden: `supervisor status`'s table and `status -json`'s body for each fixture,
// against testdata/status/NAME.txt and .json.
func TestStatusGolden(t *testing.T) {
	for _, f := range statusFixtures {
		t.Run(f.name, func(t *testing.T) {
			checkPrinted(t, "status/"+f.name, f.st, func(b *bytes.Buffer) { PrintStatus(b, f.st) })
		})
	}
}

// TestDescribeGolden: `supervisor describe`'s output, running and stopped.
func TestDescribeGolden(t *testing.T) {
	for _, c := range []struct {
		name string
		d    control.Describe
	}{
		{"running", control.Describe{Name: "api", Mode: "cluster", Status: "running", Cwd: "/srv/app", Command: []string{"node", "app.js"},
			Listen: "127.0.0.1:3000", Addr: "127.0.0.1:3000", Steering: "bpf-rr", Instances: 2, Workers: 2,
			EnvNames: []string{"NODE_ENV", "PORT"}, Restarts: 3, UptimeS: 7200,
			WorkerRow: []control.Worker{{ID: 0, PID: 10, Status: "online", UptimeS: 7200, Restarts: 1}, {ID: 1, PID: 11, Status: "online", UptimeS: 60, Restarts: 2}}}},
		{"stopped", control.Describe{Mode: "fork", Status: "stopped", Cwd: "/srv/jobs", Command: []string{"/usr/bin/python3", "jobs.py"},
			EnvNames: []string{}, WorkerRow: []control.Worker{}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkPrinted(t, "status/describe-"+c.name, c.d, func(b *bytes.Buffer) { PrintDescribe(b, c.d) })
		})
	}
}

// checkPrinted checks what print writes against the golden NAME.txt, and v as JSON (the
// body of the command's -json) against NAME.json.
func checkPrinted(t *testing.T, name string, v any, print func(*bytes.Buffer)) {
	t.Helper()
	var b bytes.Buffer
	print(&b)
	goldentest.Check(t, name+".txt", b.Bytes())
	j, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	goldentest.Check(t, name+".json", append(j, '\n'))
}

func TestTableFormats(t *testing.T) {
	tests := []struct {
		name      string
		got, want string
	}{
		{"seconds", Uptime(42), "42s"},
		{"minutes", Uptime(300), "5m"},
		{"hours", Uptime(3 * 3600), "3h"},
		{"days", Uptime(2 * 86400), "2D"},
		{"kb", Mem(512 << 10), "512.0kb"},
		{"mb", Mem(41 << 20), "41.0mb"},
		{"gb", Mem(3 << 30), "3.0gb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}
