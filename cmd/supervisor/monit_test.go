package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/goldentest"
	"github.com/onehost/onehost/internal/procstat"
	"github.com/onehost/onehost/internal/proctest"
)

// TestMonitRender: the look of monit, one golden file per case (go test -update rewrites
// them).
func TestMonitRender(t *testing.T) {
	online := func(id, pid int, rps float64, hist ...float64) monitRow {
		return monitRow{Worker: control.Worker{ID: id, PID: pid, Status: "online", UptimeS: 312,
			Restarts: 1, CPUPercent: 23.4, RSSBytes: 41 << 20, Requests: 90210, RPS: rps, Connections: 12,
			Health: cluster.HealthOK}, History: hist}
	}
	ramp := []float64{0, 0, 120, 480, 950, 1400, 1800, 2100, 2400, 2412}
	host := &hostRates{CPUs: []coreBusy{{0, 87.5}, {1, 12}, {2, 100}, {3, 0}}, RxPerS: 1.25e6, TxPerS: 3.4e6}
	cases := []struct {
		name   string
		st     monitState
		width  int
		height int
	}{
		{"two-online", monitState{Addr: "127.0.0.1:3000", Steering: "bpf-rr", Interval: time.Second, Live: true,
			Workers: []monitRow{online(0, 4101, 2412, ramp...), online(1, 4102, 1203.6, 0, 0, 60, 240, 480, 700, 900, 1000, 1100, 1203)},
			Host:    host}, 100, 0},
		{"once-no-hint", monitState{Addr: "127.0.0.1:3000", Steering: "hash", Interval: time.Second,
			Workers: []monitRow{online(0, 4101, 3.5, 3.5)}, Host: host}, 100, 0},
		{"restarting-and-unhealthy", monitState{Addr: "[::]:8080", Steering: "hash", Interval: time.Second, Live: true,
			Workers: []monitRow{
				{Worker: control.Worker{ID: 0, Status: "waiting-restart", Restarts: 4}, History: []float64{800, 0, 0}},
				{Worker: control.Worker{ID: 1, PID: 77, Status: "online", UptimeS: 90000, CPUPercent: 150,
					RSSBytes: 3 << 30, RPS: 800, Health: cluster.HealthUnhealthy, HealthError: "open feed.db: no such file"},
					History: []float64{400, 800}},
			}, Host: host}, 100, 0},
		{"first-frame", monitState{Addr: "127.0.0.1:3000", Steering: "bpf-rr", Interval: 500 * time.Millisecond, Live: true,
			Workers: []monitRow{online(0, 4101, 0, 0)}}, 100, 0},
		{"unreachable", monitState{Addr: "127.0.0.1:3000", Steering: "bpf-rr", Interval: time.Second, Live: true,
			Err:     "reach the supervisor at /run/onehost/supervisor.sock (is `supervisor run` running?): connection refused",
			Workers: []monitRow{online(0, 4101, 10, 10, 10)}, Host: host}, 100, 0},
		{"no-workers", monitState{Addr: "127.0.0.1:3000", Interval: time.Second, Live: true, Host: host}, 100, 0},
		// Narrow: the sparkline gives way first, then lines are cut; short: lines are cut at the bottom.
		{"narrow", monitState{Addr: "127.0.0.1:3000", Steering: "bpf-rr", Interval: time.Second, Live: true,
			Workers: []monitRow{online(0, 4101, 2412, ramp...)}, Host: host}, 60, 0},
		{"short", monitState{Addr: "127.0.0.1:3000", Steering: "bpf-rr", Interval: time.Second, Live: true,
			Workers: []monitRow{online(0, 4101, 2412, ramp...), online(1, 4102, 2412, ramp...)}, Host: host}, 100, 5},
		{"many-cores", monitState{Addr: "127.0.0.1:3000", Steering: "bpf-rr", Interval: time.Second, Live: true,
			Workers: []monitRow{online(0, 4101, 2412, ramp...)}, Host: manyCores(12)}, 100, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lines := renderMonit(tc.st, tc.width, tc.height)
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

func manyCores(n int) *hostRates {
	h := &hostRates{RxPerS: 512, TxPerS: 2048}
	for i := range n {
		h.CPUs = append(h.CPUs, coreBusy{CPU: i, Busy: float64(i * 100 / (n - 1))})
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

// TestMonitSample: what the monitor keeps between samples (history, the host's previous
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
		check func(t *testing.T, st monitState)
	}{
		{"first sample has no host rates", []step{{rows: []control.Worker{row(0, 5)}, host: hostAt(1, 1, 0, 0)}},
			func(t *testing.T, st monitState) {
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
		}, func(t *testing.T, st monitState) {
			want := hostRates{CPUs: []coreBusy{{0, 75}, {1, 1.5 / 4 * 100}}, RxPerS: 2000, TxPerS: 500}
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
		}(), func(t *testing.T, st monitState) {
			h := st.Workers[0].History
			if len(h) != historyLen || h[0] != 5 || h[len(h)-1] != historyLen+4 {
				t.Errorf("history %v, want 5..%d", h, historyLen+4)
			}
		}},
		{"a slot scaled away is forgotten", []step{
			{rows: []control.Worker{row(0, 1), row(1, 7)}},
			{rows: []control.Worker{row(0, 1)}},
			{rows: []control.Worker{row(0, 1), row(1, 3)}},
		}, func(t *testing.T, st monitState) {
			if got := st.Workers[1].History; !slices.Equal(got, []float64{3}) {
				t.Errorf("slot 1 history %v, want [3] (afresh)", got)
			}
		}},
		{"unreachable keeps the last rows and says why", []step{
			{rows: []control.Worker{row(0, 9)}},
			{err: errors.New("connection refused")},
		}, func(t *testing.T, st monitState) {
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
			m := &monitor{
				status: func(context.Context) (control.Status, error) {
					s := tc.steps[i]
					return control.Status{Addr: "a", Workers: s.rows}, s.err
				},
				readHost: func() (procstat.Host, error) { return tc.steps[i].host, nil },
				now:      func() time.Time { return now },
				interval: time.Second,
			}
			var st monitState
			for i = range tc.steps {
				st = m.sample(context.Background())
				now = now.Add(time.Second)
			}
			tc.check(t, st)
		})
	}
}

// TestMonitProcess: `supervisor monit` against a real supervisor with two workers under a
// little load: one frame on a pipe, then the live view in a real terminal (a tmux pane of
// fixed size): both slots online with req/s above 0, the host's cores, and on q or ^C the
// process exits 0 with the terminal restored (main screen, cursor shown).
func TestMonitProcess(t *testing.T) {
	c := startRun(t, fmt.Sprintf("instances: 2\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv), "--", os.Args[0])
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	stopLoad := startLoad(t, st.Addr)
	defer stopLoad()

	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"monit", "-socket", c.socket}, func(string) string { return "" }, &out, &errb); err != nil {
		t.Fatalf("monit on a pipe: %v %s", err, errb.String())
	}
	if rows := onlineRows(out.String()); len(rows) != 2 || !strings.Contains(out.String(), "host cpu") || strings.Contains(out.String(), "q to quit") {
		t.Errorf("monit on a pipe: want one frame, two online rows, host cpu, no key hint; got:\n%s", out.String())
	}

	proctest.Need(t, "tmux")
	dir := t.TempDir()
	sock := filepath.Join(dir, "tmux.sock") // a server of our own, not the user's
	conf := filepath.Join(dir, "tmux.conf")
	// No status line: the pane is the whole 100x30 window.
	if err := os.WriteFile(conf, []byte("set -g status off\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tmux := func(args ...string) (string, error) {
		out, err := exec.Command("tmux", append([]string{"-S", sock, "-f", conf}, args...)...).CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() { tmux("kill-server") }) // HUP to anything still in a pane
	pane := func(name, format string) string {
		out, _ := tmux("display-message", "-p", "-t", name, format)
		return strings.TrimSpace(out)
	}
	// How each pane's monit is ended: a key, or SIGTERM to the process (the shell's child).
	quits := map[string]func(name string) error{
		"quit-q":      func(name string) error { return sendKeys(tmux, name, "q") },
		"quit-ctrl-c": func(name string) error { return sendKeys(tmux, name, "C-c") },
		"quit-sigterm": func(name string) error {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%[1]s/task/%[1]s/children", pane(name, "#{pane_pid}")))
			if err != nil {
				return err
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				return fmt.Errorf("monit's pid from %q: %w", b, err)
			}
			return syscall.Kill(pid, syscall.SIGTERM)
		},
	}
	// A shell around monit says, once it has exited, how and whether the terminal's modes
	// are back as they were, then keeps the pane open (tmux hides the cursor of a dead pane).
	const wrap = `before=$(stty -g); "$0" "$@"; rc=$?; ` +
		`if [ "$(stty -g)" = "$before" ]; then modes=restored; else modes=changed; fi; ` +
		`echo "monit exited $rc, terminal modes $modes"; exec sleep 60`
	for name := range quits {
		if out, err := tmux("new-session", "-d", "-s", name, "-x", "100", "-y", "30",
			"-e", roleEnv+"=supervisor", "-e", "GORACE=atexit_sleep_ms=0",
			"sh", "-c", wrap, os.Args[0], "monit", "-socket", c.socket); err != nil {
			t.Fatalf("tmux new-session: %v %s", err, out)
		}
	}

	start := time.Now()
	for name := range quits {
		// Both slots shown online with req/s above 0 in some frame, and a frame with three
		// bars of history: redrawn each second, with the figures of each.
		seen, bars := map[int]bool{}, 0
		var screen string
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			screen, _ = tmux("capture-pane", "-p", "-t", name)
			for id, r := range onlineRows(screen) {
				if r.rps > 0 {
					seen[id] = true
				}
				bars = max(bars, r.bars)
			}
			if seen[0] && seen[1] && bars >= 3 && strings.Contains(screen, "cpu0 [") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no frames with both slots serving, 3 s of history and the host's cores in 20 s; last:\n%s", name, screen)
			}
		}
		if got := pane(name, "#{alternate_on} #{cursor_flag}"); got != "1 0" {
			t.Errorf("%s: alternate screen, cursor flag = %q while running, want 1 0", name, got)
		}
		if name == "quit-q" {
			t.Logf("screen (%v after start):\n%s", time.Since(start).Round(100*time.Millisecond), screen)
		}
	}
	for name, quit := range quits {
		if err := quit(name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for name := range quits {
		var screen string
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if screen, _ = tmux("capture-pane", "-p", "-t", name); strings.Contains(screen, "monit exited") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: still running 5 s later:\n%s", name, screen)
			}
		}
		if !strings.Contains(screen, "monit exited 0, terminal modes restored") {
			t.Errorf("%s:\n%s\nwant an exit status of 0 and the modes restored", name, screen)
		}
		if got := pane(name, "#{alternate_on} #{cursor_flag}"); got != "0 1" {
			t.Errorf("%s: alternate screen, cursor flag = %q after exit, want 0 1 (main screen, cursor shown)", name, got)
		}
	}
}

// rowRE is an online worker's line of a frame: its slot, its req/s, the rest.
var rowRE = regexp.MustCompile(`(?m)^(\d+) +online +([\d,.]+) (.*)$`)

// frameRow is what a test reads of a worker's line: its req/s and how many bars its
// sparkline has.
type frameRow struct {
	rps  float64
	bars int
}

// onlineRows reads a frame's online workers by slot.
func onlineRows(screen string) map[int]frameRow {
	rows := map[int]frameRow{}
	for _, m := range rowRE.FindAllStringSubmatch(screen, -1) {
		id, _ := strconv.Atoi(m[1])
		rps, _ := strconv.ParseFloat(strings.ReplaceAll(m[2], ",", ""), 64)
		rows[id] = frameRow{rps: rps, bars: countBars(m[3])}
	}
	return rows
}

// countBars counts the sparkline cells in s.
func countBars(s string) int {
	n := 0
	for _, r := range s {
		if slices.Contains(sparkBlocks, r) {
			n++
		}
	}
	return n
}

// sendKeys types keys into the tmux pane name.
func sendKeys(tmux func(...string) (string, error), name string, keys ...string) error {
	if out, err := tmux(append([]string{"send-keys", "-t", name}, keys...)...); err != nil {
		return fmt.Errorf("send-keys: %w: %s", err, out)
	}
	return nil
}

// startLoad sends requests to addr from two clients, a new connection each, so that the
// kernel's steering spreads them over both workers, until the returned stop is called.
func startLoad(t *testing.T, addr string) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				case <-time.After(2 * time.Millisecond):
				}
				if resp, err := client.Get("http://" + addr + "/"); err == nil {
					resp.Body.Close()
				}
			}
		}()
	}
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}
