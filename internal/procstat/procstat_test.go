package procstat

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/proctest"
)

// The test binary plays the sampled processes when this variable names the role.
const roleEnv = "PROCSTAT_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "tree":
		helperTree()
		os.Exit(0)
	case "burn":
		helperBurn()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helperTree dials PROCSTAT_DIAL and holds the connection, waits for a line on stdin,
// runs a child that burns CPU and waits for it (so the child's time lands in this
// process's cutime), prints "done", and exits when stdin closes.
func helperTree() {
	conn, err := net.Dial("tcp", os.Getenv("PROCSTAT_DIAL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	defer conn.Close()
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		os.Exit(2)
	}
	exe, _ := os.Executable()
	c := exec.Command(exe)
	c.Env = append(os.Environ(), roleEnv+"=burn")
	c.Stderr = os.Stderr
	if err := c.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "helper: burn:", err)
		os.Exit(2)
	}
	fmt.Println("done")
	io.Copy(io.Discard, in)
}

// helperBurn spins until it has used 300 ms of CPU by its own account, however busy the
// machine is.
func helperBurn() {
	x := 1.0
	for {
		for i := 0; i < 100000; i++ {
			x = math.Sqrt(x + float64(i))
		}
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		used := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		if used >= 300*time.Millisecond {
			fmt.Fprint(io.Discard, x)
			return
		}
	}
}

// TestRealTree samples a real process tree: a helper that holds one TCP connection and
// runs a grandchild burning 0.3 s of CPU. With a short interval the grandchild is seen
// alive; with a long one it lives and dies between the two readings and is found only in
// its parent's cutime.
func TestRealTree(t *testing.T) {
	tests := []struct {
		name     string
		interval time.Duration
	}{
		{"seen while burning", 20 * time.Millisecond},
		{"never seen", time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() { // owned by ln: returns when the test closes it
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					defer c.Close()
				}
			}()

			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(exe)
			cmd.Env = append(os.Environ(), roleEnv+"=tree", "PROCSTAT_DIAL="+ln.Addr().String())
			cmd.Stderr = os.Stderr
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer stdin.Close()
			out := bufio.NewReader(stdout)
			if line, err := out.ReadString('\n'); line != "ready\n" {
				t.Fatalf("helper said %q, %v; want ready", line, err)
			}

			s, err := Start(Config{PID: cmd.Process.Pid, Interval: tc.interval, Conns: true})
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(stdin, "go\n")
			if line, err := out.ReadString('\n'); line != "done\n" {
				s.Stop()
				t.Fatalf("helper said %q, %v; want done", line, err)
			}
			sum := s.Stop()

			if cpu := sum.UserSec + sum.SysSec; cpu < 0.25 {
				t.Errorf("tree CPU = %.3f s (user %.3f, sys %.3f), want >= 0.25 (the grandchild burned 0.3 s)",
					cpu, sum.UserSec, sum.SysSec)
			}
			if sum.PeakConns != 1 {
				t.Errorf("peak connections = %d, want 1 (the helper's one client socket)", sum.PeakConns)
			}
			if len(sum.Samples) == 0 {
				t.Fatal("no samples")
			}
			last := sum.Samples[len(sum.Samples)-1]
			if last.Procs != 1 || last.RSS <= 0 {
				t.Errorf("last sample procs = %d, rss = %d; want 1 process with some memory", last.Procs, last.RSS)
			}
		})
	}
}

func TestStartMissingProcess(t *testing.T) {
	if _, err := Start(Config{PID: 999, Root: filepath.Join("testdata", "proc")}); err == nil {
		t.Fatal("Start of a missing pid succeeded, want an error")
	}
}

