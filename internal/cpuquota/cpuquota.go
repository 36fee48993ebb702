// Package cpuquota makes a cgroup that holds the processes put in it to a fraction of one
// CPU, as `systemd-run --scope -p CPUQuota=20%` does: cgroup v2's cpu.max where the unified
// hierarchy has the cpu controller, else cgroup v1's cpu.cfs_quota_us. The "$12 Server
// Challenge" entries were measured that way (20 % of one core), so the challenge command
// runs servers in one.
//
// Creating a cgroup needs write access to the hierarchy (root, or a delegated subtree); Create
// says which files it could not write, so a caller can say so and run unlimited.
//
// Non-goals: memory or I/O limits, systemd's own scopes, other operating systems.
package cpuquota

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Period is the scheduler period the quota is a share of: 100 ms, systemd's default.
const Period = 100 * time.Millisecond

// Quota is a cgroup with a CPU limit.
type Quota struct {
	// Dir is the cgroup's directory; Version is 1 or 2.
	Dir     string
	Version int
	// Cores is the limit: 0.2 is 20 % of one CPU.
	Cores float64
}

// Config says where the cgroup file systems are. The zero value uses the system's.
type Config struct {
	// Root is where cgroup file systems are mounted. Default /sys/fs/cgroup.
	Root string
}

// ErrUnsupported reports a machine without a cgroup CPU controller this package can use.
var ErrUnsupported = errors.New("no cgroup cpu controller (v2 cpu.max or v1 cpu.cfs_quota_us) found")

// Create makes the cgroup name (a single path element) limited to cores CPUs.
func Create(cfg Config, name string, cores float64) (*Quota, error) {
	if cfg.Root == "" {
		cfg.Root = "/sys/fs/cgroup"
	}
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("create cpu quota: name %q: want one path element", name)
	}
	if cores <= 0 || cores > 1024 {
		return nil, fmt.Errorf("create cpu quota: %v cores: want more than 0 and at most 1024", cores)
	}
	quota := int64(cores * float64(Period/time.Microsecond))
	period := int64(Period / time.Microsecond)
	// Unified hierarchy at the root (pure v2) with the cpu controller.
	if ctl, err := os.ReadFile(filepath.Join(cfg.Root, "cgroup.controllers")); err == nil {
		if !hasWord(ctl, "cpu") {
			return nil, fmt.Errorf("create cpu quota: %w (cgroup v2 without the cpu controller)", ErrUnsupported)
		}
		// Children get the cpu controller only if the parent delegates it.
		if err := os.WriteFile(filepath.Join(cfg.Root, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
			return nil, fmt.Errorf("create cpu quota: enable the cpu controller for children: %w", err)
		}
		q := &Quota{Dir: filepath.Join(cfg.Root, name), Version: 2, Cores: cores}
		if err := q.make(filepath.Join(q.Dir, "cpu.max"), fmt.Sprintf("%d %d", quota, period)); err != nil {
			return nil, err
		}
		return q, nil
	}
	// v1: the cpu controller mounted on its own (or as cpu,cpuacct).
	for _, m := range []string{"cpu", "cpu,cpuacct", "cpuacct,cpu"} {
		base := filepath.Join(cfg.Root, m)
		if _, err := os.Stat(filepath.Join(base, "cpu.cfs_quota_us")); err != nil {
			continue
		}
		q := &Quota{Dir: filepath.Join(base, name), Version: 1, Cores: cores}
		if err := q.make(filepath.Join(q.Dir, "cpu.cfs_period_us"), strconv.FormatInt(period, 10)); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(q.Dir, "cpu.cfs_quota_us"), []byte(strconv.FormatInt(quota, 10)), 0); err != nil {
			q.Remove()
			return nil, fmt.Errorf("create cpu quota: set %s: %w", filepath.Join(q.Dir, "cpu.cfs_quota_us"), err)
		}
		return q, nil
	}
	return nil, fmt.Errorf("create cpu quota: %w under %s", ErrUnsupported, cfg.Root)
}

// make creates the directory (it may exist from an earlier run) and writes the first
// setting.
func (q *Quota) make(file, value string) error {
	if err := os.Mkdir(q.Dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create cpu quota: %w", err)
	}
	if err := os.WriteFile(file, []byte(value), 0); err != nil {
		q.Remove()
		return fmt.Errorf("create cpu quota: set %s: %w", file, err)
	}
	return nil
}

