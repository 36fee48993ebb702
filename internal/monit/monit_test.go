package monit

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/goldentest"
	"github.com/onehost/onehost/internal/procstat"
)

// TestMonitRender: the look of monit, one golden file per case (go test -update rewrites
// them).
func TestMonitRender(t *testing.T) {
	online := func(id, pid int, rps float64, hist ...float64) Row {
		return Row{Worker: control.Worker{ID: id, PID: pid, Status: "online", UptimeS: 312,
			Restarts: 1, CPUPercent: 23.4, RSSBytes: 41 << 20, Requests: 90210, RPS: rps, Connections: 12,
			Health: cluster.HealthOK}, History: hist}
	}
	ramp := []float64{0, 0, 120, 480, 950, 1400, 1800, 2100, 2400, 2412}
	host := &HostRates{CPUs: []CoreBusy{{0, 87.5}, {1, 12}, {2, 100}, {3, 0}}, RxPerS: 1.25e6, TxPerS: 3.4e6}
	cases := []struct {
		name   string
		st     State
		width  int
		height int
	}{
		{"two-online", State{Addr: "127.0.0.1:3000", Steering: "bpf-rr", Interval: time.Second, Live: true,
			Workers: []Row{online(0, 4101, 2412, ramp...), online(1, 4102, 1203.6, 0, 0, 60, 240, 480, 700, 900, 1000, 1100, 1203)},
			Host:    host}, 100, 0},
		{"once-no-hint", State{Addr: "127.0.0.1:3000", Steering: "hash", Interval: time.Second,
			Workers: []Row{online(0, 4101, 3.5, 3.5)}, Host: host}, 100, 0},
		{"restarting-and-unhealthy", State{Addr: "[::]:8080", Steering: "hash", Interval: time.Second, Live: true,
			Workers: []Row{
				{Worker: control.Worker{ID: 0, Status: "waiting-restart", Restarts: 4}, History: []float64{800, 0, 0}},
				{Worker: control.Worker{ID: 1, PID: 77, Status: "online", UptimeS: 90000, CPUPercent: 150,
					RSSBytes: 3 << 30, RPS: 800, Health: cluster.HealthUnhealthy, HealthError: "open feed.db: no such file"},
					History: []float64{400, 800}},
			}, Host: host}, 100, 0},
		{"first-frame", State{Addr: "127.0.0.1:3000", Steering: "bpf-rr", Interval: 500 * time.Millisecond, Live: true,
			Workers: []Row{online(0, 4101, 0, 0)}}, 100, 0},
		{"unreachable", State{Addr: "127.0.0.1:3000", Steering: "bpf-rr", Interval: time.Second, Live: true,
			Err:     "reach the supervisor at /run/onehost/supervisor.sock (is `supervisor run` running?): connection refused",
			Workers: []Row{online(0, 4101, 10, 10, 10)}, Host: host}, 100, 0},
		{"no-workers", State{Addr: "127.0.0.1:3000", Interval: time.Second, Live: true, Host: host}, 100, 0},
		// Narrow: the sparkline gives way first, then lines are cut; short: lines are cut at the bottom.
		{"narrow", State{Addr: "127.0.0.1:3000", Steering: "bpf-rr", Interval: time.Second, Live: true,
			Workers: []Row{online(0, 4101, 2412, ramp...)}, Host: host}, 60, 0},
		{"short", State{Addr: "127.0.0.1:3000", Steering: "bpf-rr", Interval: time.Second, Live: true,
			Workers: []Row{online(0, 4101, 2412, ramp...), online(1, 4102, 2412, ramp...)}, Host: host}, 100, 5},
		{"many-cores", State{Addr: "127.0.0.1:3000", Steering: "bpf-rr", Interval: time.Second, Live: true,
			Workers: []Row{online(0, 4101, 2412, ramp...)}, Host: manyCores(12)}, 100, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lines := Render(tc.st, tc.width, tc.height)
			for i, l := range lines {
				if n := len([]rune(l)); n > tc.width {
					t.Errorf("line %d is %d columns, wider than %d: %q", i, n, tc.width, l)
				}
			}
			if tc.height > 0 && len(lines) > tc.height {
				t.Errorf("%d lines, more than the height %d", len(lines), tc.height)
			}
			goldentest.Check(t, "monit/"+tc.name+".txt", []byte(strings.Join(lines, "\n")+"\n"))
		})
	}
}

func manyCores(n int) *HostRates {
	h := &HostRates{RxPerS: 512, TxPerS: 2048}
	for i := range n {
		h.CPUs = append(h.CPUs, CoreBusy{CPU: i, Busy: float64(i * 100 / (n - 1))})
	}
	return h
}

