package ceiling

import (
	"os"
	"time"

	"go.uber.org/zap"
)

// ProgressFile is the name of the progress file in a results directory.
const ProgressFile = "progress.json"

// Progress states (Progress.State).
const (
	ProgressRunning = "running" // the sweep is going: Current is being measured, or nil while a server starts
	ProgressDone    = "done"    // the sweep has returned; Error says why when it ended early

	// ProgressFleet is Progress.Kind for `ceiling fleet`: its runs name a balancer and H.
	ProgressFleet = "fleet"
)

// Progress is the content of progress.json: where a sweep is, for whoever watches it while
// it runs (the supervisor's dashboard reads it; the file is the whole contract, so that
// the supervisor does not import this package). It is rewritten whole, by rename, as each
// run begins and ends, so a reader never sees half of it.
type Progress struct {
	State string `json:"state"`
	// Kind is ProgressFleet for `ceiling fleet`; "" for a sweep.
	Kind string `json:"kind,omitempty"`
	// PID is the sweep's process: a reader that finds "running" from a process that is gone
	// knows the sweep was killed rather than finished.
	PID      int          `json:"pid"`
	Started  time.Time    `json:"started"` // when the sweep began
	Updated  time.Time    `json:"updated"`
	RunsDone int          `json:"runs_done"`
	Current  *ProgressRun `json:"current,omitempty"` // the run being measured
	Last     *ProgressRun `json:"last,omitempty"`    // the last run that finished
	Error    string       `json:"error,omitempty"`
}

// ProgressRun is one run as progress.json shows it: for the current run what it is and
// when it began; for a finished one also its figures.
type ProgressRun struct {
	Workload string    `json:"workload"`
	Mode     string    `json:"mode"`
	Purpose  string    `json:"purpose"`
	N        int       `json:"n"`
	Started  time.Time `json:"started"`
	// ExpectedS is how long the run should take (warm-up and measured run), so that a
	// reader can show how far along it is.
	ExpectedS   float64 `json:"expected_s,omitempty"`
	DurationS   float64 `json:"duration_s,omitempty"` // measured wall time, once finished
	RPS         float64 `json:"rps,omitempty"`
	CPUUsPerReq float64 `json:"cpu_us_per_req,omitempty"` // server CPU µs per request
	P99Ms       float64 `json:"p99_ms,omitempty"`
	Verdict     string  `json:"verdict,omitempty"`
	Skipped     string  `json:"skipped,omitempty"`
	// A fleet's run (Progress.Kind fleet): its balancer, its hosts H (N is each host's
	// workers) and the balancer's CPU µs per request (HAProxy's; 0 for the others).
	Balancer         string  `json:"balancer,omitempty"`
	Hosts            int     `json:"hosts,omitempty"`
	BalancerUsPerReq float64 `json:"balancer_cpu_us_per_req,omitempty"`
}

// progressWriter keeps progress.json up to date. A nil one writes nothing, so the sweep
// calls it whether or not a file was asked for. A failed write is logged and does not
// stop the sweep: the results are what matters, the progress file only shows them early.
type progressWriter struct {
	path string
	log  *zap.Logger
	now  func() time.Time
	p    Progress
}

func newProgressWriter(path string, log *zap.Logger, now func() time.Time) *progressWriter {
	if path == "" {
		return nil
	}
	t := now().UTC().Truncate(time.Millisecond)
	return &progressWriter{path: path, log: log, now: now,
		p: Progress{State: ProgressRunning, PID: os.Getpid(), Started: t}}
}

// begin records that r (its identity filled in, no figures yet) is being measured.
func (w *progressWriter) begin(r Run, expected time.Duration) {
	if w == nil {
		return
	}
	w.beginRun(progressRunOf(r), expected)
}

func (w *progressWriter) beginRun(pr *ProgressRun, expected time.Duration) {
	w.p.State = ProgressRunning
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

func (w *progressWriter) finishRun(pr *ProgressRun) {
	w.p.State = ProgressRunning
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
func progressRunOfFleet(r FleetRun) *ProgressRun {
	return &ProgressRun{Workload: r.Workload, Mode: ModeCluster, Purpose: ProgressFleet, N: r.N, Started: r.Started,
		Balancer: r.Balancer, Hosts: r.Hosts}
}

// end records that the sweep has returned, with err when it ended early.
func (w *progressWriter) end(err error) {
	if w == nil {
		return
	}
	w.p.State = ProgressDone
	w.p.Current = nil
	if err != nil {
		w.p.Error = err.Error()
	}
	w.write()
}

// progressRunOf is r's identity as progress.json shows it, without figures.
func progressRunOf(r Run) *ProgressRun {
	return &ProgressRun{Workload: r.Workload, Mode: r.Mode, Purpose: r.Purpose, N: r.N, Started: r.Started}
}

func (w *progressWriter) write() {
	w.p.Updated = w.now().UTC().Truncate(time.Millisecond)
	if err := WriteProgress(w.path, w.p); err != nil {
		w.log.Warn("progress file", zap.Error(err))
	}
}

// WriteProgress writes p to path atomically (writeJSONFile).
func WriteProgress(path string, p Progress) error { return writeJSONFile(path, "progress", p) }
