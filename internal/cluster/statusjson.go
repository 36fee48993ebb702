package cluster

import "encoding/json"

// workerStatusFields is WorkerStatus without its JSON methods.
type workerStatusFields WorkerStatus

// workerStatusJSON is WorkerStatus as JSON: the counters a worker may not report are
// pointers, null when WorkerStatus.NoCounters (the outer fields hide the embedded ones).
type workerStatusJSON struct {
	workerStatusFields
	Requests    *uint64  `json:"requests"`
	RPS         *float64 `json:"rps"`
	Connections *int64   `json:"connections"`
}

// MarshalJSON writes requests, rps and connections as null when the worker reports none.
func (w WorkerStatus) MarshalJSON() ([]byte, error) {
	j := workerStatusJSON{workerStatusFields: workerStatusFields(w)}
	if !w.NoCounters {
		j.Requests, j.RPS, j.Connections = &w.Requests, &w.RPS, &w.Connections
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes: null (or absent) counters set NoCounters.
func (w *WorkerStatus) UnmarshalJSON(b []byte) error {
	var j workerStatusJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*w = WorkerStatus(j.workerStatusFields)
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
