package detach

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

// TestListenFromPORT: PORT in the calling environment of `start app.js` is the port served
// (on every interface, as the app's own listen(PORT) binds), as PM2's user expects; a
// configuration, another program or -listen keeps its own; a PORT that is no port is
// refused.
func TestListenFromPORT(t *testing.T) {
	node := []string{"-instances", "2", "--", "node", "/a/app.js"}
	for _, tc := range []struct {
		name, port string
		args       []string
		want       string // joined by spaces; "error" for an error
		note       bool
	}{
		{"no PORT", "", node, "-instances 2 -- node /a/app.js", false},
		{"PORT", "3100", node, "-instances 2 -listen 0.0.0.0:3100 -- node /a/app.js", true},
		{"-listen given", "3100", []string{"-listen", "127.0.0.1:4000", "--", "node", "/a/app.js"}, "-listen 127.0.0.1:4000 -- node /a/app.js", false},
		{"a configuration", "3100", []string{"-config", "/a/ecosystem.config.js"}, "-config /a/ecosystem.config.js", false},
		{"not node", "3100", []string{"--", "python3", "/a/app.py"}, "-- python3 /a/app.py", false},
		{"not a port", "http", node, "error", false},
		{"out of range", "70000", node, "error", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, note, err := listenFromPORT(tc.args, func(k string) string {
				if k == "PORT" {
					return tc.port
				}
				return ""
			})
			if tc.want == "error" {
				if err == nil || !strings.Contains(err.Error(), "PORT=") {
					t.Errorf("listenFromPORT = %q, %v; want an error naming PORT", got, err)
				}
				return
			}
			if err != nil || strings.Join(got, " ") != tc.want {
				t.Errorf("listenFromPORT = %q, %v; want %q", got, err, tc.want)
			}
			if (note != "") != tc.note || (tc.note && !strings.Contains(note, "serving 0.0.0.0:"+tc.port)) {
				t.Errorf("note %q, want one: %v (naming the address served)", note, tc.note)
			}
		})
	}
}
