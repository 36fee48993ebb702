package ceiling

import (
	"fmt"
	"math"
	"strings"

	"github.com/onehost/onehost/internal/procstat"
)

// Verdicts: what ran out first in a run.
const (
	VerdictCPU       = "cpu"       // the server's cores are busy
	VerdictNIC       = "nic"       // the link is full while the server's cores are not
	VerdictGenerator = "generator" // the load generator could not offer more
	VerdictFD        = "fd"        // connections failed: descriptor limits or a full accept queue
	VerdictSQLite    = "sqlite"    // a writing workload waits on the database's one write lock
	VerdictUnclear   = "unclear"   // none of the above crossed its threshold
	// VerdictBalancer: the balancer in front of a fleet (`ceiling fleet`, HAProxy) has its
	// cores full: more hosts behind it add nothing.
	VerdictBalancer = "balancer"
	// VerdictHostBusy: other work on the host (processes that are neither the server nor
	// the generator, steal) took more than Thresholds.OtherCores during the run while
	// neither the server's cores nor the link were full, so the other work may be what
	// held the server back: its figures are not the server's alone, and such runs are
	// left out of the model. A run whose cores or link were full is judged cpu or nic
	// whatever else ran (Judge).
	VerdictHostBusy = "host-busy"
)

// Thresholds decide the verdict. The zero value means the defaults documented per field;
// they are fractions, chosen so a resource counts as exhausted when it is within
// measurement noise (/proc ticks of 10 ms, one-second counters) of full.
type Thresholds struct {
	// CPUBusy: the verdict is cpu when the server used at least this share of its cores
	// (CPU seconds per wall second over the cores it was pinned to), or when the host had
	// at most 1-CPUBusy idle (shared cores, or other processes). Default 0.90.
	CPUBusy float64
	// LinkBusy: nic when the bytes a link counts reach this share of its rate (and the
	// CPU is below CPUBusy). Default 0.90.
	LinkBusy float64
	// GenBusy: generator when the generator says it is bound, or its busiest thread (or
	// its threads on average) used at least this share of a core. Default 0.90: a
	// closed-loop generator's thread near one core adds its own queueing to every latency.
	GenBusy float64
	// FDErrors: fd when failed connects reach this share of requests, or an error message
	// names a descriptor limit or a refused connection. Default 0.001.
	FDErrors float64
	// SQLiteIdle and SQLiteLatency: sqlite when the workload writes, the server used less
	// than SQLiteIdle of its cores, and p99 latency is at least SQLiteLatency times the
	// baseline's (the same workload on one worker); without a baseline, p99 at least
	// SQLiteP99Ms. Defaults 0.75, 3 and 50 ms: idle cores plus queueing latency on a
	// writing workload means requests wait for the file's one write lock.
	SQLiteIdle    float64
	SQLiteLatency float64
	SQLiteP99Ms   float64
	// SQLiteCPUGrowth: sqlite, even with the cores full, when the workload writes and its
	// CPU per request is at least this many times the baseline's (the same workload on
	// the smallest N). Default 2. Why: with more than one connection on the file, every
	// write makes every other connection throw away its page cache at its next read
	// (WAL's change counter; the reader re-reads and re-parses each B-tree page), and
	// writers retry the lock; the cores are busy, but with SQLite's bookkeeping, so more
	// cores do not buy throughput. A profile of the mix on two connections showed 46 % of
	// the CPU in btreeInitPage and 32 % in pread.
	SQLiteCPUGrowth float64
	// OtherCores: host-busy when the host's busy CPU time less the server's and the
	// generator's (other processes, steal, interrupts not charged to either) reaches this
	// many cores on average over the run, and neither the server's cores (CPUBusy) nor the
	// link (LinkBusy) were full. Default 0.1, by measurement (docs/ceiling.md):
	// on this project's 2-core VM, quiet feed runs at N = 1 left -0.015 to 0 cores
	// unaccounted, and a busy loop on the server's core half the time 0.19 to 0.24 (a
	// whole run: 0.51 to 0.53); 0.25 let every half-time one pass as "unclear".
	OtherCores float64
}

