package ceiling

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/histlog"
	"github.com/onehost/onehost/internal/journey"
	"github.com/onehost/onehost/internal/loadhosts"
)

// LoadHosts puts the sweep's generator on other hosts (SweepConfig.LoadHosts): each
// measured run's connections are split between them, autocannon (copied over when the
// remote copy is missing or differs) runs on every host at one agreed wall-clock time,
// and their results are merged into one run: counts added, latency percentiles from the
// hosts' histograms added bucket by bucket (their --hist-log interval logs, fetched
// back), never averaged; the generator is saturated if any host's was. The server's CPU
// is still read from this host's /proc, as in a local sweep.
//
// The mix (a wrk script) and the peers (which listen on loopback) are not distributed:
// they are skipped with a note.
type LoadHosts struct {
	Hosts []loadhosts.Host
	SSH   loadhosts.Config
	// Lead: every run starts this long after it is launched, so that every host's ssh
	// connection is up before it (and the hosts' clocks may differ a little); default 5 s.
	Lead time.Duration
	// Threads: autocannon's worker threads (-w) on each host, at most its connections.
	// Default: as many as a local generator would have had (the cores the server leaves
	// here, at least 1): the hosts' cores are not known from here.
	Threads int
}

func (l LoadHosts) threads(local int) int {
	if l.Threads > 0 {
		return l.Threads
	}
	return max(local, 1)
}

func (l LoadHosts) lead() time.Duration {
	if l.Lead <= 0 {
		return 5 * time.Second
	}
	return l.Lead
}

// remote reports whether the generator runs on load hosts.
func (s *Sweeper) remote() bool { return len(s.cfg.LoadHosts.Hosts) > 0 }

// runRemote runs one autocannon run of conns connections (threads per host at most) for
// d against srv from every load host and merges what they report. started (unless nil)
// is called at the agreed start time, ended when every host's generator has exited and
// before their histograms are fetched; neither when a host fails before the start.
func (s *Sweeper) runRemote(ctx context.Context, wl Workload, srv *Server, conns, threads int, d time.Duration, started, ended func()) (genResult, []string, error) {
	lh := s.cfg.LoadHosts
	k := len(lh.Hosts)
	s.remoteSeq++
	seq := s.remoteSeq
	// The binary is copied (the first time) before the start time is agreed: a copy
	// can take longer than the lead.
	bins := make([]string, k)
	err := loadhosts.Each(ctx, lh.Hosts, func(ctx context.Context, i int) (err error) {
		if journey.Share(conns, k, i) > 0 {
			bins[i], err = s.copies.Ensure(ctx, lh.SSH, lh.Hosts[i], s.cfg.Autocannon, "autocannon")
		}
		return err
	})
	if err != nil {
		return genResult{}, nil, err
	}
	start := time.Now().Add(lh.lead())
	argvs := make([][]string, k)
	logs := make([]string, k)
	done := make(chan []loadhosts.Output, 1)
	go func() {
		done <- lh.SSH.RunAll(ctx, lh.Hosts, func(ctx context.Context, i int) ([]string, error) {
			c := journey.Share(conns, k, i)
			if c == 0 {
				return nil, nil
			}
			logs[i] = path.Join(path.Dir(bins[i]), fmt.Sprintf("sweep-%d-%d-%d.hlog", os.Getpid(), seq, i))
			argvs[i] = append(s.autocannonArgv(bins[i], wl, srv.Addr, c, min(threads, c), d), "--hist-log", logs[i])
			return loadhosts.At(start, argvs[i]), nil
		})
	}() // owned by runRemote: RunAll returns when every host's command has ended
	var outs []loadhosts.Output
	t := time.NewTimer(time.Until(start))
	defer t.Stop()
	select {
	case outs = <-done:
	case <-t.C:
		if started != nil {
			started()
		}
		outs = <-done
		if ended != nil {
			ended()
		}
	}
	var cmd []string // the first host's, for the record
	for _, a := range argvs {
		if a != nil && cmd == nil {
			cmd = a
		}
	}
	var res genResult
	var parts []Outcome
	var hlogs []histlog.Log
	var stderr []string
	for i, o := range outs {
		if argvs[i] == nil && o.Err == nil {
			continue // no connections for this host
		}
		h := lh.Hosts[i]
		if len(o.Stderr) > 0 {
			stderr = append(stderr, h.String()+": "+strings.TrimSpace(string(o.Stderr)))
		}
		if o.Err != nil {
			return res, cmd, fmt.Errorf("generator on %s: %w: %s", h, o.Err, Tail(o.Stderr, 400))
		}
		rep, out, err := ParseAutocannon(o.Stdout)
		if err != nil {
			return res, cmd, fmt.Errorf("generator on %s: %w: %s", h, err, Tail(append(o.Stdout, o.Stderr...), 400))
		}
		if out.Saturated {
			out.Saturation = h.String() + ": " + out.Saturation
		}
		if g := rep.Generator; g != nil {
			res.cpuS += g.CPUUserS + g.CPUSysS
		}
		local := filepath.Join(s.cfg.WorkDir, path.Base(logs[i]))
		if err := lh.SSH.Fetch(ctx, h, logs[i], local); err != nil {
			return res, cmd, err
		}
		if err := lh.SSH.Remove(ctx, h, logs[i]); err != nil {
			s.log.Warn("remove the histogram log", zap.Error(err))
		}
		lg, err := readHistLog(local)
		if err != nil {
			return res, cmd, fmt.Errorf("generator on %s: %w", h, err)
		}
		os.Remove(local)
		parts, hlogs = append(parts, out), append(hlogs, lg)
	}
	if len(parts) == 0 {
		return res, nil, errors.New("generator: no load host had a connection")
	}
	merged, err := histlog.Merge(hlogs...)
	if err != nil {
		return res, cmd, fmt.Errorf("merge the hosts' histograms: %w", err)
	}
	res.outcome = MergeOutcomes(parts, merged.All)
	res.stderr = []byte(strings.Join(stderr, "\n"))
	return res, cmd, nil
}

func readHistLog(p string) (histlog.Log, error) {
	f, err := os.Open(p)
	if err != nil {
		return histlog.Log{}, fmt.Errorf("read histogram log: %w", err)
	}
	defer f.Close()
	return histlog.Read(f)
}

// MergeOutcomes adds the outcomes of one run split over several generator processes
// that ran at the same time: counts add up, the duration is the longest one's, the
// latencies are the percentiles of all, the parts' histograms added bucket by bucket
// (percentiles of parts cannot be averaged into the whole's), and the generator is
// bound or saturated if any part was (the first saturated part's reason is kept).
func MergeOutcomes(parts []Outcome, all *hdrhistogram.Histogram) Outcome {
	var m Outcome
	for _, p := range parts {
		m.Requests += p.Requests
		m.Errors += p.Errors
		m.Connect += p.Connect
		m.Timeouts += p.Timeouts
		m.Non2xx += p.Non2xx
		m.Bytes += p.Bytes
		m.DurationS = max(m.DurationS, p.DurationS)
		m.Bound = m.Bound || p.Bound
		m.MaxThread = max(m.MaxThread, p.MaxThread)
		m.GenThreads += p.GenThreads
		if p.Saturated && !m.Saturated {
			m.Saturated, m.Saturation = true, p.Saturation
		}
	}
	if all != nil && all.TotalCount() > 0 {
		// Recorded in microseconds (internal/histlog).
		m.P50Ms = float64(all.ValueAtQuantile(50)) / 1e3
		m.P99Ms = float64(all.ValueAtQuantile(99)) / 1e3
		m.MaxMs = float64(all.Max()) / 1e3
	}
	return m
}
