package ceiling

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// clockTicks is USER_HZ, the unit of /proc CPU times: 100 on every Linux architecture Go
// supports (the kernel fixes it for the ABI, whatever CONFIG_HZ is).
const clockTicks = 100

// PIDStat is what the sweep reads from /proc/PID/stat.
type PIDStat struct {
	PPID     int
	UserTick uint64 // utime, in clock ticks
	SysTick  uint64 // stime
	RSSPages int64
}

// ParsePIDStat decodes /proc/PID/stat. The command name may hold spaces and parentheses,
// so fields are counted from the last ')'.
func ParsePIDStat(b []byte) (PIDStat, error) {
	var s PIDStat
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return s, errors.New("parse pid stat: no ')'")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime 15, rss 24.
	if len(f) < 22 {
		return s, fmt.Errorf("parse pid stat: %d fields after the name, want at least 22", len(f))
	}
	var err error
	if s.PPID, err = strconv.Atoi(f[1]); err != nil {
		return s, fmt.Errorf("parse pid stat ppid: %w", err)
	}
	if s.UserTick, err = strconv.ParseUint(f[11], 10, 64); err != nil {
		return s, fmt.Errorf("parse pid stat utime: %w", err)
	}
	if s.SysTick, err = strconv.ParseUint(f[12], 10, 64); err != nil {
		return s, fmt.Errorf("parse pid stat stime: %w", err)
	}
	if s.RSSPages, err = strconv.ParseInt(f[21], 10, 64); err != nil {
		return s, fmt.Errorf("parse pid stat rss: %w", err)
	}
	return s, nil
}

// CPUTimes is one line of /proc/stat, in clock ticks.
type CPUTimes struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
}

// Total is every tick of the line (guest time is already inside user).
func (c CPUTimes) Total() uint64 {
	return c.User + c.Nice + c.System + c.Idle + c.IOWait + c.IRQ + c.SoftIRQ + c.Steal
}

// Busy is every tick but idle and iowait.
func (c CPUTimes) Busy() uint64 { return c.Total() - c.Idle - c.IOWait }

// Sub is the ticks from c0 to c (zero where a counter went backwards).
func (c CPUTimes) Sub(c0 CPUTimes) CPUTimes {
	d := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	return CPUTimes{d(c.User, c0.User), d(c.Nice, c0.Nice), d(c.System, c0.System), d(c.Idle, c0.Idle),
		d(c.IOWait, c0.IOWait), d(c.IRQ, c0.IRQ), d(c.SoftIRQ, c0.SoftIRQ), d(c.Steal, c0.Steal)}
}

// Percent turns a tick delta into HostCPU percentages.
func (c CPUTimes) Percent() HostCPU {
	t := float64(c.Total())
	if t == 0 {
		return HostCPU{}
	}
	p := func(v uint64) float64 { return 100 * float64(v) / t }
	return HostCPU{User: p(c.User + c.Nice), System: p(c.System + c.IRQ), Idle: p(c.Idle), IOWait: p(c.IOWait),
		SoftIRQ: p(c.SoftIRQ), Steal: p(c.Steal)}
}

// ParseHostStat decodes /proc/stat's cpu lines: "cpu" (all) and "cpu0", "cpu1", ...
func ParseHostStat(b []byte) (map[string]CPUTimes, error) {
	out := make(map[string]CPUTimes)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		var v [8]uint64
		for i := 0; i < 8 && i+1 < len(f); i++ {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("parse /proc/stat %s: %w", f[0], err)
			}
			v[i] = n
		}
		out[f[0]] = CPUTimes{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}
	}
	if _, ok := out["cpu"]; !ok {
		return nil, errors.New("parse /proc/stat: no cpu line")
	}
	return out, nil
}

// ParseNetDev returns the received and transmitted bytes of iface from /proc/net/dev.
func ParseNetDev(b []byte, iface string) (rx, tx uint64, err error) {
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) != iface {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 9 {
			return 0, 0, fmt.Errorf("parse /proc/net/dev %s: %d fields, want 16", iface, len(f))
		}
		if rx, err = strconv.ParseUint(f[0], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("parse /proc/net/dev %s rx: %w", iface, err)
		}
		if tx, err = strconv.ParseUint(f[8], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("parse /proc/net/dev %s tx: %w", iface, err)
		}
		return rx, tx, nil
	}
	return 0, 0, fmt.Errorf("parse /proc/net/dev: no interface %s", iface)
}

// procSnapshot is the CPU state at one instant: the server tree's ticks per process, the
// host's /proc/stat and loopback's byte counters.
type procSnapshot struct {
	procs map[int]PIDStat
	host  map[string]CPUTimes
	loTX  uint64
}

// takeSnapshot reads the process tree under roots (roots and all their descendants).
func takeSnapshot(roots []int) (procSnapshot, error) {
	s := procSnapshot{procs: make(map[int]PIDStat)}
	for _, pid := range processTree(roots) {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		if st, err := ParsePIDStat(b); err == nil {
			s.procs[pid] = st
		}
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, fmt.Errorf("read /proc/stat: %w", err)
	}
	if s.host, err = ParseHostStat(b); err != nil {
		return s, err
	}
	if b, err = os.ReadFile("/proc/net/dev"); err == nil {
		_, s.loTX, _ = ParseNetDev(b, "lo")
	}
	return s, nil
}

// processTree lists roots and their descendants, from the ppid of every /proc entry.
func processTree(roots []int) []int {
	children := make(map[int][]int)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if st, err := ParsePIDStat(b); err == nil {
			children[st.PPID] = append(children[st.PPID], pid)
		}
	}
	seen := make(map[int]bool)
	var out []int
	var walk func(int)
	walk = func(p int) {
		if seen[p] {
			return
		}
		seen[p] = true
		out = append(out, p)
		for _, c := range children[p] {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	return out
}

// treeDelta is the server tree's CPU between two snapshots: processes present in both
// (a worker that restarted mid-run loses its share; the sweep reports restarts as errors
// anyway), and the largest resident set seen.
func treeDelta(a, b procSnapshot) (userS, sysS float64, rss int64) {
	page := int64(os.Getpagesize())
	for pid, s1 := range b.procs {
		rss += s1.RSSPages * page
		s0, ok := a.procs[pid]
		if !ok || s1.UserTick < s0.UserTick || s1.SysTick < s0.SysTick {
			continue
		}
		userS += float64(s1.UserTick-s0.UserTick) / clockTicks
		sysS += float64(s1.SysTick-s0.SysTick) / clockTicks
	}
	return userS, sysS, rss
}

// ReadMachine describes this host.
func ReadMachine() Machine {
	m := Machine{CPUModel: "unknown"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "model name":
				if m.CPUModel == "unknown" {
					m.CPUModel = strings.TrimSpace(v)
				}
			case "processor":
				m.Cores++
			}
		}
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil {
		m.Allowed = set.Count()
	}
	if m.Cores == 0 {
		m.Cores = m.Allowed
	}
	m.Hostname, _ = os.Hostname()
	return m
}

// ParseCPUList reads a cpu list as taskset and /sys write it: "0-3,8,10-11".
func ParseCPUList(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("parse cpu list %q: bad cpu %q", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 4096 {
				return nil, fmt.Errorf("parse cpu list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("parse cpu list %q: empty", s)
	}
	return out, nil
}

// FormatCPUList writes cpus as a compact list: [0 1 2 5] is "0-2,5".
func FormatCPUList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", cpus[i], cpus[j])
		} else {
			fmt.Fprintf(&b, "%d", cpus[i])
		}
		i = j + 1
	}
	return b.String()
}
