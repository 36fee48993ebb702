package procstat

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// procStat is what the sampler needs from /proc/PID/stat. Times are in clock ticks.
type procStat struct {
	pid       int
	ppid      int
	pgrp      int // process group: a worker's own pid, and its children's unless they left it
	state     byte
	utime     uint64 // user time of the process itself
	stime     uint64 // kernel time of the process itself
	cutime    uint64 // user time of its waited-for (reaped) children, recursively
	cstime    uint64 // kernel time of its waited-for children, recursively
	starttime uint64 // ticks after boot: with pid, identifies the process across pid reuse
}

var errStat = errors.New("malformed stat line")

// parseStat parses a /proc/PID/stat line. The second field, comm, is the executable name
// in parentheses and may itself contain spaces and parentheses ("(a) b)"), so the fields
// after it are found from the LAST ')' in the line, as the kernel documents.
func parseStat(b []byte) (procStat, error) {
	var st procStat
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 1 || closing < open {
		return st, errStat
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil || pid < 0 {
		return st, errStat
	}
	st.pid = pid
	// Fields 3.. (state, ppid, …) follow "comm) ". Index them from 0 = state.
	rest := b[closing+1:]
	var field [20]uint64
	var n int
	for i := 0; n < len(field); {
		for i < len(rest) && (rest[i] == ' ' || rest[i] == '\n') {
			i++
		}
		if i == len(rest) {
			break
		}
		j := i
		for j < len(rest) && rest[j] != ' ' && rest[j] != '\n' {
			j++
		}
		tok := rest[i:j]
		if n == 0 {
			if len(tok) != 1 {
				return st, errStat
			}
			st.state = tok[0]
		} else if n == 1 || n == 2 || n >= 11 {
			// Only the fields used are converted; others may be negative (priority, nice).
			v, ok := parseUint(tok)
			if !ok && n == 1 {
				// ppid is 0 for the kernel's own roots, never negative.
				return st, errStat
			}
			field[n] = v
		}
		n++
		i = j
	}
	if n < 20 {
		return st, errStat
	}
	st.ppid, st.pgrp = int(field[1]), int(field[2])
	st.utime, st.stime, st.cutime, st.cstime = field[11], field[12], field[13], field[14]
	st.starttime = field[19]
	return st, nil
}

// parseUint parses a non-negative decimal without allocating. A leading '-' (fields such
// as cutime are signed in the kernel's format, though never negative in practice) reads
// as 0 so a negative value cannot wrap into a huge one.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	if b[0] == '-' {
		return 0, true
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// parseStatmRSS returns the resident set size in pages: the second field of
// /proc/PID/statm (the same number as VmRSS in /proc/PID/status, without the text parse).
func parseStatmRSS(b []byte) (int64, error) {
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, fmt.Errorf("parse statm: %q: too few fields", b)
	}
	v, ok := parseUint(f[1])
	if !ok {
		return 0, fmt.Errorf("parse statm: bad resident field %q", f[1])
	}
	return int64(v), nil
}

// parseHostStat reads the aggregate "cpu" line of /proc/stat (all CPUs together),
// converting ticks to seconds; its CPU is -1.
func parseHostStat(b []byte, hz float64) (CPUTime, error) {
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := bytes.Fields(line)
	if len(f) < 5 || string(f[0]) != "cpu" {
		return CPUTime{}, fmt.Errorf("parse /proc/stat: first line %q is not the cpu total", line)
	}
	return parseCPULine(f, -1, hz)
}

// parseCPULine reads the mode columns of one cpu line of /proc/stat, split into fields
// (the name first). guest and guest_nice are already inside user and nice: not read.
func parseCPULine(f [][]byte, cpu int, hz float64) (CPUTime, error) {
	t := CPUTime{CPU: cpu}
	dst := []*float64{&t.User, &t.Nice, &t.System, &t.Idle, &t.IOWait, &t.IRQ, &t.SoftIRQ, &t.Steal}
	for i, p := range dst {
		if i+1 >= len(f) {
			break // older kernels have fewer columns: the missing ones stay 0
		}
		v, ok := parseUint(f[i+1])
		if !ok {
			return CPUTime{}, fmt.Errorf("parse /proc/stat: bad field %q of %s", f[i+1], f[0])
		}
		*p = float64(v) / hz
	}
	return t, nil
}

// Total is every mode's time of t.
func (t CPUTime) Total() float64 {
	return t.User + t.Nice + t.System + t.Idle + t.IOWait + t.IRQ + t.SoftIRQ + t.Steal
}

// hostPercent turns the difference of two readings of all CPUs' time into percentages.
// User includes nice; System includes hard IRQ time; SoftIRQ, IOWait, Steal and Idle
// are their own columns. A counter that went backwards counts as no time.
func hostPercent(a, b CPUTime) HostCPU {
	d := func(x, y float64) float64 { return max(y-x, 0) }
	total := d(a.User, b.User) + d(a.Nice, b.Nice) + d(a.System, b.System) + d(a.Idle, b.Idle) +
		d(a.IOWait, b.IOWait) + d(a.IRQ, b.IRQ) + d(a.SoftIRQ, b.SoftIRQ) + d(a.Steal, b.Steal)
	if total == 0 {
		return HostCPU{}
	}
	pct := func(v float64) float64 { return 100 * v / total }
	return HostCPU{
		User:    pct(d(a.User, b.User) + d(a.Nice, b.Nice)),
		System:  pct(d(a.System, b.System) + d(a.IRQ, b.IRQ)),
		Idle:    pct(d(a.Idle, b.Idle)),
		Steal:   pct(d(a.Steal, b.Steal)),
		SoftIRQ: pct(d(a.SoftIRQ, b.SoftIRQ)),
		IOWait:  pct(d(a.IOWait, b.IOWait)),
	}
}

