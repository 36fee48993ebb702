package registry

import (
	"errors"
	"testing"

	"github.com/onehost/onehost/internal/procstat"
)

// TestWorkerLineage: how a peer's pid is traced to a worker, through a table of processes
// (pid: parent, process group).
func TestWorkerLineage(t *testing.T) {
	const self = 100
	procs := map[int]procstat.Lineage{
		100: {PPID: 1, PGID: 100},   // the supervisor
		200: {PPID: 100, PGID: 200}, // a worker (its own group)
		201: {PPID: 200, PGID: 200}, // its child
		202: {PPID: 201, PGID: 202}, // a grandchild in a session of its own
		203: {PPID: 1, PGID: 200},   // a daemon of the worker's, reparented to init
		300: {PPID: 1, PGID: 300},   // an adopted worker (a previous supervisor's)
		301: {PPID: 300, PGID: 301}, // its child, in a group of its own
		400: {PPID: 1, PGID: 400},   // the operator's shell
		401: {PPID: 400, PGID: 401}, // supervisor reload
		500: {PPID: 100, PGID: 100}, // a check the supervisor runs (upgrade's -h)
	}
	read := func(pid int) (procstat.Lineage, error) {
		l, ok := procs[pid]
		if !ok {
			return l, errors.New("no such process")
		}
		return l, nil
	}
	workers := map[int]bool{200: true, 300: true}
	tests := []struct {
		name    string
		pid     int
		want    int
		wantErr bool
	}{
		{"the supervisor itself", 100, 0, false},
		{"a worker", 200, 200, false},
		{"a worker's child", 201, 200, false},
		{"a worker's grandchild after setsid", 202, 200, false},
		{"a worker's daemon reparented to init", 203, 200, false},
		{"an adopted worker", 300, 300, false},
		{"an adopted worker's child", 301, 300, false},
		{"the operator's command", 401, 0, false},
		{"a child of the supervisor", 500, self, false},
		{"outside the pid namespace", 0, 0, false},
		{"gone", 999, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := WorkerLineage(tc.pid, self, workers, read)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("WorkerLineage(%d) = %d, %v; want %d, error %v", tc.pid, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