func (t Thresholds) withDefaults() Thresholds {
	def := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&t.CPUBusy, 0.90)
	def(&t.LinkBusy, 0.90)
	def(&t.GenBusy, 0.90)
	def(&t.FDErrors, 0.001)
	def(&t.SQLiteIdle, 0.75)
	def(&t.SQLiteLatency, 3)
	def(&t.SQLiteP99Ms, 50)
	def(&t.SQLiteCPUGrowth, 2)
	def(&t.OtherCores, procstat.DefaultOtherCores)
	return t
}

// Evidence is what Judge decides from: one run's measurements.
type Evidence struct {
	ServerBusyCores float64 // server CPU seconds per wall second
	ServerCores     int     // cores the server was given
	Shared          bool    // server and generator share cores
	HostIdlePct     float64 // host idle over the run, percent of all CPUs
	// OtherCores is the host's busy CPU (not idle, not iowait) less the server's, the
	// generator's and the emulated link's (LinkCores), in cores; -1 when the host's core
	// count is unknown (older results).
	OtherCores float64
	// LinkCores is the emulated link's own kernel work on a shaped run: the host's softirq
	// time, in cores. The tbf qdisc releases packets from a timer and loopback delivers
	// them in softirq context, charged to no process; without this charge a run at line
	// rate read host-busy (16 cores, 2026-12-04: heavy at 1 Gbit/s 0.10 "other" cores,
	// static 0.26, heavy at 10 Gbit/s 0.48, each less than its softirq time). 0 unshaped.
	LinkCores float64

	LinkBytesPerS     float64 // bytes the link counts per second (loopback: both directions)
	LinkRateBytesPerS float64 // the link's rate; 0 when unshaped (no link limit known)

	GenBound     bool    // the generator says it was bound
	GenSaturated bool    // the generator's own verdict: some second was beyond it
	GenReason    string  // which signal, its value
	GenBusyCores float64 // the generator's CPU seconds per wall second
	GenThreads   int     // its worker threads
	GenMaxThread float64 // its busiest thread, fraction of a core; 0 unknown

	Requests      int64
	ConnectErrors int64
	Errors        int64
	ErrorText     string

	Writes        bool
	P99Ms         float64
	BaselineP99Ms float64 // the same workload's p99 on one worker; 0 unknown
	CPUUs         float64 // server CPU µs per request
	BaselineCPUUs float64 // the same workload's on one worker; 0 unknown
	// WritePath is the cluster's write counters over the run (writes.go); nil unknown.
	WritePath *WritePath

	// ServerCoreLimit, when > 0, is the servers' share of cores where CPU quotas hold
	// them (a fleet's hosts at 0.4 of a core each: 0.8), in place of ServerCores.
	ServerCoreLimit float64
	// BalancerBusyCores is the balancer's process tree's CPU seconds per wall second
	// (HAProxy), and BalancerCores the cores (or quota) it was given; 0: no balancer
	// process to judge (none, or the kernel's DNAT).
	BalancerBusyCores float64
	BalancerCores     float64
}

// EvidenceOf collects a run's evidence (baselineP99 from the same workload at N=1).
func EvidenceOf(r Run, baselineP99Ms float64) Evidence {
	other, link := -1.0, 0.0
	if r.HostCores > 0 {
		if r.LinkBitsPerS > 0 {
			link = round(r.Host.SoftIRQ/100*float64(r.HostCores), 3)
		}
		h := procstat.HostCPU{Idle: r.Host.Idle, IOWait: r.Host.IOWait}
		other = h.OtherCores(r.HostCores, r.ServerBusyCores+r.GenBusyCores+link)
	}
	return Evidence{
		OtherCores: other, LinkCores: link,
		ServerBusyCores: r.ServerBusyCores, ServerCores: r.ServerCores, Shared: r.SharedCores,
		HostIdlePct:   r.Host.Idle,
		LinkBytesPerS: r.LoBytesPerS, LinkRateBytesPerS: r.LinkBitsPerS / 8,
		GenBound: r.GenBoundFlag, GenSaturated: r.GenSaturated, GenReason: r.GenSaturation, GenBusyCores: r.GenBusyCores, GenThreads: r.GenThreads, GenMaxThread: r.GenMaxThread,
		Requests: r.Requests, ConnectErrors: r.ConnectErrors, Errors: r.Errors, ErrorText: r.ErrorText,
		Writes: r.Writes, P99Ms: r.P99Ms, BaselineP99Ms: baselineP99Ms, CPUUs: r.ServerCPUUsPerReq,
		WritePath: r.WritePath,
	}
}

