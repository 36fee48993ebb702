package control

import (
	"encoding/json"
	"time"

	"github.com/onehost/onehost/internal/agent"
)

// Status is the body of GET /status and the output of `status -json`.
type Status struct {
	// Addr is the address served: the first cluster-mode app's when there are several
	// (each app's own is in Apps).
	Addr string `json:"addr"`
	// Steering is how new connections reach the workers: "bpf-rr" (round robin over the
	// online workers) or "hash" (the kernel's); the first cluster-mode app's.
	Steering string `json:"steering"`
	// AppPorts are the addresses the supervisor serves too because the app's own listen
	// asked for them (a Node app's listen(8080) where Addr's port is another); the first
	// cluster-mode app's, as Addr.
	AppPorts []string `json:"app_ports,omitempty"`
	// Workers are every app's workers, each with its app's name (Worker.App).
	Workers []Worker `json:"workers"`
	// Apps are the configuration's apps in order, running or stopped, as `pm2 ls` lists
	// them.
	Apps []App `json:"apps,omitempty"`
	// UpgradeError is why the last upgrade's new binary gave this one back; empty if none
	// did.
	UpgradeError string `json:"upgrade_error,omitempty"`
	// Drained: `supervisor drain` took the host out of its balancer, until `supervisor
	// ready`.
	Drained bool `json:"drained"`
	// Agent is the address the HAProxy agent answers on (-agent; the real port when it
	// said 0); empty without one.
	Agent string `json:"agent,omitempty"`
	// AgentAskers are the addresses that asked the agent lately, the latest first: who
	// would hear a drain.
	AgentAskers []AgentAsker `json:"agent_askers,omitempty"`
	// Config is the configuration file the supervisor runs, absolute ("" for none), and
	// Cwd its working directory, where the file's relative paths resolve (startup's unit,
	// start FILE against a running supervisor).
	Config string `json:"config,omitempty"`
	Cwd    string `json:"cwd,omitempty"`
}

// AgentAsker is an address that asked the agent (a balancer's health check), as it last
// did: the agent's own record, carried as it is.
type AgentAsker = agent.Asker

// App is one app in GET /status: `supervisor status` lists every app, as `pm2 ls`.
type App struct {
	Name string `json:"name,omitempty"`
	Mode string `json:"mode"` // cluster or fork
	// Status is "running", or "stopped" after `supervisor stop APP`.
	Status   string `json:"status"`
	Addr     string `json:"addr,omitempty"`     // "" in fork mode: no socket of ours
	Steering string `json:"steering,omitempty"` // "" in fork mode
	// AppPorts: see Status.AppPorts.
	AppPorts []string `json:"app_ports,omitempty"`
	Workers  int      `json:"workers"`
}

// Worker is one worker's row of the status: what the supervisor knows of it, and what the
// worker reported of itself over its channel.
type Worker struct {
	// App is the app's name, "" when it has none.
	App         string  `json:"app,omitempty"`
	ID          int     `json:"id"`
	PID         int     `json:"pid"`
	Status      string  `json:"status"`
	UptimeS     int64   `json:"uptime_s"`
	Restarts    int     `json:"restarts"`
	CPUPercent  float64 `json:"cpu_percent"`
	CPUSeconds  float64 `json:"cpu_seconds"` // the process's user+system time so far
	RSSBytes    int64   `json:"rss_bytes"`
	Requests    uint64  `json:"requests"`
	RPS         float64 `json:"rps"`
	Connections int64   `json:"connections"`
	// LoopConnections is a worker's open connections per event loop, as it reported them;
	// absent when it reports none.
	LoopConnections []int64 `json:"loop_connections,omitempty"`
	// Health is the worker's own check of what it depends on, as its last stats answer
	// said: "ok", "unhealthy" (HealthError says why), or "" when it reports none.
	Health      string `json:"health"`
	HealthError string `json:"health_error,omitempty"`
	// Role is the worker's own word for its part in its app, or "" (the feed worker's
	// write role); Report the rest of what it says of itself, a JSON value passed on as it
	// came (the feed worker's write-path counters), or absent. Neither is read here.
	Role   string          `json:"role,omitempty"`
	Report json.RawMessage `json:"report,omitempty"`
	// Note is the worker's own one-line status (sd_notify's STATUS=), "" when none.
	Note string `json:"note,omitempty"`
	// NotServing says why a worker shown as not-serving does not serve its slot.
	NotServing string `json:"not_serving,omitempty"`
	// Adopted: the worker was started by a previous supervisor and taken over.
	Adopted bool `json:"adopted,omitempty"`
	// NoCounters: the worker does not report Requests, RPS and Connections (it speaks no
	// ipc of ours), which are then unknown, not 0: null in JSON.
	NoCounters bool `json:"-"`
}

