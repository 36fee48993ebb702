// Package progress is the contract of progress.json: the file a running measurement (a
// ceiling sweep, a fleet) keeps beside its results, saying where it is, for whoever
// watches it. internal/ceiling writes it and the supervisor's dashboard (internal/monit)
// reads it; both import these types, and neither imports the other. A leaf: it imports
// nothing of the project.
package progress

import "time"

// FileName is the name of the progress file in a results directory.
const FileName = "progress.json"

// States (File.State).
const (
	Running = "running" // the sweep is going: Current is being measured, or nil while a server starts
	Done    = "done"    // the sweep has returned; Error says why when it ended early
)

// KindFleet is File.Kind for `ceiling fleet`: its runs name a balancer and H.
const KindFleet = "fleet"

// File is the content of progress.json. Its writer rewrites it whole, by rename, as each
// run begins and ends, so a reader never sees half of it.
type File struct {
	State string `json:"state"`
	// Kind is KindFleet for `ceiling fleet`; "" for a sweep.
	Kind string `json:"kind,omitempty"`
	// PID is the sweep's process: a reader that finds "running" from a process that is gone
	// knows the sweep was killed rather than finished.
	PID      int       `json:"pid"`
	Started  time.Time `json:"started"` // when the sweep began
	Updated  time.Time `json:"updated"`
	RunsDone int       `json:"runs_done"`
	Current  *Run      `json:"current,omitempty"` // the run being measured
	Last     *Run      `json:"last,omitempty"`    // the last run that finished
	Error    string    `json:"error,omitempty"`
}

// Run is one run as progress.json shows it: for the current run what it is and when it
// began; for a finished one also its figures.
type Run struct {
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
	// A fleet's run (File.Kind fleet): its balancer, its hosts H (N is each host's
	// workers) and the balancer's CPU µs per request (HAProxy's; 0 for the others).
	Balancer         string  `json:"balancer,omitempty"`
	Hosts            int     `json:"hosts,omitempty"`
	BalancerUsPerReq float64 `json:"balancer_cpu_us_per_req,omitempty"`
}