// TestFixture reads the fixture tree: 100 → 101 → 102, with 1 and 200 outside the tree.
func TestFixture(t *testing.T) {
	page := int64(os.Getpagesize())
	tests := []struct {
		name      string
		pid       int
		wantProcs int
		wantRSS   int64
		noConns   bool // Config.Conns off: nothing is counted
		wantConns int
	}{
		// 1001 (tcp, established) and 1003 (tcp6) of 100, 1004 of 101; 1002 listens and
		// 1006 is in TIME_WAIT; 1005 belongs to 200.
		{"whole tree", 100, 3, (1000 + 2000 + 100) * page, false, 3},
		{"subtree", 101, 2, (2000 + 100) * page, false, 1},
		{"leaf", 102, 1, 100 * page, false, 0},
		{"host only", 0, 0, 0, false, 0},
		{"whole tree, connections not asked for", 100, 3, (1000 + 2000 + 100) * page, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Start(Config{PID: tc.pid, Root: filepath.Join("testdata", "proc"), Interval: time.Hour, Conns: !tc.noConns})
			if err != nil {
				t.Fatal(err)
			}
			sum := s.Stop()
			if len(sum.Samples) != 1 {
				t.Fatalf("got %d samples, want 1 (the final reading)", len(sum.Samples))
			}
			got := sum.Samples[0]
			if got.Procs != tc.wantProcs || got.RSS != tc.wantRSS || got.Conns != tc.wantConns {
				t.Errorf("procs, rss, conns = %d, %d, %d; want %d, %d, %d",
					got.Procs, got.RSS, got.Conns, tc.wantProcs, tc.wantRSS, tc.wantConns)
			}
			if sum.PeakConns != tc.wantConns || sum.PeakRSS != tc.wantRSS {
				t.Errorf("peaks conns, rss = %d, %d; want %d, %d", sum.PeakConns, sum.PeakRSS, tc.wantConns, tc.wantRSS)
			}
			if sum.UserSec != 0 || sum.SysSec != 0 || sum.NetRx != 0 {
				t.Errorf("unchanged fixture shows user %v, sys %v, rx %v; want zeros", sum.UserSec, sum.SysSec, sum.NetRx)
			}
		})
	}
}

// fakeProc is one process of a generated /proc tree.
type fakeProc struct {
	pid, ppid     int
	start         uint64
	u, s, cu, cs  uint64
	residentPages int64
}

// writeTree replaces root's processes with procs and its host counters with host.
func writeTree(t *testing.T, root string, host string, procs ...fakeProc) {
	t.Helper()
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		os.RemoveAll(filepath.Join(root, e.Name()))
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(root, "stat"), []byte(host+"\n"), 0o644))
	for _, p := range procs {
		dir := filepath.Join(root, fmt.Sprint(p.pid))
		must(os.MkdirAll(filepath.Join(dir, "fd"), 0o755))
		line := fmt.Sprintf("%d (p %d) S %d 1 1 0 -1 0 0 0 0 0 %d %d %d %d 20 0 1 0 %d 0 0 0\n",
			p.pid, p.pid, p.ppid, p.u, p.s, p.cu, p.cs, p.start)
		must(os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644))
		must(os.WriteFile(filepath.Join(dir, "statm"), []byte(fmt.Sprintf("1 %d 0 0 0 0 0\n", p.residentPages)), 0o644))
	}
}

