package procstat

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// procStat is what the sampler needs from /proc/PID/stat. Times are in clock ticks.
type procStat struct {
	pid       int
	ppid      int
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
		} else if n == 1 || n >= 11 {
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
	st.ppid = int(field[1])
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

// hostTicks is the first ("cpu") line of /proc/stat: all CPUs together, in ticks.
type hostTicks struct {
	user, nice, system, idle, iowait, irq, softirq, steal uint64
}

func (h hostTicks) total() uint64 {
	// guest and guest_nice are already included in user and nice: not added again.
	return h.user + h.nice + h.system + h.idle + h.iowait + h.irq + h.softirq + h.steal
}

// parseHostStat reads the aggregate "cpu" line of /proc/stat.
func parseHostStat(b []byte) (hostTicks, error) {
	var h hostTicks
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := bytes.Fields(line)
	if len(f) < 5 || string(f[0]) != "cpu" {
		return h, fmt.Errorf("parse /proc/stat: first line %q is not the cpu total", line)
	}
	dst := []*uint64{&h.user, &h.nice, &h.system, &h.idle, &h.iowait, &h.irq, &h.softirq, &h.steal}
	for i, p := range dst {
		if i+1 >= len(f) {
			break // older kernels have fewer columns: the missing ones stay 0
		}
		v, ok := parseUint(f[i+1])
		if !ok {
			return h, fmt.Errorf("parse /proc/stat: bad cpu field %q", f[i+1])
		}
		*p = v
	}
	return h, nil
}

// hostPercent turns the difference of two /proc/stat readings into percentages of all
// CPUs. User includes nice; System includes hard IRQ time; SoftIRQ, IOWait, Steal and Idle
// are their own columns.
func hostPercent(a, b hostTicks) HostCPU {
	d := func(x, y uint64) float64 {
		if y < x {
			return 0
		}
		return float64(y - x)
	}
	total := d(a.total(), b.total())
	if total == 0 {
		return HostCPU{}
	}
	pct := func(v float64) float64 { return 100 * v / total }
	return HostCPU{
		User:    pct(d(a.user, b.user) + d(a.nice, b.nice)),
		System:  pct(d(a.system, b.system) + d(a.irq, b.irq)),
		Idle:    pct(d(a.idle, b.idle)),
		Steal:   pct(d(a.steal, b.steal)),
		SoftIRQ: pct(d(a.softirq, b.softirq)),
		IOWait:  pct(d(a.iowait, b.iowait)),
	}
}

// parseNetDev sums the received and transmitted bytes of every interface in
// /proc/net/dev, loopback included.
func parseNetDev(b []byte) (rx, tx int64, err error) {
	for i, line := range bytes.Split(b, []byte{'\n'}) {
		if i < 2 {
			continue // two header lines
		}
		_, counters, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		f := bytes.Fields(counters)
		if len(f) < 9 {
			return 0, 0, fmt.Errorf("parse /proc/net/dev: short line %q", line)
		}
		r, ok1 := parseUint(f[0])
		t, ok2 := parseUint(f[8])
		if !ok1 || !ok2 {
			return 0, 0, fmt.Errorf("parse /proc/net/dev: bad counters in %q", line)
		}
		rx += int64(r)
		tx += int64(t)
	}
	return rx, tx, nil
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
