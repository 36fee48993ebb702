package ceiling

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/procstat"
)

// snapshot is what the sweep reads of /proc before and after a run, through procstat: the
// server's process tree and the host's counters.
type snapshot struct {
	tree procstat.TreeUsage
	host procstat.Host
}

// takeSnapshot reads tree and the host.
func takeSnapshot(tree *procstat.Tree) (snapshot, error) {
	u, err := tree.Read()
	if err != nil {
		return snapshot{}, err
	}
	h, err := procstat.ReadHost("")
	if err != nil {
		return snapshot{}, err
	}
	return snapshot{u, h}, nil
}

// serverTree is the process tree under roots, for a run's snapshots: it rescans all of
// /proc at each reading, so that no process started between them is missed.
func serverTree(roots []int) (*procstat.Tree, error) {
	return procstat.NewTree(procstat.TreeConfig{PIDs: roots, Rescan: 1})
}

// processTree lists the running processes among roots and their descendants.
func processTree(roots []int) []int {
	t, err := serverTree(roots)
	if err != nil {
		return nil
	}
	if _, err := t.Read(); err != nil {
		return nil
	}
	return t.PIDs()
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