// Judge names what ran out first, with the numbers that say so. The checks run in order:
//   - generator, when its own verdict says it was saturated: the run measured the
//     generator, so no other figure of it can be trusted;
//   - fd: failed connects make every other figure moot;
//   - balancer (a fleet's run, `ceiling fleet`): the balancer's cores are full;
//   - sqlite by CPU growth: a writing workload whose CPU per request multiplied as
//     connections were added;
//   - cpu: the server's own cores are full;
//   - nic: the link is full;
//   - host-busy: other work on the host reached Thresholds.OtherCores;
//   - generator (the offered load was the limit), cpu of the host (no idle CPU left
//     anywhere: shared cores or other processes), writes (the workers' write counters show
//     connections parked on writes or the committer full, writes.go), sqlite by latency;
//     otherwise unclear.
//
// The limits before host-busy are ones that other work cannot explain away: a full link
// carried all it could whatever else ran, and a server whose own cores are full had all of
// them. Such a verdict says in its evidence how much other work ran beside it ("other work
// 1.08 cores"). Only when none of them is reached may other work be what held the server
// back, and the run is then the host's, not the server's (host-busy, left out of the
// model).
func Judge(e Evidence, t Thresholds) (verdict, evidence string) {
	t = t.withDefaults()
	cores := float64(e.ServerCores)
	if e.ServerCoreLimit > 0 {
		cores = e.ServerCoreLimit
	}
	cpu := fmt.Sprintf("server CPU %.0f%% of %.0f%%", 100*e.ServerBusyCores, 100*cores)

	if e.GenSaturated {
		return VerdictGenerator, "generator SATURATED (" + e.GenReason + "): the run is invalid (" + cpu + ")"
	}
	if v, ev := judgeLimit(e, t, cores, cpu); v != "" {
		if e.OtherCores >= t.OtherCores {
			ev += fmt.Sprintf("; other work %.2f cores", e.OtherCores)
		}
		return v, ev
	}
	if e.OtherCores >= t.OtherCores {
		ev := fmt.Sprintf("host busy (other work: %.2f cores): the run is not the server's alone (%s, generator %.0f%%", e.OtherCores, cpu, 100*e.GenBusyCores)
		if e.LinkRateBytesPerS > 0 {
			ev += fmt.Sprintf(", link %.0f%% of %s", 100*e.LinkBytesPerS/e.LinkRateBytesPerS, FormatBits(8*e.LinkRateBytesPerS))
		}
		if e.LinkCores > 0 {
			ev += fmt.Sprintf(", the link's softirq %.2f cores not counted as other", e.LinkCores)
		}
		return VerdictHostBusy, ev + ")"
	}
	if why := genBound(e, t); why != "" {
		return VerdictGenerator, why + " (" + cpu + ")"
	}
	if e.HostIdlePct <= 100*(1-t.CPUBusy) {
		// The host ran out of CPU before the server's cores filled: the generator shares
		// them, or other processes (a noisy neighbour, steal) took the rest.
		where := "host"
		if e.Shared {
			where = "shared cores: host"
		}
		return VerdictCPU, fmt.Sprintf("%s %.0f%% busy (%s, generator %.0f%%, the rest other processes)",
			where, 100-e.HostIdlePct, cpu, 100*e.GenBusyCores)
	}
	if v, ev := judgeWrites(e, cpu); v != "" {
		return v, ev
	}
	if e.Writes && cores > 0 && e.ServerBusyCores < t.SQLiteIdle*cores {
		if e.BaselineP99Ms > 0 && e.P99Ms >= t.SQLiteLatency*e.BaselineP99Ms {
			return VerdictSQLite, fmt.Sprintf("writes; %s while p99 rose %.1fx (%.2f -> %.2f ms)",
				cpu, e.P99Ms/e.BaselineP99Ms, e.BaselineP99Ms, e.P99Ms)
		}
		if e.BaselineP99Ms <= 0 && e.P99Ms >= t.SQLiteP99Ms {
			return VerdictSQLite, fmt.Sprintf("writes; %s with p99 %.1f ms", cpu, e.P99Ms)
		}
	}
	ev := cpu
	if e.LinkRateBytesPerS > 0 {
		ev += fmt.Sprintf(", link %.0f%% of %s", 100*e.LinkBytesPerS/e.LinkRateBytesPerS, FormatBits(8*e.LinkRateBytesPerS))
	}
	ev += fmt.Sprintf(", generator %.0f%% on %d threads, host idle %.0f%%", 100*e.GenBusyCores, e.GenThreads, e.HostIdlePct)
	return VerdictUnclear, ev
}

