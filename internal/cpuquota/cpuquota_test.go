package cpuquota

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The test binary is also a busy process: with CPUQUOTA_SPIN=1 it spins until killed.
func TestMain(m *testing.M) {
	if os.Getenv("CPUQUOTA_SPIN") == "1" {
		//lint:ignore SA5002 it spins on purpose: the busy process the quota holds
		for {
		}
	}
	os.Exit(m.Run())
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCreateOnFixtures checks the files Create writes on fake hierarchies.
func TestCreateOnFixtures(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, root string)
		cores   float64
		want    map[string]string // file under root → content
		version int
		err     string
	}{
		{"v2", func(t *testing.T, root string) {
			write(t, root+"/cgroup.controllers", "cpuset cpu io memory pids\n")
			write(t, root+"/cgroup.subtree_control", "")
		}, 0.2, map[string]string{"cgroup.subtree_control": "+cpu", "q/cpu.max": "20000 100000"}, 2, ""},
		{"v1", func(t *testing.T, root string) {
			write(t, root+"/cpu/cpu.cfs_quota_us", "-1\n")
		}, 1.5, map[string]string{"cpu/q/cpu.cfs_period_us": "100000", "cpu/q/cpu.cfs_quota_us": "150000"}, 1, ""},
		{"v1 cpu,cpuacct", func(t *testing.T, root string) {
			write(t, root+"/cpu,cpuacct/cpu.cfs_quota_us", "-1\n")
		}, 0.5, map[string]string{"cpu,cpuacct/q/cpu.cfs_quota_us": "50000"}, 1, ""},
		{"v2 without cpu", func(t *testing.T, root string) {
			write(t, root+"/cgroup.controllers", "memory pids\n")
		}, 0.2, nil, 0, "without the cpu controller"},
		{"nothing", func(t *testing.T, root string) {}, 0.2, nil, 0, "no cgroup cpu controller"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			tt.setup(t, root)
			q, err := Create(Config{Root: root}, "q", tt.cores)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Create: %v, want an error with %q", err, tt.err)
				}
				if !errors.Is(err, ErrUnsupported) {
					t.Errorf("Create: %v, want ErrUnsupported", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if q.Version != tt.version {
				t.Errorf("version %d, want %d", q.Version, tt.version)
			}
			for f, want := range tt.want {
				if got := read(t, filepath.Join(root, f)); got != want {
					t.Errorf("%s = %q, want %q", f, got, want)
				}
			}
			if err := q.Join(1234); err != nil || read(t, filepath.Join(q.Dir, "cgroup.procs")) != "1234" {
				t.Errorf("Join: %v", err)
			}
		})
	}
}

func TestCreateRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		qname string
		cores float64
	}{
		{"path in name", "a/b", 0.2}, {"dot dot", "..", 0.2}, {"empty", "", 0.2},
		{"zero cores", "q", 0}, {"negative", "q", -1}, {"too many", "q", 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Create(Config{Root: t.TempDir()}, tc.qname, tc.cores); err == nil {
				t.Errorf("Create(%q, %v) = nil error", tc.qname, tc.cores)
			}
		})
	}
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		version int
		want    Stats
		wantErr bool
	}{
		{"v2", "usage_usec 100\nuser_usec 60\nsystem_usec 40\nnr_periods 10\nnr_throttled 4\nthrottled_usec 2500\n", 2,
			Stats{Periods: 10, Throttled: 4, ThrottledFor: 2500 * time.Microsecond}, false},
		{"v1", "nr_periods 7\nnr_throttled 3\nthrottled_time 5000000\nnr_bursts 0\nburst_time 0\n", 1,
			Stats{Periods: 7, Throttled: 3, ThrottledFor: 5 * time.Millisecond}, false},
		{"garbage value", "nr_periods x\n", 1, Stats{}, true},
		{"empty", "", 2, Stats{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat([]byte(tt.in), tt.version)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseStat = %+v, %v; want %+v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("nr_periods 7\nnr_throttled 3\nthrottled_time 5000000\n"), 1)
	f.Add([]byte("throttled_usec 18446744073709551615\n"), 2)
	f.Fuzz(func(t *testing.T, b []byte, version int) {
		parseStat(b, version) // must not panic
	})
}

// TestQuotaHoldsABusyProcess: on a machine where this process may make cgroups (root),
// a spinning process in a 0.2-core quota uses about 0.2 cores.
func TestQuotaHoldsABusyProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("spins a process for a second")
	}
	q, err := Create(Config{}, fmt.Sprintf("onehost-test-%d", os.Getpid()), 0.2)
	if err != nil {
		t.Skipf("no cpu quota here: %v", err)
	}
	defer q.Remove()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CPUQUOTA_SPIN=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := q.Join(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	ticks := func() float64 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		u, _ := strconv.ParseFloat(f[11], 64)
		s, _ := strconv.ParseFloat(f[12], 64)
		return u + s
	}
	t0, start := ticks(), time.Now()
	time.Sleep(1500 * time.Millisecond)
	cores := (ticks() - t0) / 100 / time.Since(start).Seconds()
	st, err := q.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a spinning process in a 0.2-core quota (cgroup v%d): %.2f cores; %+v", q.Version, cores, st)
	if cores > 0.35 {
		t.Errorf("%.2f cores used under a 0.2-core quota", cores)
	}
	if st.Throttled == 0 {
		t.Errorf("never throttled: %+v", st)
	}
}

// TestLimitOf reads a process's own limit from fixture hierarchies: the smallest quota
// along its cgroup's path, v1 or v2.
func TestLimitOf(t *testing.T) {
	write := func(t *testing.T, path, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		files  map[string]string
		cgroup string
		want   float64
	}{
		{"v2 own quota", map[string]string{"cgroup.controllers": "cpu io", "gen/cpu.max": "10000 100000"}, "0::/gen\n", 0.1},
		{"v2 parent's smaller", map[string]string{"cgroup.controllers": "cpu", "a/cpu.max": "50000 100000", "a/b/cpu.max": "max 100000"}, "0::/a/b\n", 0.5},
		{"v2 unlimited", map[string]string{"cgroup.controllers": "cpu", "a/cpu.max": "max 100000"}, "0::/a\n", 0},
		{"v1 cpu,cpuacct", map[string]string{"cpu,cpuacct/cpu.cfs_quota_us": "-1", "cpu,cpuacct/cpu.cfs_period_us": "100000",
			"cpu,cpuacct/g/cpu.cfs_quota_us": "20000", "cpu,cpuacct/g/cpu.cfs_period_us": "100000"}, "4:cpu,cpuacct:/g\n0::/\n", 0.2},
		{"v1 root only", map[string]string{"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, "1:cpu:/\n", 0},
		{"nothing", nil, "garbage", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for f, s := range tc.files {
				write(t, filepath.Join(root, f), s)
			}
			if got := limitOf(root, []byte(tc.cgroup)); got != tc.want {
				t.Errorf("got %v cores, want %v", got, tc.want)
			}
		})
	}
}
