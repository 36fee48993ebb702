// The host's other work over a trial: what the host's CPUs did besides this process and
// everything it started (the servers, the generator and, with load hosts, its ssh
// sessions), measured as the ceiling sweep measures it, through procstat.

package challenge

import (
	"errors"
	"os"
	"time"

	"github.com/onehost/onehost/internal/procstat"
)

// errHostBusy ends a search after a host-busy trial (Score.HostBusy says which).
var errHostBusy = errors.New("host busy: other work ran beside the trial")

// measureOtherWork reads the host's CPU counters and this process's tree now; its stop
// reads them again and returns the host's busy cores over the interval less the tree's
// (procstat.HostCPU.OtherCores), or -1 for an interval too short to measure. The tree is rescanned at each reading, so the generator
// started meanwhile counts in full (once reaped, through this process's children's times).
func measureOtherWork() (stop func() (float64, error), err error) {
	tree, err := procstat.NewTree(procstat.TreeConfig{PID: os.Getpid(), Rescan: 1})
	if err != nil {
		return nil, err
	}
	u0, err := tree.Read()
	if err != nil {
		return nil, err
	}
	h0, err := procstat.ReadHost("")
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	return func() (float64, error) {
		u1, err := tree.Read()
		if err != nil {
			return -1, err
		}
		h1, err := procstat.ReadHost("")
		if err != nil {
			return -1, err
		}
		wall := time.Since(t0).Seconds()
		if wall <= 0 || h1.All.Total() <= h0.All.Total() {
			return -1, nil // shorter than the kernel's tick: nothing to tell
		}
		ours := (u1.CPU - u0.CPU).Seconds() / wall
		return h1.CPUSince(h0).OtherCores(len(h1.CPUs), ours), nil
	}, nil
}