// workerFields is Worker without its JSON methods.
type workerFields Worker

// workerJSON is Worker as JSON: the counters a worker may not report are pointers, null
// when Worker.NoCounters (the outer fields hide the embedded ones).
type workerJSON struct {
	workerFields
	Requests    *uint64  `json:"requests"`
	RPS         *float64 `json:"rps"`
	Connections *int64   `json:"connections"`
}

// MarshalJSON writes requests, rps and connections as null when the worker reports none.
func (w Worker) MarshalJSON() ([]byte, error) {
	j := workerJSON{workerFields: workerFields(w)}
	if !w.NoCounters {
		j.Requests, j.RPS, j.Connections = &w.Requests, &w.RPS, &w.Connections
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes: null (or absent) counters set NoCounters.
func (w *Worker) UnmarshalJSON(b []byte) error {
	var j workerJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*w = Worker(j.workerFields)
	w.NoCounters = j.Requests == nil && j.RPS == nil && j.Connections == nil
	if j.Requests != nil {
		w.Requests = *j.Requests
	}
	if j.RPS != nil {
		w.RPS = *j.RPS
	}
	if j.Connections != nil {
		w.Connections = *j.Connections
	}
	return nil
}

// Describe is GET /describe?app=NAME: one app's details, as `pm2 describe`.
type Describe struct {
	Name     string   `json:"name,omitempty"`
	Mode     string   `json:"mode"`
	Status   string   `json:"status"`
	Cwd      string   `json:"cwd"`
	Command  []string `json:"command"`
	Listen   string   `json:"listen,omitempty"`
	Addr     string   `json:"addr,omitempty"`
	Steering string   `json:"steering,omitempty"`
	AppPorts []string `json:"app_ports,omitempty"` // see Status.AppPorts
	// Instances is the configured count (0: the default), Workers the count now.
	Instances int `json:"instances"`
	Workers   int `json:"workers"`
	// EnvNames are the names of the app's own env (the values may be secrets).
	EnvNames []string `json:"env_names"`
	Restarts int      `json:"restarts"`
	// UptimeS is the longest-running worker's uptime.
	UptimeS   int64    `json:"uptime_s"`
	WorkerRow []Worker `json:"workers_status"`
}

// Notes is a command's success with what the operator should know of it (reload
// -update-env: the env's changes, and fields the file changed that a reload does not
// take).
type Notes struct {
	OK    bool     `json:"ok"`
	Notes []string `json:"notes"`
}

// Flushed is POST /flush's answer: the log files emptied.
type Flushed struct {
	Files []string `json:"files"`
}

// ErrorReply is the body of every answer that is not a success.
type ErrorReply struct {
	Error string `json:"error"`
}

// Dump is `supervisor save`'s file, which `resurrect` starts from (PM2's dump.pm2): how
// the supervisor was started (its arguments, directory and environment) and what ran. POST
// /save answers with it (without Socket, which the client fills in).
type Dump struct {
	Version int       `json:"version"`
	SavedAt time.Time `json:"saved_at"`
	Socket  string    `json:"socket"`
	Cwd     string    `json:"cwd"`
	Args    []string  `json:"args"`
	// Env is the supervisor's environment, which its workers inherit (secrets included:
	// the file is mode 0600, as PM2's dump is its user's).
	Env  []string  `json:"env"`
	Apps []DumpApp `json:"apps"`
}

// DumpApp is one app of a Dump.
type DumpApp struct {
	Name   string `json:"name,omitempty"`
	Mode   string `json:"mode"`
	Status string `json:"status"` // running or stopped
	// Instances is the app's workers when saved: the scale resurrect restores.
	Instances int `json:"instances"`
}

// DumpVersion is the Dump format's version.
const DumpVersion = 1
