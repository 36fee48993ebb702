// Measuring one fleet run: the generator through the balancer (or straight at the hosts),
// /proc snapshots and the balancer's link around it, and what the FleetRun records of it.

package ceiling

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/histlog"
	"github.com/onehost/onehost/internal/procstat"
)

// measure runs one workload through targets: a probe of each, the warm-up, then the
// measured run with /proc snapshots around it.
func (f *Fleet) measure(ctx context.Context, fh *fleetHosts, b string, lbPID int, targets []string, wl Workload) FleetRun {
	h, n := len(fh.servers), f.cfg.N
	r := FleetRun{Workload: wl.Name, Balancer: b, Hosts: h, N: n, Started: time.Now().UTC().Truncate(time.Millisecond),
		Connections: f.cfg.ConnsPerHost * h}
	for _, t := range targets {
		if err := probe(ctx, t, wl); err != nil {
			r.Skipped = err.Error()
			return r
		}
	}
	if w := f.cfg.Sweep.Warmup; w > 0 {
		if _, _, err := f.generate(ctx, wl, targets, r.Connections, w, nil, nil); err != nil {
			f.log.Warn("warm-up", zap.String("workload", wl.Name), zap.Error(err))
		}
	}
	var roots []int
	for _, s := range fh.servers {
		roots = append(roots, s.PID())
	}
	srvTree, err := serverTree(roots)
	if err != nil {
		r.Skipped = err.Error()
		return r
	}
	var lbTree *procstat.Tree
	if lbPID > 0 {
		if lbTree, err = serverTree([]int{lbPID}); err != nil {
			r.Skipped = err.Error()
			return r
		}
	}
	type reading struct {
		srv, lb procstat.TreeUsage
		host    procstat.Host
		link    int64
		err     error
		at      time.Time
	}
	read := func() (x reading) {
		x.at = time.Now()
		if x.srv, x.err = srvTree.Read(); x.err != nil {
			return x
		}
		if lbTree != nil {
			if x.lb, x.err = lbTree.Read(); x.err != nil {
				return x
			}
		}
		if x.host, x.err = procstat.ReadHost(""); x.err != nil {
			return x
		}
		x.link = linkBytes(fh.net.OuterLink)
		return x
	}
	var r0, r1 reading
	res, argv, err := f.generate(ctx, wl, targets, r.Connections, f.cfg.Sweep.Duration,
		func() { r0 = read() }, func() { r1 = read() })
	r.GenCommand = argv
	for _, e := range []error{err, r0.err, r1.err} {
		if e != nil {
			r.Skipped = e.Error()
			return r
		}
	}
	o := res.outcome
	wall := r1.at.Sub(r0.at).Seconds()
	r.DurationS = round(o.DurationS, 3)
	active := r.DurationS
	if active <= 0 || active > wall {
		active = wall
	}
	r.Requests, r.Errors, r.Connect, r.Timeouts, r.Non2xx = o.Requests, o.Errors, o.Connect, o.Timeouts, o.Non2xx
	r.RPS = round(float64(o.Requests)/active, 1)
	r.P50Ms, r.P99Ms = round(o.P50Ms, 3), round(o.P99Ms, 3)
	srvS := (r1.srv.User + r1.srv.System - r0.srv.User - r0.srv.System).Seconds()
	lbS := (r1.lb.User + r1.lb.System - r0.lb.User - r0.lb.System).Seconds()
	hc := r1.host.CPUSince(r0.host)
	r.HostCores = len(r1.host.CPUs)
	r.Host = HostCPU{round(hc.User, 1), round(hc.System, 1), round(hc.Idle, 1), round(hc.IOWait, 1), round(hc.SoftIRQ, 1), round(hc.Steal, 1)}
	softS := hc.SoftIRQ / 100 * float64(r.HostCores) * wall
	r.ServerBusyCores = round(srvS/active, 3)
	r.BalancerBusyCores = round(lbS/active, 3)
	r.SoftIRQCores = round(softS/wall, 3)
	r.GenBusyCores = round(res.cpuS/active, 3)
	r.LinkBytesPerS = round(float64(r1.link-r0.link)/active, 0)
	if o.Requests > 0 {
		per := func(s float64) float64 { return round(s*1e6/float64(o.Requests), 2) }
		r.ServerUsPerReq, r.BalancerUsPerReq, r.SoftIRQUsPerReq = per(srvS), per(lbS), per(softS)
		r.LinkBytesPerReq = round(float64(r1.link-r0.link)/float64(o.Requests), 1)
	}
	r.ServerCoreLimit = float64(h) * f.cfg.HostQuota
	if r.ServerCoreLimit == 0 {
		r.ServerCoreLimit = float64(len(f.cfg.HostCPUs))
	}
	if r.ServerCoreLimit == 0 {
		r.ServerCoreLimit = float64(r.HostCores)
	}
	if b == BalancerHAProxy {
		r.BalancerCores = float64(len(f.cfg.BalancerCPUs))
		if r.BalancerCores == 0 {
			r.BalancerCores = float64(r.HostCores)
		}
	}
	busy := (100 - hc.Idle - hc.IOWait) / 100 * float64(r.HostCores)
	r.OtherCores = round(max(0, busy-r.ServerBusyCores-r.BalancerBusyCores-r.GenBusyCores-r.SoftIRQCores), 3)
	e := Evidence{
		ServerBusyCores: r.ServerBusyCores, ServerCores: max(len(f.cfg.HostCPUs), 1), ServerCoreLimit: r.ServerCoreLimit,
		Shared:      overlap(f.cfg.GenCPUs, f.cfg.HostCPUs),
		HostIdlePct: hc.Idle, OtherCores: r.OtherCores, LinkCores: r.SoftIRQCores,
		GenBound: o.Bound, GenSaturated: o.Saturated, GenReason: o.Saturation, GenBusyCores: r.GenBusyCores,
		GenThreads: o.GenThreads, GenMaxThread: o.MaxThread,
		Requests: o.Requests, ConnectErrors: o.Connect, Errors: o.Errors, ErrorText: errorText(res.stderr, "", 0),
		Writes: wl.Writes, P99Ms: r.P99Ms, CPUUs: r.ServerUsPerReq,
		BalancerBusyCores: r.BalancerBusyCores, BalancerCores: r.BalancerCores,
	}
	r.Verdict, r.Evidence = Judge(e, f.cfg.Sweep.Thresholds)
	return r
}

