package procstat

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// CPUTime is one CPU's time since boot by mode, in seconds (a cpuN line of /proc/stat).
type CPUTime struct {
	CPU                                                   int
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal float64
}

// Host is the host's counters at one moment: each CPU's time and the bytes through the
// network interfaces (all of them, loopback included, as Sample counts them). What a
// metrics scrape exposes as counters, for the scraper to take differences of.
type Host struct {
	CPUs       []CPUTime
	NetRxBytes int64
	NetTxBytes int64
}

// ReadHost reads Host from the proc file system at root ("" for /proc).
func ReadHost(root string) (Host, error) {
	if root == "" {
		root = "/proc"
	}
	var h Host
	hz := 100.0
	if b, err := os.ReadFile(filepath.Join(root, "self", "auxv")); err == nil {
		if v, ok := auxvClockTicks(b); ok {
			hz = float64(v)
		}
	}
	b, err := os.ReadFile(filepath.Join(root, "stat"))
	if err != nil {
		return h, fmt.Errorf("read host counters: %w", err)
	}
	if h.CPUs, err = parseCPUs(b, hz); err != nil {
		return h, err
	}
	b, err = os.ReadFile(filepath.Join(root, "net", "dev"))
	if err != nil {
		return h, fmt.Errorf("read host counters: %w", err)
	}
	if h.NetRxBytes, h.NetTxBytes, err = parseNetDev(b); err != nil {
		return h, err
	}
	return h, nil
}

// parseCPUs reads the cpuN lines of /proc/stat, converting ticks to seconds.
func parseCPUs(b []byte, hz float64) ([]CPUTime, error) {
	var out []CPUTime
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		f := bytes.Fields(line)
		if len(f) < 5 || !bytes.HasPrefix(f[0], []byte("cpu")) || len(f[0]) == 3 {
			continue // not a cpuN line ("cpu" alone is the total)
		}
		n, err := strconv.Atoi(string(f[0][3:]))
		if err != nil {
			return nil, fmt.Errorf("parse /proc/stat: bad cpu name %q", f[0])
		}
		t := CPUTime{CPU: n}
		dst := []*float64{&t.User, &t.Nice, &t.System, &t.Idle, &t.IOWait, &t.IRQ, &t.SoftIRQ, &t.Steal}
		for i, p := range dst {
			if i+1 >= len(f) {
				break // older kernels have fewer columns
			}
			v, ok := parseUint(f[i+1])
			if !ok {
				return nil, fmt.Errorf("parse /proc/stat: bad field %q of %s", f[i+1], f[0])
			}
			*p = float64(v) / hz
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("parse /proc/stat: no cpuN line")
	}
	return out, nil
}
