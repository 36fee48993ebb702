// Package procstat samples a process tree and the host from /proc once per interval: the
// tree's CPU (user and kernel, in cores), resident memory, established TCP connections and
// process count, the host's CPU split (user, system, idle, steal, softirq, iowait) and the
// bytes through its network interfaces. It is how a benchmark shows where the time went
// (the server's CPU versus the load generator's, kernel versus user) next to its latency.
//
// The tree is the process Config.PID and all its descendants, re-scanned every interval so
// that restarted workers join it. A process stays in the tree once seen, even if it is
// re-parented outside it, until it exits.
//
// CPU accounting. /proc/PID/stat gives a process's own utime/stime and, in cutime/cstime,
// the totals of its children that it has waited for (reaped). The sampler adds, for each
// process it tracks, the growth of its own times since the previous reading, so a process
// that exits takes nothing back (the total never goes backwards). When a tracked process
// disappears, its parent's cutime/cstime grow by the child's final totals; the part of that
// growth already counted (the child's last seen times, which include the time before Start)
// is remembered per parent and subtracted, and only the rest — the child's last moments
// and any short-lived process never seen at all — is added. Time of a process reaped by a
// process outside the tree (an orphan adopted by init) after its last reading is lost, at
// most one interval's worth.
//
// Units: the kernel reports times in USER_HZ ticks; the sampler reads USER_HZ from
// AT_CLKTCK in ROOT/self/auxv (what sysconf(_SC_CLK_TCK) returns) and assumes 100, the
// value on every mainstream Linux platform, when that is missing (fixture trees).
// RSS is statm's resident pages times the page size. Network bytes are /proc/net/dev
// summed over every interface, loopback included: traffic between a load generator and a
// server on one host is counted once as received and once as transmitted on lo (not twice
// in each direction).
//
// Listeners (listen.go) reads the listening TCP sockets one process holds, for the
// supervisor's check that a worker serves the socket it was given.
//
// Non-goals: per-thread detail, cgroup accounting, other operating systems.
package procstat

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Config says what to sample. The zero value samples only the host, once a second.
type Config struct {
	// PID is the root of the process tree to sample; 0 samples the host only.
	PID int
	// Interval between samples. Default 1s.
	Interval time.Duration
	// Root is the proc file system to read. Default "/proc"; tests point it at fixtures.
	Root string
	// Conns counts the tree's established TCP connections in each sample (Sample.Conns,
	// Summary.PeakConns; 0 without it). It costs in proportion to the connections, not
	// to the tree: a readlink of every descriptor and a read of /proc/net/tcp, which the
	// kernel prints line by line for every socket of the host. At 16,000 connections
	// that was ~0.2 s of CPU per sample, a fifth of a core at the default interval, so
	// only a caller that reports the count asks for it.
	Conns bool
}

// HostCPU is the host's CPU time over an interval, in percent of all CPUs together.
// User includes nice time; System includes hard-IRQ time.
type HostCPU struct {
	User    float64 `json:"user"`
	System  float64 `json:"system"`
	Idle    float64 `json:"idle"`
	Steal   float64 `json:"steal"`
	SoftIRQ float64 `json:"softirq"`
	IOWait  float64 `json:"iowait"`
}

// Sample is one interval's reading.
type Sample struct {
	// T is the end of the interval, in seconds since Start.
	T float64 `json:"t"`
	// UserCores and SysCores are the tree's CPU time over the interval divided by its
	// length: 1.0 is one core busy the whole interval.
	UserCores float64 `json:"user_cores"`
	SysCores  float64 `json:"sys_cores"`
	// RSS is the tree's resident memory at the end of the interval, in bytes.
	RSS int64 `json:"rss_bytes"`
	// Conns is the number of established TCP connections whose sockets the tree holds
	// (with Config.Conns; else 0).
	Conns int `json:"connections"`
	// Procs is the number of processes in the tree.
	Procs int     `json:"procs"`
	Host  HostCPU `json:"host"`
	// NetRx and NetTx are the bytes received and sent over the interval, all interfaces.
	NetRx int64 `json:"net_rx_bytes"`
	NetTx int64 `json:"net_tx_bytes"`
}

// Summary is the whole run from Start to Stop.
type Summary struct {
	Samples []Sample `json:"samples"`
	// UserSec and SysSec are the tree's CPU seconds between Start and Stop.
	UserSec float64 `json:"user_sec"`
	SysSec  float64 `json:"sys_sec"`
	// PeakRSS and PeakConns are the largest values of any sample.
	PeakRSS   int64 `json:"peak_rss_bytes"`
	PeakConns int   `json:"peak_connections"`
	// NetRx and NetTx are the bytes between Start and Stop.
	NetRx int64 `json:"net_rx_bytes"`
	NetTx int64 `json:"net_tx_bytes"`
	// Host is the host's CPU split over the whole run.
	Host HostCPU `json:"host"`
}