func TestMonitSparkline(t *testing.T) {
	cases := []struct {
		name string
		vs   []float64
		peak float64
		n    int
		want string
	}{
		{"empty pads", nil, 10, 4, "    "},
		{"zero is blank", []float64{0, 5, 10}, 10, 3, " ▄█"},
		{"newest at the right, cut to n", []float64{10, 0, 1.5, 10}, 10, 3, " ▂█"},
		{"no peak", []float64{0, 0}, 0, 2, "  "},
		{"over the peak stays the top", []float64{20}, 10, 1, "█"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := sparkline(tc.vs, tc.peak, tc.n); got != tc.want {
				t.Errorf("sparkline(%v, %v, %d) = %q, want %q", tc.vs, tc.peak, tc.n, got, tc.want)
			}
		})
	}
}

// TestMonitSample: what the Monitor keeps between samples (history, the host's previous
// counters, the last good rows) from readings fed through its seams.
func TestMonitSample(t *testing.T) {
	row := func(id int, rps float64) control.Worker {
		return control.Worker{ID: id, PID: 100 + id, Status: "online", RPS: rps}
	}
	hostAt := func(busy, idle float64, rx, tx int64) procstat.Host {
		return procstat.Host{CPUs: []procstat.CPUTime{{CPU: 0, User: busy, Idle: idle}, {CPU: 1, System: busy / 2, Idle: idle, IOWait: busy / 2}},
			NetRxBytes: rx, NetTxBytes: tx}
	}
	type step struct {
		rows []control.Worker // nil with err: the supervisor did not answer
		err  error
		host procstat.Host
	}
	cases := []struct {
		name  string
		steps []step
		check func(t *testing.T, st State)
	}{
		{"first sample has no host rates", []step{{rows: []control.Worker{row(0, 5)}, host: hostAt(1, 1, 0, 0)}},
			func(t *testing.T, st State) {
				if st.Host != nil {
					t.Errorf("host %+v after one reading, want none", st.Host)
				}
				if got := st.Workers[0].History; !slices.Equal(got, []float64{5}) {
					t.Errorf("history %v, want [5]", got)
				}
			}},
		{"host rates between readings", []step{
			{rows: []control.Worker{row(0, 1)}, host: hostAt(10, 10, 1000, 0)},
			{rows: []control.Worker{row(0, 2)}, host: hostAt(13, 11, 3000, 500)}, // cpu0: 3 busy of 4; cpu1: 1.5 system, 1.5 iowait, 1 idle
		}, func(t *testing.T, st State) {
			want := HostRates{CPUs: []CoreBusy{{0, 75}, {1, 1.5 / 4 * 100}}, RxPerS: 2000, TxPerS: 500}
			if st.Host == nil || !slices.Equal(st.Host.CPUs, want.CPUs) || st.Host.RxPerS != want.RxPerS || st.Host.TxPerS != want.TxPerS {
				t.Errorf("host %+v, want %+v", st.Host, want)
			}
		}},
		{"history keeps the last samples", func() []step {
			var s []step
			for i := range historyLen + 5 {
				s = append(s, step{rows: []control.Worker{row(0, float64(i))}})
			}
			return s
		}(), func(t *testing.T, st State) {
			h := st.Workers[0].History
			if len(h) != historyLen || h[0] != 5 || h[len(h)-1] != historyLen+4 {
				t.Errorf("history %v, want 5..%d", h, historyLen+4)
			}
		}},
		{"a slot scaled away is forgotten", []step{
			{rows: []control.Worker{row(0, 1), row(1, 7)}},
			{rows: []control.Worker{row(0, 1)}},
			{rows: []control.Worker{row(0, 1), row(1, 3)}},
		}, func(t *testing.T, st State) {
			if got := st.Workers[1].History; !slices.Equal(got, []float64{3}) {
				t.Errorf("slot 1 history %v, want [3] (afresh)", got)
			}
		}},
		{"unreachable keeps the last rows and says why", []step{
			{rows: []control.Worker{row(0, 9)}},
			{err: errors.New("connection refused")},
		}, func(t *testing.T, st State) {
			if st.Err != "connection refused" || len(st.Workers) != 1 || st.Workers[0].RPS != 9 {
				t.Errorf("state %+v, want the last rows and the error", st)
			}
			if got := st.Workers[0].History; !slices.Equal(got, []float64{9}) {
				t.Errorf("history %v: a failed sample must not add to it", got)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			i := 0
			now := time.Unix(1000, 0)
			m := &Monitor{
				Status: func(context.Context) (control.Status, error) {
					s := tc.steps[i]
					return control.Status{Addr: "a", Workers: s.rows}, s.err
				},
				ReadHost: func() (procstat.Host, error) { return tc.steps[i].host, nil },
				Now:      func() time.Time { return now },
				Interval: time.Second,
			}
			var st State
			for i = range tc.steps {
				st = m.Sample(context.Background())
				now = now.Add(time.Second)
			}
			tc.check(t, st)
		})
	}
}