// TestAccounting walks generated /proc trees through exits, reaps and pid reuse and
// checks the tree's accumulated ticks after each reading. Process 10 is the root.
func TestAccounting(t *testing.T) {
	type step struct {
		procs             []fakeProc
		wantUser, wantSys uint64 // accumulated since the first reading
	}
	root := func(u, s, cu, cs uint64) fakeProc {
		return fakeProc{pid: 10, ppid: 1, start: 5, u: u, s: s, cu: cu, cs: cs}
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"own time grows", []step{
			{[]fakeProc{root(10, 4, 0, 0)}, 0, 0},
			{[]fakeProc{root(25, 9, 0, 0)}, 15, 5},
		}},
		{"time before start is not counted", []step{
			{[]fakeProc{root(1000, 500, 300, 200), {pid: 11, ppid: 10, start: 6, u: 70}}, 0, 0},
			{[]fakeProc{root(1000, 500, 300, 200), {pid: 11, ppid: 10, start: 6, u: 70}}, 0, 0},
		}},
		{"child exits and is reaped", []step{
			{[]fakeProc{root(5, 0, 0, 0), {pid: 11, ppid: 10, start: 6, u: 10, s: 2}}, 0, 0},
			{[]fakeProc{root(5, 0, 30, 3)}, 20, 1},
			{[]fakeProc{root(5, 0, 30, 3)}, 20, 1}, // stays put once reaped
		}},
		{"short-lived child never seen", []step{
			{[]fakeProc{root(5, 0, 0, 0)}, 0, 0},
			{[]fakeProc{root(5, 0, 40, 8)}, 40, 8},
		}},
		{"new child counted in full", []step{
			{[]fakeProc{root(5, 0, 0, 0)}, 0, 0},
			{[]fakeProc{root(5, 0, 0, 0), {pid: 11, ppid: 10, start: 9, u: 7, s: 1}}, 7, 1},
			{[]fakeProc{root(5, 0, 0, 0), {pid: 11, ppid: 10, start: 9, u: 9, s: 1}, {pid: 12, ppid: 11, start: 10, u: 3}}, 12, 1},
		}},
		{"child and grandchild exit in one interval", []step{
			{[]fakeProc{root(0, 0, 0, 0), {pid: 11, ppid: 10, start: 6, u: 10}, {pid: 12, ppid: 11, start: 7, u: 20}}, 0, 0},
			// 11 ran 2 more ticks and reaped 12 (final 25): root's cutime = 12 + 25.
			{[]fakeProc{root(0, 0, 37, 0)}, 7, 0},
		}},
		{"pid reused by a new child", []step{
			{[]fakeProc{root(0, 0, 0, 0), {pid: 11, ppid: 10, start: 6, u: 10}}, 0, 0},
			{[]fakeProc{root(0, 0, 10, 0), {pid: 11, ppid: 10, start: 60, u: 3}}, 3, 0},
		}},
		{"orphan stays in the tree until it exits", []step{
			{[]fakeProc{root(0, 0, 0, 0), {pid: 11, ppid: 10, start: 6, u: 10}}, 0, 0},
			{[]fakeProc{root(0, 0, 0, 0), {pid: 11, ppid: 1, start: 6, u: 15}}, 5, 0},
			{[]fakeProc{root(0, 0, 0, 0)}, 5, 0}, // reaped by init: its tail is lost, nothing goes back
		}},
		{"root exits, its children remain", []step{
			{[]fakeProc{root(0, 0, 0, 0), {pid: 11, ppid: 10, start: 6, u: 10}}, 0, 0},
			{[]fakeProc{{pid: 11, ppid: 1, start: 6, u: 14}}, 4, 0},
		}},
		{"counters going backwards add nothing", []step{
			{[]fakeProc{root(50, 50, 50, 50)}, 0, 0},
			{[]fakeProc{root(40, 40, 40, 40)}, 0, 0},
			{[]fakeProc{root(45, 40, 40, 40)}, 5, 0},
		}},
	}
	const host = "cpu  1 0 1 1 0 0 0 0 0 0"
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st := newState(dir)
			st.roots = []key{{10, 5}}
			for i, s := range tc.steps {
				writeTree(t, dir, host, s.procs...)
				r, err := st.read(time.Now())
				if err != nil {
					t.Fatal(err)
				}
				if r.user != s.wantUser || r.sys != s.wantSys {
					t.Errorf("step %d: user, sys = %d, %d ticks; want %d, %d", i, r.user, r.sys, s.wantUser, s.wantSys)
				}
			}
		})
	}
}