// Sampler samples in its own goroutine from Start until Stop.
type Sampler struct {
	cfg  Config
	stop chan struct{}
	done chan struct{}

	once    sync.Once
	summary Summary

	// Owned by the sampling goroutine until done is closed, then by Stop.
	st      *state
	samples []Sample
	first   reading // the baseline taken by Start
	last    reading // the previous reading
}

// Start takes a baseline reading and starts sampling. It fails if PID is set and no such
// process exists, or if ROOT/stat cannot be read.
func Start(cfg Config) (*Sampler, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Root == "" {
		cfg.Root = "/proc"
	}
	if cfg.PID < 0 {
		return nil, fmt.Errorf("start sampler: negative pid %d", cfg.PID)
	}
	st := newState(cfg.Root)
	st.countConns = cfg.Conns
	if cfg.PID > 0 {
		if err := st.addRoot(cfg.PID); err != nil {
			return nil, fmt.Errorf("start sampler: %w", err)
		}
	}
	r, err := st.read(time.Now())
	if err != nil {
		return nil, fmt.Errorf("start sampler: %w", err)
	}
	s := &Sampler{
		cfg:   cfg,
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		st:    st,
		first: r,
		last:  r,
	}
	go s.loop()
	return s, nil
}

// loop takes a reading every interval until Stop closes s.stop.
func (s *Sampler) loop() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.take(now)
		}
	}
}

// take reads /proc and appends the interval since the previous reading as a sample.
func (s *Sampler) take(now time.Time) {
	r, err := s.st.read(now)
	if err != nil {
		return // a transient failure (a file vanished mid-read): the next interval covers it
	}
	s.samples = append(s.samples, s.interval(s.last, r))
	s.last = r
}

// interval turns two readings into a sample.
func (s *Sampler) interval(a, b reading) Sample {
	dt := b.at.Sub(a.at).Seconds()
	cores := func(x, y uint64) float64 {
		if dt <= 0 || y < x {
			return 0
		}
		return float64(y-x) / float64(s.st.hz) / dt
	}
	return Sample{
		T:         b.at.Sub(s.first.at).Seconds(),
		UserCores: cores(a.user, b.user),
		SysCores:  cores(a.sys, b.sys),
		RSS:       b.rss,
		Conns:     b.conns,
		Procs:     b.procs,
		Host:      hostPercent(a.host, b.host),
		NetRx:     nonNegative(b.rx - a.rx),
		NetTx:     nonNegative(b.tx - a.tx),
	}
}

// Stop ends sampling, takes a final reading (a last, shorter interval) and returns the
// run's summary. Later calls return the same summary.
func (s *Sampler) Stop() Summary {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		if now := time.Now(); now.After(s.last.at) {
			s.take(now)
		}
		sum := Summary{Samples: s.samples}
		hz := float64(s.st.hz)
		sum.UserSec = float64(s.last.user-s.first.user) / hz
		sum.SysSec = float64(s.last.sys-s.first.sys) / hz
		sum.NetRx = nonNegative(s.last.rx - s.first.rx)
		sum.NetTx = nonNegative(s.last.tx - s.first.tx)
		sum.Host = hostPercent(s.first.host, s.last.host)
		sum.PeakRSS, sum.PeakConns = s.first.rss, s.first.conns
		for _, x := range s.samples {
			sum.PeakRSS = max(sum.PeakRSS, x.RSS)
			sum.PeakConns = max(sum.PeakConns, x.Conns)
		}
		s.summary = sum
	})
	return s.summary
}

func nonNegative(v int64) int64 { return max(v, 0) }

// reading is one pass over /proc.
type reading struct {
	at        time.Time
	user, sys uint64 // the tree's accumulated CPU ticks since the baseline
	rss       int64
	conns     int
	procs     int
	host      CPUTime // all CPUs
	rx, tx    int64
}

// key identifies a process across pid reuse.
type key struct {
	pid   int
	start uint64
}

// tracked is what the sampler remembers about a process of the tree between readings.
type tracked struct {
	utime, stime   uint64 // last seen own times
	cutime, cstime uint64 // last seen reaped-children times
	ppid           int
	// pendU/pendS: times of this process's children that disappeared (so they will show
	// up in this process's cutime/cstime) and were already counted or were before Start.
	pendU, pendS uint64
}

