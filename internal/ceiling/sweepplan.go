// The sweep's plan (rounds × N × mode, with the workloads each mode serves) and the loops
// that run it: Sweep, and NIC over link rates; each measured run reported as it ends.

package ceiling

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// cell is one server start of the sweep: round, N and mode, and the workloads it runs.
type cell struct {
	round, n  int
	mode      string
	workloads []Workload
}

// plan is the sweep's server starts in order (planCells), with the workloads each mode
// serves here: less the codings findPeers found it lacks, none for a peer it skips.
func (s *Sweeper) plan() []cell {
	return planCells(s.cfg.Ns, s.cfg.Modes, s.cfg.Repeat, func(mode string) []Workload {
		if s.peers.skip[mode] != "" {
			return nil
		}
		return s.workloadsFor(mode)
	})
}

// planCells is a sweep's server starts in order: repeat rounds, each every (N, mode) that
// workloads gives any to. Rounds are outermost: repeats of one cell are a whole round
// apart, never back to back.
func planCells(ns []int, modes []string, repeat int, workloads func(mode string) []Workload) []cell {
	var out []cell
	for round := 1; round <= max(repeat, 1); round++ {
		for _, n := range ns {
			for _, mode := range modes {
				if wls := workloads(mode); len(wls) > 0 {
					out = append(out, cell{round, n, mode, wls})
				}
			}
		}
	}
	return out
}

// planSize counts cells' server starts and measured runs (the few-connection run not
// counted).
func planSize(cells []cell) (starts, runs int) {
	for _, c := range cells {
		starts++
		runs += len(c.workloads)
	}
	return starts, runs
}

// Planned counts what Sweep will run here: the peers found missing left out.
func (s *Sweeper) Planned() (starts, runs int) { return planSize(s.plan()) }

// PlanSize counts what a sweep of these worker counts, modes and workload names asks for
// before the peers are looked for: each mode the workloads it serves (ServesWorkload).
func PlanSize(ns []int, modes, workloads []string, repeat int) (starts, runs int) {
	return planSize(planCells(ns, modes, repeat, func(mode string) []Workload {
		var out []Workload
		for _, w := range workloads {
			if ServesWorkload(mode, w) {
				out = append(out, Workload{Name: w})
			}
		}
		return out
	}))
}

// Sweep runs every (N, mode) cell, Repeat rounds over: one server start each, then every
// workload against it, then (at ImbalanceN, in the first round) the few-connection run.
func (s *Sweeper) Sweep(ctx context.Context) (err error) {
	defer func() { s.progress.end(err) }()
	for _, c := range s.plan() {
		n, mode, wls := c.n, c.mode, c.workloads
		if err := ctx.Err(); err != nil {
			return err
		}
		srv, err := s.StartServer(ctx, mode, n)
		if err != nil {
			if !isPeer(mode) || ctx.Err() != nil {
				return err
			}
			// A peer that does not start is that peer's result, not the sweep's end.
			s.log.Warn("peer did not start", zap.String("mode", mode), zap.Int("n", n), zap.Error(err))
			for _, wl := range wls {
				s.emit(Run{Workload: wl.Name, Mode: mode, Purpose: PurposeSweep, N: n, Skipped: err.Error(),
					Round: s.roundOf(c.round), Started: time.Now().UTC().Truncate(time.Millisecond)})
			}
			continue
		}
		for _, wl := range wls {
			if ctx.Err() != nil {
				break
			}
			s.measureQuiet(ctx, srv, wl, MeasureOptions{Purpose: PurposeSweep, Round: s.roundOf(c.round)})
		}
		if mode == ModeCluster && n == s.cfg.ImbalanceN && n > 1 && c.round == 1 && ctx.Err() == nil {
			if wl, ok := s.imbalanceWorkload(); ok {
				c := s.cfg.ImbalanceConns
				if c <= 0 {
					c = n
				}
				s.emit(s.Measure(ctx, srv, wl, MeasureOptions{Purpose: PurposeImbalance, Conns: c, Settle: true}))
			}
		}
		if err := srv.Stop(); err != nil {
			s.log.Warn("stop server", zap.Error(err))
		}
	}
	return ctx.Err()
}

// roundOf is the Round a run records: 0 (not written) when the sweep runs one round.
func (s *Sweeper) roundOf(round int) int {
	if s.cfg.Repeat > 1 {
		return round
	}
	return 0
}

func (s *Sweeper) imbalanceWorkload() (Workload, bool) {
	for _, w := range s.cfg.Workloads {
		if w.Name == s.cfg.ImbalanceWorkload {
			return w, true
		}
	}
	for _, w := range s.cfg.Workloads {
		if w.WrkScript == "" {
			return w, true
		}
	}
	return Workload{}, false
}

// ShapeFunc sets the emulated link's rate and returns the equivalent tc command.
type ShapeFunc func(bitsPerS float64) (string, error)

// NIC runs the workloads on one server (mode, n) once per link rate, shaping the link
// with shape before each rate. The caller has put this process (and so its children) in
// a private network namespace whose loopback shape controls.
func (s *Sweeper) NIC(ctx context.Context, mode string, n int, rates []float64, shape ShapeFunc) (err error) {
	defer func() { s.progress.end(err) }()
	if isPeer(mode) {
		return fmt.Errorf("nic: mode %s: peers are measured in the sweep only", mode)
	}
	srv, err := s.StartServer(ctx, mode, n)
	if err != nil {
		return err
	}
	defer srv.Stop()
	for _, rate := range rates {
		tc, err := shape(rate)
		if err != nil {
			return err
		}
		for _, wl := range s.cfg.Workloads {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.measureQuiet(ctx, srv, wl, MeasureOptions{Purpose: PurposeNIC, LinkBitsPerS: rate, Shaping: tc})
		}
	}
	return nil
}

// measureQuiet measures and reports a run, and runs it again while the host was busy with
// other work during it, at most HostBusyRepeats times: a laptop's or a shared machine's
// neighbours come and go, and a quiet repeat is worth more than a disturbed point.
func (s *Sweeper) measureQuiet(ctx context.Context, srv *Server, wl Workload, o MeasureOptions) {
	repeats := max(s.cfg.HostBusyRepeats, 0)
	measure := s.measure
	if measure == nil {
		measure = s.Measure
	}
	for try := 0; ; try++ {
		r := measure(ctx, srv, wl, o)
		s.emit(r)
		if r.Verdict != VerdictHostBusy || try >= repeats || ctx.Err() != nil {
			return
		}
		s.log.Info("host busy during the run: running it again", zap.String("workload", wl.Name), zap.Int("n", r.N),
			zap.String("evidence", r.Evidence), zap.Int("repeat", try+1), zap.Int("of", repeats))
	}
}

func (s *Sweeper) emit(r Run) {
	s.progress.finish(r)
	if s.cfg.Report != nil {
		s.cfg.Report(r)
	}
}
