package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartArgs: what `start` runs for each kind of file.
func TestStartArgs(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte("x"), mode)
		return p
	}
	eco, app, yml, exe, data := mk("ecosystem.config.js", 0o600), mk("app.js", 0o600), mk("c.yaml", 0o600), mk("srv", 0o755), mk("notes.txt", 0o600)
	for _, tc := range []struct {
		name string
		args []string
		want string // joined by spaces; "error" for an error
	}{
		{"ecosystem", []string{eco, "-env", "production"}, "-env production -config " + eco},
		{"script", []string{app, "-instances", "2", "--", "--port", "1"}, "-instances 2 -- node " + app + " --port 1"},
		{"our yaml", []string{yml}, "-config " + yml},
		{"pm2's -i", []string{app, "-i", "max"}, "-instances max -- node " + app},
		{"executable", []string{exe}, "-- " + exe},
		{"not runnable", []string{data}, "error"},
		{"args to a config", []string{yml, "--", "x"}, "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := startArgs(tc.args[0], tc.args[1:])
			if tc.want == "error" {
				if err == nil {
					t.Errorf("startArgs = %q, want an error", got)
				}
				return
			}
			if err != nil || strings.Join(got, " ") != tc.want {
				t.Errorf("startArgs = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
