// Package fleetnstest makes package fleetns's fleet for a test: New, removed when the test
// ends; Check skips a test (fails it where CI requires the programs: package proctest)
// that cannot have one. Kept apart so that no binary that makes a fleet (ceiling fleet)
// links package testing.
package fleetnstest

import (
	"os"
	"os/exec"
	"testing"

	"github.com/onehost/onehost/internal/fleetns"
	"github.com/onehost/onehost/internal/proctest"
)

// Check skips tb (fails it in CI) unless this process can make the fleet.
func Check(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		proctest.Missing(tb, "network namespaces need root")
	}
	for _, p := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(p); err != nil {
			proctest.Missing(tb, p+" not installed (Debian: iproute2, util-linux; .ci/run installs them)")
		}
	}
}

// New makes a balancer namespace with n hosts behind it, removed when the test ends.
func New(t testing.TB, n int) *fleetns.Net {
	t.Helper()
	Check(t)
	f, cleanup, err := fleetns.Make(n)
	t.Cleanup(cleanup)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
