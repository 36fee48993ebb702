package detach

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPreloadSays: start's report puts first the last line the Node preload wrote in the
// worker's log (from "onehost:" on, under a log_date_format stamp too); none without one.
func TestPreloadSays(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, log, want string
	}{
		{"the preload's line", "starting\nonehost: the app's listen(8080) cannot be served: port 8080 is in use by pid 7 (nginx): stop it (kill 7)\n",
			"onehost: the app's listen(8080) cannot be served: port 8080 is in use by pid 7 (nginx): stop it (kill 7)"},
		{"stamped, the last of several", "2026-12-07 10:00:00: onehost: first\n2026-12-07 10:00:01: onehost: last\n", "onehost: last"},
		{"none", "Error: something else\n    at x (y.js:1:1)\n", ""},
		{"no file", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".log")
			if tc.log != "" {
				os.WriteFile(path, []byte(tc.log), 0o600)
			}
			if got := preloadSays(tail(path, 10, 0)); got != tc.want {
				t.Errorf("preloadSays = %q, want %q", got, tc.want)
			}
		})
	}
}