// Join moves the process pid (and the threads it has) into the cgroup; its children
// started later are born in it.
func (q *Quota) Join(pid int) error {
	if err := os.WriteFile(filepath.Join(q.Dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("join cpu quota %s: %w", q.Dir, err)
	}
	return nil
}

// Stats is what the kernel counted for the cgroup since it was made.
type Stats struct {
	// Periods is how many scheduler periods had runnable processes; Throttled, in how many
	// of them the quota ran out; ThrottledFor, how long the processes waited for it.
	Periods, Throttled uint64
	ThrottledFor       time.Duration
}

// Stats reads the cgroup's throttling counters (cpu.stat).
func (q *Quota) Stats() (Stats, error) {
	b, err := os.ReadFile(filepath.Join(q.Dir, "cpu.stat"))
	if err != nil {
		return Stats{}, fmt.Errorf("read cpu quota stats: %w", err)
	}
	return parseStat(b, q.Version)
}

// parseStat reads cpu.stat: nr_periods, nr_throttled, and throttled_usec (v2) or
// throttled_time in ns (v1).
func parseStat(b []byte, version int) (Stats, error) {
	var st Stats
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return Stats{}, fmt.Errorf("read cpu quota stats: %s %q: %w", k, v, err)
		}
		switch {
		case k == "nr_periods":
			st.Periods = n
		case k == "nr_throttled":
			st.Throttled = n
		case k == "throttled_usec" && version == 2:
			st.ThrottledFor = time.Duration(n) * time.Microsecond
		case k == "throttled_time" && version == 1:
			st.ThrottledFor = time.Duration(n)
		}
	}
	return st, sc.Err()
}

// Remove deletes the cgroup; it must hold no process any more.
func (q *Quota) Remove() error {
	if err := os.Remove(q.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove cpu quota: %w", err)
	}
	return nil
}

func hasWord(b []byte, w string) bool {
	for _, f := range strings.Fields(string(b)) {
		if f == w {
			return true
		}
	}
	return false
}

// Limit is the CPU limit, in cores, of the cgroup this process is in (the smallest
// quota of it and its ancestors, as the kernel applies them all), or 0 when none is set
// or none can be read: a generator divides its own CPU by it to say how much of what it
// may use it used.
func Limit(cfg Config) float64 {
	if cfg.Root == "" {
		cfg.Root = "/sys/fs/cgroup"
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	return limitOf(cfg.Root, b)
}

// limitOf reads the quotas along the paths /proc/self/cgroup (b) names: cgroup v2's
// cpu.max on the unified line ("0::/path"), v1's cpu.cfs_quota_us and cpu.cfs_period_us
// on the line of the cpu controller.
func limitOf(root string, b []byte) float64 {
	best := 0.0
	take := func(cores float64) {
		if cores > 0 && (best == 0 || cores < best) {
			best = cores
		}
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctls, path := parts[1], filepath.Clean("/"+parts[2])
		var dirs []string // the cgroup's directory and its ancestors' under one mount
		var read func(dir string) float64
		switch {
		case ctls == "":
			if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
				continue
			}
			dirs = []string{root}
			read = func(dir string) float64 {
				v, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
				if err != nil {
					return 0
				}
				f := strings.Fields(string(v))
				if len(f) != 2 || f[0] == "max" {
					return 0
				}
				q, err1 := strconv.ParseFloat(f[0], 64)
				p, err2 := strconv.ParseFloat(f[1], 64)
				if err1 != nil || err2 != nil || p <= 0 {
					return 0
				}
				return q / p
			}
		case hasWord([]byte(strings.ReplaceAll(ctls, ",", " ")), "cpu"):
			for _, m := range []string{ctls, "cpu", "cpu,cpuacct", "cpuacct,cpu"} {
				if _, err := os.Stat(filepath.Join(root, m, "cpu.cfs_quota_us")); err == nil {
					dirs = []string{filepath.Join(root, m)}
					break
				}
			}
			read = func(dir string) float64 {
				q, err1 := readInt(filepath.Join(dir, "cpu.cfs_quota_us"))
				p, err2 := readInt(filepath.Join(dir, "cpu.cfs_period_us"))
				if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
					return 0
				}
				return float64(q) / float64(p)
			}
		default:
			continue
		}
		if len(dirs) == 0 {
			continue
		}
		for p := path; ; p = filepath.Dir(p) {
			take(read(filepath.Join(dirs[0], p)))
			if p == "/" {
				break
			}
		}
	}
	return best
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