// judgeLimit is the verdicts that outrank other work on the host, in Judge's order: fd,
// balancer, sqlite by CPU growth, cpu (the server's own cores), nic (the link); "" when
// none was reached.
func judgeLimit(e Evidence, t Thresholds, cores float64, cpu string) (verdict, evidence string) {
	fdText := fdError(e.ErrorText)
	if (e.ConnectErrors > 0 && float64(e.ConnectErrors) >= t.FDErrors*float64(e.Requests+e.ConnectErrors)) || fdText != "" {
		ev := fmt.Sprintf("%d failed connects of %d requests", e.ConnectErrors, e.Requests)
		if fdText != "" {
			ev += ": " + fdText
		}
		return VerdictFD, ev
	}
	if e.BalancerCores > 0 && e.BalancerBusyCores >= t.CPUBusy*e.BalancerCores {
		// Before the servers' cpu: with the balancer full, hosts added behind it (or
		// servers with room) cannot raise the rate.
		return VerdictBalancer, fmt.Sprintf("balancer CPU %.0f%% of %.0f%% (%s)", 100*e.BalancerBusyCores, 100*e.BalancerCores, cpu)
	}
	if e.Writes && e.BaselineCPUUs > 0 && e.CPUUs >= t.SQLiteCPUGrowth*e.BaselineCPUUs {
		return VerdictSQLite, fmt.Sprintf("writes; CPU per request %.1fx the smallest N's (%.1f -> %.1f us): connections reset each other's page caches and retry the write lock; %s",
			e.CPUUs/e.BaselineCPUUs, e.BaselineCPUUs, e.CPUUs, cpu)
	}
	if cores > 0 && e.ServerBusyCores >= t.CPUBusy*cores {
		return VerdictCPU, cpu
	}
	if e.LinkRateBytesPerS > 0 && e.LinkBytesPerS >= t.LinkBusy*e.LinkRateBytesPerS {
		ev := fmt.Sprintf("link %.1f MB/s = %.0f%% of %s, %s", e.LinkBytesPerS/1e6,
			100*e.LinkBytesPerS/e.LinkRateBytesPerS, FormatBits(8*e.LinkRateBytesPerS), cpu)
		if e.LinkCores > 0 {
			ev += fmt.Sprintf(", link's softirq %.2f cores", e.LinkCores)
		}
		return VerdictNIC, ev
	}
	return "", ""
}

// genBound says why the generator was the limit, or "".
func genBound(e Evidence, t Thresholds) string {
	switch {
	case e.GenBound:
		return "generator says it was bound"
	case e.GenMaxThread >= t.GenBusy:
		return fmt.Sprintf("generator's busiest thread %.0f%% of a core", 100*e.GenMaxThread)
	case e.GenThreads > 0 && e.GenBusyCores >= t.GenBusy*float64(e.GenThreads):
		return fmt.Sprintf("generator %.0f%% on %d threads", 100*e.GenBusyCores, e.GenThreads)
	}
	return ""
}

// fdError returns the first error message that names a descriptor limit or a refused
// connection, or "".
func fdError(text string) string {
	l := strings.ToLower(text)
	for _, k := range []string{"too many open files", "emfile", "enfile", "connection refused", "econnrefused", "cannot assign requested address", "eaddrnotavail"} {
		if strings.Contains(l, k) {
			return k
		}
	}
	return ""
}

// round rounds v to d decimals (for stable JSON and tables).
func round(v float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(v*p) / p
}
