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

// Host is the host's counters at one moment: the CPUs' time and the bytes through the
// network interfaces (all of them, loopback included, as Sample counts them). What a
// metrics scrape exposes as counters, for the scraper to take differences of, and what a
// measurement of one run reads before and after it (CPUSince, the Lo counters).
type Host struct {
	// All is the time of all CPUs together (the "cpu" line of /proc/stat); its CPU is -1.
	All        CPUTime
	CPUs       []CPUTime
	NetRxBytes int64
	NetTxBytes int64
	// LoRxBytes and LoTxBytes are loopback's part of NetRxBytes and NetTxBytes: the
	// traffic between processes of this host, which never reaches a NIC.
	LoRxBytes int64
	LoTxBytes int64
}

// CPUSince is the host's CPU split from the reading h0 to h, in percent of all CPUs.
func (h Host) CPUSince(h0 Host) HostCPU { return hostPercent(h0.All, h.All) }

// OtherCores is the CPU the host spent over c's interval on work its caller did not
// account for, in cores: the busy time (all but idle and I/O wait, so other processes,
// steal and interrupts charged to no process count) of a host of cores CPUs, less
// accounted (the cores of the processes the caller measured, and any work it charges to
// them), never below 0. It is how a measurement tells that it was not alone on the host:
// the ceiling sweep's host-busy verdict and the challenge's quiet-host rule both read it.
func (c HostCPU) OtherCores(cores int, accounted float64) float64 {
	return max(0, (100-c.Idle-c.IOWait)/100*float64(cores)-accounted)
}

// DefaultOtherCores is the other work (OtherCores), in cores on average over a run, at
// which a measurement counts its host as busy unless told otherwise: one value, so that
// the ceiling sweep's host-busy verdict and the challenge's quiet-host rule agree (how it
// was chosen: internal/ceiling.Thresholds.OtherCores).
const DefaultOtherCores = 0.1

// ReadHost reads Host from the proc file system at root ("" for /proc).
func ReadHost(root string) (Host, error) {
	if root == "" {
		root = "/proc"
	}
	var h Host
	hz := float64(clockTicks(root))
	b, err := os.ReadFile(filepath.Join(root, "stat"))
	if err != nil {
		return h, fmt.Errorf("read host counters: %w", err)
	}
	if h.All, err = parseHostStat(b, hz); err != nil {
		return h, err
	}
	if h.CPUs, err = parseCPUs(b, hz); err != nil {
		return h, err
	}
	b, err = os.ReadFile(filepath.Join(root, "net", "dev"))
	if err != nil {
		return h, fmt.Errorf("read host counters: %w", err)
	}
	all, lo, err := parseNetDev(b)
	if err != nil {
		return h, err
	}
	h.NetRxBytes, h.NetTxBytes, h.LoRxBytes, h.LoTxBytes = all.rx, all.tx, lo.rx, lo.tx
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
		t, err := parseCPULine(f, n, hz)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("parse /proc/stat: no cpuN line")
	}
	return out, nil
}
