package proctest

import (
	"os"
	"os/exec"
	"testing"
)

// RequirePrograms reports whether a missing program fails its test instead of skipping
// it: in CI (CI set, as most CI systems do, or ONEHOST_REQUIRE_PROGRAMS=1, as .ci/run
// sets), where a skip would let a whole class of tests pass unseen.
func RequirePrograms() bool {
	return os.Getenv("CI") != "" || os.Getenv("ONEHOST_REQUIRE_PROGRAMS") == "1"
}

// Missing ends tb for want of what: a skip with a visible message, or a failure where
// RequirePrograms says so.
func Missing(tb testing.TB, what string) {
	tb.Helper()
	if RequirePrograms() {
		tb.Fatalf("%s (required here: CI or ONEHOST_REQUIRE_PROGRAMS=1 is set)", what)
	}
	tb.Skipf("SKIP: %s; set ONEHOST_REQUIRE_PROGRAMS=1 to make this a failure", what)
}

// Need skips tb (fails it in CI) unless every program is on PATH.
func Need(tb testing.TB, programs ...string) {
	tb.Helper()
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			Missing(tb, p+" not installed (Debian: .ci/run installs it)")
		}
	}
}