func TestParsers(t *testing.T) {
	t.Run("host percent", func(t *testing.T) {
		// deltas: user 50+10, system 20+5, idle 100, iowait 5, softirq 5, steal 5 = 200
		a := CPUTime{User: 1, System: 1, Idle: 1}
		b := CPUTime{User: 1.5, Nice: 0.1, System: 1.2, Idle: 2, IOWait: 0.05, IRQ: 0.05, SoftIRQ: 0.05, Steal: 0.05}
		want := HostCPU{User: 30, System: 12.5, Idle: 50, Steal: 2.5, SoftIRQ: 2.5, IOWait: 2.5}
		if got := hostPercent(a, b); !nearHostCPU(got, want) {
			t.Errorf("hostPercent = %+v, want %+v", got, want)
		}
		// A counter going backwards counts as no time, not as negative time.
		if got := hostPercent(CPUTime{Idle: 9, User: 1}, CPUTime{Idle: 5, User: 2}); got != (HostCPU{User: 100}) {
			t.Errorf("hostPercent with idle going backwards = %+v, want all user", got)
		}
		if got := hostPercent(b, b); got != (HostCPU{}) {
			t.Errorf("hostPercent of no time = %+v, want zero", got)
		}
	})
	t.Run("net dev", func(t *testing.T) {
		b, _ := os.ReadFile(filepath.Join("testdata", "proc", "net", "dev"))
		all, lo, err := parseNetDev(b)
		if all != (netBytes{6200, 5300}) || lo != (netBytes{5000, 5000}) || err != nil {
			t.Errorf("parseNetDev = %+v, %+v, %v; want {6200 5300}, {5000 5000}, nil", all, lo, err)
		}
	})
	t.Run("socket links", func(t *testing.T) {
		for _, tc := range []struct {
			in   string
			want uint64
			ok   bool
		}{
			{"socket:[12345]", 12345, true},
			{"socket:[]", 0, false},
			{"pipe:[12345]", 0, false},
			{"/dev/null", 0, false},
			{"socket:[12x]", 0, false},
		} {
			got, ok := socketInode(tc.in)
			if got != tc.want || ok != tc.ok {
				t.Errorf("socketInode(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
			}
		}
	})
	t.Run("clock ticks", func(t *testing.T) {
		b, err := os.ReadFile("/proc/self/auxv")
		if err != nil {
			t.Skip("no /proc/self/auxv")
		}
		if hz, ok := auxvClockTicks(b); !ok || hz <= 0 {
			t.Errorf("auxvClockTicks = %d, %v; want a positive USER_HZ", hz, ok)
		}
	})
}

// nearHostCPU compares percentages computed from seconds, which need not be exact.
func nearHostCPU(a, b HostCPU) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	return near(a.User, b.User) && near(a.System, b.System) && near(a.Idle, b.Idle) &&
		near(a.Steal, b.Steal) && near(a.SoftIRQ, b.SoftIRQ) && near(a.IOWait, b.IOWait)
}

func TestParseHostStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    CPUTime
		wantErr bool
	}{
		{"every column", "cpu  100 5 50 800 10 1 4 30 7 7\ncpu0 50 0 25 400 5 0 2 15 0 0\n",
			CPUTime{CPU: -1, User: 1, Nice: 0.05, System: 0.5, Idle: 8, IOWait: 0.1, IRQ: 0.01, SoftIRQ: 0.04, Steal: 0.3}, false},
		{"older kernel, fewer columns", "cpu 100 0 50 800\n", CPUTime{CPU: -1, User: 1, System: 0.5, Idle: 8}, false},
		{"no cpu line", "intr 1 2 3\n", CPUTime{}, true},
		{"a cpuN line first", "cpu0 1 2 3 4\ncpu 1 2 3 4\n", CPUTime{}, true},
		{"bad field", "cpu 1 x 3 4\n", CPUTime{}, true},
		{"empty", "", CPUTime{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseHostStat([]byte(tc.in), 100)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseHostStat error = %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("parseHostStat = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseNetDev(t *testing.T) {
	const header = "Inter-|   Receive                                                |  Transmit\n" +
		" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
	tests := []struct {
		name    string
		in      string
		all, lo netBytes
		wantErr bool
	}{
		{"loopback and a nic", header +
			"    lo: 123456     100    0    0    0     0          0         0   654321     100    0    0    0     0       0          0\n" +
			"  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n",
			netBytes{123457, 654330}, netBytes{123456, 654321}, false},
		{"no loopback", header + "eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", netBytes{1, 9}, netBytes{}, false},
		{"a name ending in lo is not lo", header + "vlo: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", netBytes{1, 9}, netBytes{}, false},
		{"headers only", header, netBytes{}, netBytes{}, false},
		{"short line", header + "lo: 1 2 3\n", netBytes{}, netBytes{}, true},
		{"bad counter", header + "lo: x 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", netBytes{}, netBytes{}, true},
		{"counter past int64", header + "lo: 9223372036854775808 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", netBytes{}, netBytes{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			all, lo, err := parseNetDev([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseNetDev error = %v, want error %v", err, tc.wantErr)
			}
			if all != tc.all || lo != tc.lo {
				t.Errorf("parseNetDev = %+v, %+v; want %+v, %+v", all, lo, tc.all, tc.lo)
			}
		})
	}
}

func FuzzParseHostStat(f *testing.F) {
	f.Add([]byte("cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 1 2 3 4\n"))
	f.Add([]byte("cpu 1 2 3 4\n"))
	f.Add([]byte("intr 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parseHostStat(b, 100)
		if err != nil {
			return
		}
		if got.CPU != -1 || got.Total() < 0 {
			t.Fatalf("parseHostStat(%q) = %+v: want cpu -1 and no negative time", b, got)
		}
	})
}

func FuzzParseNetDev(f *testing.F) {
	f.Add([]byte("h\nh\n    lo: 5000 50 0 0 0 0 0 0 5000 50 0 0 0 0 0 0\n  eth0: 1200 12 0 0 0 0 0 0 300 3 0 0 0 0 0 0\n"), uint64(1), uint64(2))
	f.Add([]byte("lo: 1 2 3\n"), uint64(1<<63), uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, rx, tx uint64) {
		// Whatever the bytes, parsing never panics.
		parseNetDev(b)
		// A loopback line after the headers reads back as written.
		line := fmt.Sprintf("h\nh\n    lo: %d 1 0 0 0 0 0 0 %d 1 0 0 0 0 0 0\n", rx, tx)
		all, lo, err := parseNetDev([]byte(line))
		if rx > math.MaxInt64 || tx > math.MaxInt64 {
			if err == nil {
				t.Fatalf("parseNetDev(%q): no error for a counter past int64", line)
			}
			return
		}
		want := netBytes{int64(rx), int64(tx)}
		if err != nil || all != want || lo != want {
			t.Fatalf("parseNetDev(%q) = %+v, %+v, %v; want %+v twice", line, all, lo, err, want)
		}
	})
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    procStat
		wantErr bool
	}{
		{"plain", "42 (worker) S 7 42 42 0 -1 0 0 0 0 0 11 12 13 14 20 0 1 0 99 0 0",
			procStat{pid: 42, ppid: 7, pgrp: 42, state: 'S', utime: 11, stime: 12, cutime: 13, cstime: 14, starttime: 99}, false},
		{"comm with spaces and parens", "42 (a) b (c)) R 7 42 42 0 -1 0 0 0 0 0 11 12 13 14 20 0 1 0 99 0 0",
			procStat{pid: 42, ppid: 7, pgrp: 42, state: 'R', utime: 11, stime: 12, cutime: 13, cstime: 14, starttime: 99}, false},
		{"negative priority", "42 (w) S 7 42 42 0 -1 0 0 0 0 0 11 12 13 14 -2 -20 1 0 99 0 0",
			procStat{pid: 42, ppid: 7, pgrp: 42, state: 'S', utime: 11, stime: 12, cutime: 13, cstime: 14, starttime: 99}, false},
		{"truncated", "42 (w) S 7 42 42", procStat{}, true},
		{"no comm", "42 w S 7 42 42 0 -1 0 0 0 0 0 11 12 13 14 20 0 1 0 99 0 0", procStat{}, true},
		{"bad pid", "x (w) S 7 42 42 0 -1 0 0 0 0 0 11 12 13 14 20 0 1 0 99 0 0", procStat{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.line))
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseStat error = %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && got != tc.want {
				t.Errorf("parseStat = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestRunning: a process that exists and has not exited is running; a zombie (exited,
// not yet reaped) and a pid with no process are not. The fixture tree's pid 100 has ") "
// inside its comm: the state is read after the last ')'.
func TestRunning(t *testing.T) {
	zombie, reap := proctest.Zombie(t)
	fixture := filepath.Join("testdata", "proc")
	tests := []struct {
		name string
		root string
		pid  int
		want bool
	}{
		{"this process", "", os.Getpid(), true},
		{"fixture, comm with parentheses", fixture, 100, true},
		{"zombie", "", zombie, false},
		{"no such pid", fixture, 999, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Running(tc.root, tc.pid); got != tc.want {
				t.Errorf("Running(%q, %d) = %v, want %v", tc.root, tc.pid, got, tc.want)
			}
		})
	}
	reap()
	if Running("", zombie) {
		t.Errorf("Running(%d) after it was reaped = true", zombie)
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add("worker", 7, uint64(11), uint64(12), uint64(13), uint64(14), uint64(99))
	f.Add("a) b (c)", 1, uint64(0), uint64(0), uint64(0), uint64(0), uint64(1))
	f.Add(") ) )", 0, uint64(1<<63), uint64(1), uint64(2), uint64(3), uint64(4))
	f.Add("((", 2, uint64(5), uint64(6), uint64(7), uint64(8), uint64(9))
	f.Fuzz(func(t *testing.T, comm string, ppid int, u, s, cu, cs, start uint64) {
		// Whatever the bytes, parsing never panics.
		parseStat([]byte(comm))
		// A well-formed line round-trips, whatever the comm (the kernel allows any bytes
		// but NUL and newline in it, up to 15 of them; longer ones are fine here too).
		if strings.ContainsAny(comm, "\x00\n") || ppid < 0 {
			return
		}
		line := fmt.Sprintf("123 (%s) S %d 1 1 0 -1 0 0 0 0 0 %d %d %d %d 20 0 1 0 %d 0 0\n", comm, ppid, u, s, cu, cs, start)
		got, err := parseStat([]byte(line))
		want := procStat{pid: 123, ppid: ppid, pgrp: 1, state: 'S', utime: u, stime: s, cutime: cu, cstime: cs, starttime: start}
		if err != nil || got != want {
			t.Fatalf("parseStat(%q) = %+v, %v; want %+v", line, got, err, want)
		}
	})
}

// TestTree reads a generated tree through a fork between scans, a reaped child and the
// root's exit: the CPU counts each process's whole time, a child born between scans is
// counted at the next, and nothing already counted is lost when a child is reaped.
func TestTree(t *testing.T) {
	root := t.TempDir()
	const host = "cpu 0 0 0 0 0 0 0 0 0 0"
	writeTree(t, root, host, fakeProc{pid: 10, ppid: 1, start: 5, u: 100, s: 50, residentPages: 10})
	tr, err := NewTree(TreeConfig{PID: 10, Root: root, Rescan: 2})
	if err != nil {
		t.Fatal(err)
	}
	pg := int64(os.Getpagesize())
	steps := []struct {
		name  string
		procs []fakeProc
		cpu   time.Duration
		rss   int64
		n     int
	}{
		{"root alone, its whole time", []fakeProc{{pid: 10, ppid: 1, start: 5, u: 100, s: 50, residentPages: 10}}, 1500 * time.Millisecond, 10 * pg, 1},
		{"a child forked: not scanned yet", []fakeProc{{pid: 10, ppid: 1, start: 5, u: 110, s: 50, residentPages: 10}, {pid: 11, ppid: 10, start: 7, u: 20, residentPages: 5}}, 1600 * time.Millisecond, 10 * pg, 1},
		{"the scan finds it, with its time", []fakeProc{{pid: 10, ppid: 1, start: 5, u: 110, s: 50, residentPages: 10}, {pid: 11, ppid: 10, start: 7, u: 30, residentPages: 5}}, 1900 * time.Millisecond, 15 * pg, 2},
		{"the child reaped", []fakeProc{{pid: 10, ppid: 1, start: 5, u: 110, s: 50, cu: 40, residentPages: 10}}, 2000 * time.Millisecond, 10 * pg, 1},
	}
	for _, st := range steps {
		writeTree(t, root, host, st.procs...)
		u, err := tr.Read()
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if u.CPU != st.cpu || u.RSS != st.rss || u.Procs != st.n {
			t.Errorf("%s: got cpu %v rss %d procs %d, want %v %d %d", st.name, u.CPU, u.RSS, u.Procs, st.cpu, st.rss, st.n)
		}
	}
	writeTree(t, root, host)
	if _, err := tr.Read(); err == nil {
		t.Error("Read of a tree with no process left: want an error")
	}
	if _, err := NewTree(TreeConfig{PID: 99, Root: root}); err == nil {
		t.Error("NewTree of a missing process: want an error")
	}
}

// TestTreeRoots reads a tree of several roots, one of which descends from another (PM2's
// launcher and its God), and one missing: each process is counted once, user and kernel
// time apart, and the tree's members are listed.
func TestTreeRoots(t *testing.T) {
	root := t.TempDir()
	const host = "cpu 0 0 0 0 0 0 0 0 0 0"
	launcher := fakeProc{pid: 10, ppid: 1, start: 5, u: 10, s: 20}
	god := fakeProc{pid: 20, ppid: 10, start: 6, u: 100, s: 50}
	worker := fakeProc{pid: 21, ppid: 20, start: 7, u: 300, s: 100}
	other := fakeProc{pid: 30, ppid: 1, start: 8, u: 1000}
	writeTree(t, root, host, launcher, god, worker, other)
	tr, err := NewTree(TreeConfig{PIDs: []int{10, 20, 99}, Root: root, Rescan: 1})
	if err != nil {
		t.Fatal(err)
	}
	u0, err := tr.Read()
	if err != nil {
		t.Fatal(err)
	}
	if u0.User != 4100*time.Millisecond || u0.System != 1700*time.Millisecond || u0.CPU != u0.User+u0.System || u0.Procs != 3 {
		t.Errorf("first reading %+v, want user 4.1s, system 1.7s, 3 procs", u0)
	}
	if got := tr.PIDs(); !slices.Equal(got, []int{10, 20, 21}) {
		t.Errorf("PIDs = %v, want [10 20 21]", got)
	}
	// The worker exits and is reaped by the God; a new one starts. Between the readings the
	// tree used: worker 21 +5 user ticks before it was reaped, worker 22 its 7 user ticks.
	god.cu, god.cs = worker.u+5, worker.s
	writeTree(t, root, host, launcher, god, fakeProc{pid: 22, ppid: 20, start: 9, u: 7}, other)
	u1, err := tr.Read()
	if err != nil {
		t.Fatal(err)
	}
	if d := u1.User - u0.User; d != 120*time.Millisecond || u1.System != u0.System {
		t.Errorf("user grew %v, system %v; want 120ms and nothing", d, u1.System-u0.System)
	}
	if got := tr.PIDs(); !slices.Equal(got, []int{10, 20, 22}) {
		t.Errorf("PIDs = %v, want [10 20 22]", got)
	}
	for _, tc := range []struct {
		name string
		cfg  TreeConfig
	}{
		{"no root", TreeConfig{Root: root}},
		{"every root missing", TreeConfig{PIDs: []int{98, 99}, Root: root}},
		{"a bad pid", TreeConfig{PIDs: []int{10, -1}, Root: root}},
	} {
		if _, err := NewTree(tc.cfg); err == nil {
			t.Errorf("NewTree, %s: want an error", tc.name)
		}
	}
}

func TestRSS(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "42"), 0o755)
	os.WriteFile(filepath.Join(root, "42", "statm"), []byte("1000 25 10 1 0 30 0\n"), 0o644)
	os.MkdirAll(filepath.Join(root, "43"), 0o755)
	os.WriteFile(filepath.Join(root, "43", "statm"), []byte("1000\n"), 0o644)
	tests := []struct {
		name    string
		pid     int
		want    int64
		wantErr bool
	}{
		{"resident pages times the page size", 42, 25 * int64(os.Getpagesize()), false},
		{"too few fields", 43, 0, true},
		{"gone", 44, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RSS(root, tt.pid)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("RSS = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	if self, err := RSS("", os.Getpid()); err != nil || self <= 0 {
		t.Errorf("RSS of this process = %d, %v", self, err)
	}
}