func overlap(a, b []int) bool {
	for _, c := range a {
		if slices.Contains(b, c) {
			return true
		}
	}
	return false
}

// generate runs the generator for d against targets: one autocannon for one address,
// else one per address at the same time with the connections split evenly and their
// latencies merged from their histogram logs (as load hosts' are). started and ended
// (nil: nothing) are called as the load starts and when every generator has exited.
func (f *Fleet) generate(ctx context.Context, wl Workload, targets []string, conns int, d time.Duration, started, ended func()) (genResult, []string, error) {
	k := len(targets)
	threads := max(len(f.cfg.GenCPUs), 1)
	type part struct {
		res genResult
		err error
	}
	parts := make([]part, k)
	argvs := make([][]string, k)
	logs := make([]string, k)
	for i, t := range targets {
		c := conns / k
		if i < conns%k {
			c++
		}
		argv := f.gen.autocannonArgv(f.cfg.Sweep.Autocannon, wl, t, c, max(1, min(threads/k, c)), d)
		if k > 1 {
			logs[i] = filepath.Join(f.cfg.Sweep.WorkDir, fmt.Sprintf("fleet-gen-%d.hlog", i))
			os.Remove(logs[i])
			argv = append(argv[:len(argv)-1], "--hist-log", logs[i], argv[len(argv)-1])
		}
		argvs[i] = f.cfg.Pin(f.cfg.GenCPUs, "", argv)
	}
	if started != nil {
		started()
	}
	var wg sync.WaitGroup
	for i := range targets {
		wg.Add(1)
		go func() { // owned by generate: waited for below
			defer wg.Done()
			parts[i].res, parts[i].err = f.gen.runGen(ctx, "autocannon", argvs[i])
		}()
	}
	wg.Wait()
	if ended != nil {
		ended()
	}
	if k == 1 {
		return parts[0].res, argvs[0], parts[0].err
	}
	var res genResult
	var outs []Outcome
	var hlogs []histlog.Log
	var stderr []string
	for i, p := range parts {
		if p.err != nil {
			return res, argvs[0], fmt.Errorf("generator for %s: %w", targets[i], p.err)
		}
		res.cpuS += p.res.cpuS
		if len(p.res.stderr) > 0 {
			stderr = append(stderr, strings.TrimSpace(string(p.res.stderr)))
		}
		lg, err := readHistLog(logs[i])
		if err != nil {
			return res, argvs[0], fmt.Errorf("generator for %s: %w", targets[i], err)
		}
		os.Remove(logs[i])
		outs, hlogs = append(outs, p.res.outcome), append(hlogs, lg)
	}
	merged, err := histlog.Merge(hlogs...)
	if err != nil {
		return res, argvs[0], fmt.Errorf("merge the generators' histograms: %w", err)
	}
	res.outcome = MergeOutcomes(outs, merged.All)
	res.stderr = []byte(strings.Join(stderr, "\n"))
	return res, argvs[0], nil
}

// linkBytes is a link's received and sent bytes (this namespace's view); 0 unknown.
func linkBytes(name string) int64 {
	var sum int64
	for _, f := range []string{"rx_bytes", "tx_bytes"} {
		b, err := os.ReadFile(filepath.Join("/sys/class/net", name, "statistics", f))
		if err != nil {
			return 0
		}
		v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		sum += v
	}
	return sum
}