// state is the accounting carried from one reading to the next.
type state struct {
	root     string
	roots    []key // the tree's roots; none: the host only
	hz       int64
	pageSize int64
	baseline bool // the first reading only records; it adds nothing to the totals
	// countConns: each reading counts the tree's connections (Config.Conns).
	countConns bool

	procs     map[key]*tracked
	user, sys uint64 // accumulated tree ticks
	statBuf   []byte
}

func newState(root string) *state {
	return &state{
		root:     root,
		hz:       clockTicks(root),
		pageSize: int64(os.Getpagesize()),
		baseline: true,
		procs:    make(map[key]*tracked),
	}
}

// clockTicks is USER_HZ, read from AT_CLKTCK in ROOT/self/auxv; 100 without one. It is
// fixed for the life of the system, so the real /proc's is read once (ReadHost runs every
// second under monit and the dashboard, and at every scrape).
func clockTicks(root string) int64 {
	if root == "/proc" {
		return procClockTicks()
	}
	return readClockTicks(root)
}

var procClockTicks = sync.OnceValue(func() int64 { return readClockTicks("/proc") })

func readClockTicks(root string) int64 {
	if b, err := os.ReadFile(filepath.Join(root, "self", "auxv")); err == nil {
		if v, ok := auxvClockTicks(b); ok {
			return v
		}
	}
	return 100
}

// addRoot makes pid a root of the tree, identified by its start time so that a later
// process with the same pid is not taken for it.
func (st *state) addRoot(pid int) error {
	b, err := os.ReadFile(filepath.Join(st.root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return fmt.Errorf("process %d: %w", pid, err)
	}
	ps, err := parseStat(b)
	if err != nil {
		return fmt.Errorf("process %d: %w", pid, err)
	}
	st.roots = append(st.roots, key{pid, ps.starttime})
	return nil
}

// read takes one reading: the host counters and, with roots, the tree.
func (st *state) read(now time.Time) (reading, error) {
	r := reading{at: now}
	b, err := os.ReadFile(filepath.Join(st.root, "stat"))
	if err != nil {
		return r, fmt.Errorf("read host cpu: %w", err)
	}
	if r.host, err = parseHostStat(b, float64(st.hz)); err != nil {
		return r, err
	}
	if b, err := os.ReadFile(filepath.Join(st.root, "net", "dev")); err == nil {
		all, _, _ := parseNetDev(b)
		r.rx, r.tx = all.rx, all.tx
	}
	if len(st.roots) > 0 {
		tree := st.scanTree()
		st.account(tree)
		r.procs = len(tree)
		r.rss = st.memory(tree)
		if st.countConns {
			r.conns = st.conns(tree)
		}
	}
	r.user, r.sys = st.user, st.sys
	return r, nil
}

// scanTree reads every /proc/PID/stat and returns the processes of the tree: the roots,
// every process tracked before that is still alive, and all their descendants, each once
// (a root that descends from another is no second copy).
func (st *state) scanTree() map[key]procStat {
	d, err := os.Open(st.root)
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	all := make(map[int]procStat, len(names))
	children := make(map[int][]int, len(names))
	for _, name := range names {
		if name == "" || name[0] < '0' || name[0] > '9' {
			continue
		}
		b, err := st.readFile(filepath.Join(st.root, name, "stat"))
		if err != nil {
			continue // exited since the listing
		}
		ps, err := parseStat(b)
		if err != nil {
			continue
		}
		all[ps.pid] = ps
		children[ps.ppid] = append(children[ps.ppid], ps.pid)
	}
	tree := make(map[key]procStat)
	var queue []int
	add := func(ps procStat) {
		k := key{ps.pid, ps.starttime}
		if _, ok := tree[k]; !ok {
			tree[k] = ps
			queue = append(queue, ps.pid)
		}
	}
	for _, r := range st.roots {
		if ps, ok := all[r.pid]; ok && ps.starttime == r.start {
			add(ps)
		}
	}
	for k := range st.procs {
		if ps, ok := all[k.pid]; ok && ps.starttime == k.start {
			add(ps)
		}
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			add(all[c])
		}
	}
	return tree
}

