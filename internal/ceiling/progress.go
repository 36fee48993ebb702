package ceiling

import (
	"os"
	"time"

	"github.com/onehost/onehost/internal/progress"
	"go.uber.org/zap"
)

// progressWriter keeps progress.json up to date. A nil one writes nothing, so the sweep
// calls it whether or not a file was asked for. A failed write is logged and does not
// stop the sweep: the results are what matters, the progress file only shows them early.
type progressWriter struct {
	path string
	log  *zap.Logger
	now  func() time.Time
	p    progress.File
}

func newProgressWriter(path string, log *zap.Logger, now func() time.Time) *progressWriter {
	if path == "" {
		return nil
	}
	t := now().UTC().Truncate(time.Millisecond)
	return &progressWriter{path: path, log: log, now: now,
		p: progress.File{State: progress.Running, PID: os.Getpid(), Started: t}}
}

// begin records that r (its identity filled in, no figures yet) is being measured.
func (w *progressWriter) begin(r Run, expected time.Duration) {
	if w == nil {
		return
	}
	w.beginRun(progressRunOf(r), expected)
}

func (w *progressWriter) beginRun(pr *progress.Run, expected time.Duration) {
	w.p.State = progress.Running
	w.p.Error = ""
	w.p.Current = pr
	w.p.Current.ExpectedS = expected.Seconds()
	w.write()
}

// finish records r as the last finished run.
func (w *progressWriter) finish(r Run) {
	if w == nil {
		return
	}
	pr := progressRunOf(r)
	pr.DurationS, pr.RPS, pr.CPUUsPerReq, pr.P99Ms = r.DurationS, r.RPS, r.ServerCPUUsPerReq, r.P99Ms
	pr.Verdict, pr.Skipped = r.Verdict, r.Skipped
	w.finishRun(pr)
}

func (w *progressWriter) finishRun(pr *progress.Run) {
	w.p.State = progress.Running
	w.p.RunsDone++
	w.p.Current = nil
	w.p.Last = pr
	w.write()
}

// beginFleet and finishFleet are begin and finish for a fleet's run.
func (w *progressWriter) beginFleet(r FleetRun, expected time.Duration) {
	if w == nil {
		return
	}
	w.beginRun(progressRunOfFleet(r), expected)
}

func (w *progressWriter) finishFleet(r FleetRun) {
	if w == nil {
		return
	}
	pr := progressRunOfFleet(r)
	pr.DurationS, pr.RPS, pr.CPUUsPerReq, pr.P99Ms = r.DurationS, r.RPS, r.ServerUsPerReq, r.P99Ms
	pr.BalancerUsPerReq, pr.Verdict, pr.Skipped = r.BalancerUsPerReq, r.Verdict, r.Skipped
	w.finishRun(pr)
}

// progressRunOfFleet is r's identity: every host runs the sweep's cluster mode.
func progressRunOfFleet(r FleetRun) *progress.Run {
	return &progress.Run{Workload: r.Workload, Mode: ModeCluster, Purpose: progress.KindFleet, N: r.N, Started: r.Started,
		Balancer: r.Balancer, Hosts: r.Hosts}
}

// end records that the sweep has returned, with err when it ended early.
func (w *progressWriter) end(err error) {
	if w == nil {
		return
	}
	w.p.State = progress.Done
	w.p.Current = nil
	if err != nil {
		w.p.Error = err.Error()
	}
	w.write()
}

// progressRunOf is r's identity as progress.json shows it, without figures.
func progressRunOf(r Run) *progress.Run {
	return &progress.Run{Workload: r.Workload, Mode: r.Mode, Purpose: r.Purpose, N: r.N, Started: r.Started}
}

func (w *progressWriter) write() {
	w.p.Updated = w.now().UTC().Truncate(time.Millisecond)
	if err := writeJSONFile(w.path, "progress", w.p); err != nil {
		w.log.Warn("progress file", zap.Error(err))
	}
}