// netBytes is the bytes received and transmitted through network interfaces.
type netBytes struct{ rx, tx int64 }

// parseNetDev sums the received and transmitted bytes of every interface in
// /proc/net/dev, loopback included, and returns loopback's ("lo") alone as well.
func parseNetDev(b []byte) (all, lo netBytes, err error) {
	for i, line := range bytes.Split(b, []byte{'\n'}) {
		if i < 2 {
			continue // two header lines
		}
		name, counters, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		f := bytes.Fields(counters)
		if len(f) < 9 {
			return netBytes{}, netBytes{}, fmt.Errorf("parse /proc/net/dev: short line %q", line)
		}
		r, ok1 := parseUint(f[0])
		t, ok2 := parseUint(f[8])
		// The kernel's counters are 64-bit unsigned; past 2^63 (never reached in practice)
		// they would turn negative here, so they are refused rather than wrapped.
		if !ok1 || !ok2 || r > math.MaxInt64 || t > math.MaxInt64 {
			return netBytes{}, netBytes{}, fmt.Errorf("parse /proc/net/dev: bad counters in %q", line)
		}
		n := netBytes{int64(r), int64(t)}
		all.rx += n.rx
		all.tx += n.tx
		if string(bytes.TrimSpace(name)) == "lo" {
			lo = n
		}
	}
	return all, lo, nil
}

// countEstablished counts the lines of /proc/net/tcp or tcp6 in state 01 (ESTABLISHED)
// whose socket inode is in inodes. It scans the bytes without splitting into fields, as
// the table has one line per socket on the host (tens of thousands under load).
func countEstablished(b []byte, inodes map[uint64]struct{}) int {
	n := 0
	first := true
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if first { // header
			first = false
			continue
		}
		// Fields: sl local rem st tx:rx tr:when retrnsmt uid timeout inode …
		var fields [10][]byte
		k := 0
		for i := 0; i < len(line) && k < len(fields); {
			for i < len(line) && line[i] == ' ' {
				i++
			}
			j := i
			for j < len(line) && line[j] != ' ' {
				j++
			}
			if j > i {
				fields[k] = line[i:j]
				k++
			}
			i = j
		}
		if k < 10 || string(fields[3]) != "01" {
			continue
		}
		ino, ok := parseUint(fields[9])
		if !ok {
			continue
		}
		if _, ok := inodes[ino]; ok {
			n++
		}
	}
	return n
}

// socketInode returns the inode of a /proc/PID/fd/N link target "socket:[INODE]".
func socketInode(target string) (uint64, bool) {
	const prefix = "socket:["
	if len(target) < len(prefix)+2 || target[:len(prefix)] != prefix || target[len(target)-1] != ']' {
		return 0, false
	}
	return parseUint([]byte(target[len(prefix) : len(target)-1]))
}

// auxvClockTicks finds AT_CLKTCK in /proc/self/auxv: the kernel's USER_HZ, the unit of the
// times in /proc/PID/stat, which is what sysconf(_SC_CLK_TCK) returns in C. The vector is
// pairs of native-endian machine words ending with AT_NULL.
func auxvClockTicks(b []byte) (int64, bool) {
	const atNull, atClkTck = 0, 17
	const word = strconv.IntSize / 8 // the machine word: 8 bytes, or 4 on 32-bit platforms
	get := func(b []byte) uint64 {
		if word == 4 {
			return uint64(binary.NativeEndian.Uint32(b))
		}
		return binary.NativeEndian.Uint64(b)
	}
	for len(b) >= 2*word {
		k, v := get(b[:word]), get(b[word:2*word])
		b = b[2*word:]
		if k == atNull {
			break
		}
		if k == atClkTck && v > 0 && v < 1<<20 {
			return int64(v), true
		}
	}
	return 0, false
}

// StartTime returns when process pid started, in clock ticks after boot (/proc/PID/stat's
// field 22): with the pid it names one process across pid reuse. root is /proc's path
// ("" for /proc).
func StartTime(root string, pid int) (uint64, error) {
	st, err := readStat(root, pid)
	if err != nil {
		return 0, fmt.Errorf("read start time: %w", err)
	}
	return st.starttime, nil
}

// Running reports whether process pid exists and has not exited: a zombie, dead and
// waiting for its parent to reap it, is not running. root is /proc's path ("" for /proc).
func Running(root string, pid int) bool {
	st, err := readStat(root, pid)
	return err == nil && st.state != 'Z'
}

func readStat(root string, pid int) (procStat, error) {
	if root == "" {
		root = "/proc"
	}
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	st, err := parseStat(b)
	if err != nil {
		return procStat{}, fmt.Errorf("%d: %w", pid, err)
	}
	return st, nil
}