// account adds the tree's CPU growth since the previous reading to st.user and st.sys
// (see the package doc for the rules) and remembers this reading's values.
func (st *state) account(tree map[key]procStat) {
	// First the processes that disappeared: hand what was already covered of each to the
	// nearest ancestor still alive, whose cutime/cstime now include it. A parent that
	// disappeared too hands it further up with its own.
	gone := make(map[int]key)
	for k := range st.procs {
		if _, ok := tree[k]; !ok {
			gone[k.pid] = k
		}
	}
	alive := make(map[int]*tracked, len(tree))
	for k := range tree {
		if t, ok := st.procs[k]; ok {
			alive[k.pid] = t
		}
	}
	for _, k := range gone {
		t := st.procs[k]
		u := t.utime + t.cutime + t.pendU
		s := t.stime + t.cstime + t.pendS
		// Walk up the last known parents through processes gone in this same interval.
		ppid := t.ppid
		for range len(gone) + 1 {
			if p, ok := alive[ppid]; ok {
				p.pendU += u
				p.pendS += s
				break
			}
			pk, ok := gone[ppid]
			if !ok {
				break // reaped outside the tree: its last moments are lost
			}
			ppid = st.procs[pk].ppid
		}
	}
	for _, k := range gone {
		delete(st.procs, k)
	}

	for k, ps := range tree {
		t, ok := st.procs[k]
		if !ok {
			t = &tracked{}
			st.procs[k] = t
			if !st.baseline {
				// Born since the previous reading (after Start): all its time is new.
				st.user += ps.utime + ps.cutime
				st.sys += ps.stime + ps.cstime
			}
		} else {
			st.user += grow(t.utime, ps.utime)
			st.sys += grow(t.stime, ps.stime)
			st.user += absorb(&t.pendU, grow(t.cutime, ps.cutime))
			st.sys += absorb(&t.pendS, grow(t.cstime, ps.cstime))
		}
		t.utime, t.stime, t.cutime, t.cstime, t.ppid = ps.utime, ps.stime, ps.cutime, ps.cstime, ps.ppid
	}
	st.baseline = false
}

// grow is how much a counter grew, never negative.
func grow(old, cur uint64) uint64 {
	if cur < old {
		return 0
	}
	return cur - old
}

// absorb returns the part of a children-times increase d not already covered by *pend,
// and uses up *pend by the covered part. What remains of *pend waits for the next reading
// (a child seen gone whose parent's counters were read just before it was reaped).
func absorb(pend *uint64, d uint64) uint64 {
	if d <= *pend {
		*pend -= d
		return 0
	}
	d -= *pend
	*pend = 0
	return d
}

// rss is the resident memory of pid in bytes, from its statm; 0 if it is gone.
func (st *state) rss(pid int) int64 {
	b, err := st.readFile(filepath.Join(st.root, strconv.Itoa(pid), "statm"))
	if err != nil {
		return 0
	}
	pages, err := parseStatmRSS(b)
	if err != nil {
		return 0
	}
	return pages * st.pageSize
}

// RSS is the resident memory of one process in bytes, from root/PID/statm (root "" is
// /proc), for a caller that wants one reading rather than a Sampler.
func RSS(root string, pid int) (int64, error) {
	if root == "" {
		root = "/proc"
	}
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "statm"))
	if err != nil {
		return 0, fmt.Errorf("read rss: %w", err)
	}
	pages, err := parseStatmRSS(b)
	if err != nil {
		return 0, err
	}
	return pages * int64(os.Getpagesize()), nil
}

// memory sums the tree's resident memory.
func (st *state) memory(tree map[key]procStat) (rss int64) {
	for k := range tree {
		rss += st.rss(k.pid)
	}
	return rss
}

// conns counts the tree's established TCP connections: the socket inodes among the
// tree's open files, looked up in the tree's network namespace's TCP tables. One pass
// over each table per reading keeps the cost linear in the number of sockets on the host.
func (st *state) conns(tree map[key]procStat) (conns int) {
	inodes := make(map[uint64]struct{})
	for k := range tree {
		_ = addSocketInodes(inodes, filepath.Join(st.root, strconv.Itoa(k.pid), "fd")) // exited, or not ours to read: none
	}
	if len(inodes) == 0 {
		return 0
	}
	// The first root's view of net/ is its namespace's; fall back to ours if it has exited.
	netDir := filepath.Join(st.root, strconv.Itoa(st.roots[0].pid), "net")
	if _, err := os.Stat(filepath.Join(netDir, "tcp")); err != nil {
		netDir = filepath.Join(st.root, "net")
	}
	for _, name := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(filepath.Join(netDir, name))
		if err != nil {
			continue // no IPv6
		}
		conns += countEstablished(b, inodes)
	}
	return conns
}

// readFile reads a small /proc file into a buffer reused across calls; the result is
// valid until the next call.
func (st *state) readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if cap(st.statBuf) == 0 {
		st.statBuf = make([]byte, 0, 1024)
	}
	b := st.statBuf[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grow
		}
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	st.statBuf = b
	return b, nil
}
