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
	"strings"
	"syscall"
	"testing"
	"time"
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

			s, err := Start(Config{PID: cmd.Process.Pid, Interval: tc.interval})
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
		wantConns int
	}{
		// 1001 (tcp, established) and 1003 (tcp6) of 100, 1004 of 101; 1002 listens and
		// 1006 is in TIME_WAIT; 1005 belongs to 200.
		{"whole tree", 100, 3, (1000 + 2000 + 100) * page, 3},
		{"subtree", 101, 2, (2000 + 100) * page, 1},
		{"leaf", 102, 1, 100 * page, 0},
		{"host only", 0, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Start(Config{PID: tc.pid, Root: filepath.Join("testdata", "proc"), Interval: time.Hour})
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
			st := newState(dir, 10)
			st.rootStart = 5
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
		a, _ := parseHostStat([]byte("cpu  100 0 100 100 0 0 0 0 0 0\n"))
		b, _ := parseHostStat([]byte("cpu  150 10 120 200 5 5 5 5 0 0\n"))
		got := hostPercent(a, b) // deltas: user 50+10, system 20+5, idle 100, iowait 5, softirq 5, steal 5 = 200
		want := HostCPU{User: 30, System: 12.5, Idle: 50, Steal: 2.5, SoftIRQ: 2.5, IOWait: 2.5}
		if got != want {
			t.Errorf("hostPercent = %+v, want %+v", got, want)
		}
	})
	t.Run("net dev", func(t *testing.T) {
		b, _ := os.ReadFile(filepath.Join("testdata", "proc", "net", "dev"))
		rx, tx, err := parseNetDev(b)
		if rx != 6200 || tx != 5300 || err != nil {
			t.Errorf("parseNetDev = %d, %d, %v; want 6200, 5300, nil", rx, tx, err)
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

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    procStat
		wantErr bool
	}{
		{"plain", "42 (worker) S 7 42 42 0 -1 0 0 0 0 0 11 12 13 14 20 0 1 0 99 0 0",
			procStat{pid: 42, ppid: 7, state: 'S', utime: 11, stime: 12, cutime: 13, cstime: 14, starttime: 99}, false},
		{"comm with spaces and parens", "42 (a) b (c)) R 7 42 42 0 -1 0 0 0 0 0 11 12 13 14 20 0 1 0 99 0 0",
			procStat{pid: 42, ppid: 7, state: 'R', utime: 11, stime: 12, cutime: 13, cstime: 14, starttime: 99}, false},
		{"negative priority", "42 (w) S 7 42 42 0 -1 0 0 0 0 0 11 12 13 14 -2 -20 1 0 99 0 0",
			procStat{pid: 42, ppid: 7, state: 'S', utime: 11, stime: 12, cutime: 13, cstime: 14, starttime: 99}, false},
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
		want := procStat{pid: 123, ppid: ppid, state: 'S', utime: u, stime: s, cutime: cu, cstime: cs, starttime: start}
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
