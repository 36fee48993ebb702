package appspec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onehost/onehost/internal/cluster"
)

// TestLaunchCheck: each thing that would have every worker die at start (and a unit
// crash-loop) is an error naming the field and the fix; a complete setup passes.
func TestLaunchCheck(t *testing.T) {
	dir := t.TempDir()
	ours := filepath.Join(dir, "bin", "worker") // stands for cmd/worker beside the supervisor
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.WriteFile(ours, []byte("#!/bin/sh\n"), 0o755)
	os.MkdirAll(filepath.Join(dir, "data"), 0o700)
	os.WriteFile(filepath.Join(dir, "data", "feed.db"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(dir, "data", "jwt_secret"), []byte("s3cret\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "data", "empty"), nil, 0o600)
	os.WriteFile(filepath.Join(dir, "server.js"), []byte("\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "bin", "node"), []byte("#!/bin/sh\n"), 0o755) // nvm's node, say
	good := map[string]string{"SQLITE_PATH": "data/feed.db", "JWT_SECRET_FILE": "data/jwt_secret"}
	binPath := filepath.Join(dir, "bin")
	tests := []struct {
		name    string
		cfg     cluster.Config
		env     map[string]string // the supervisor's environment (PATH: binPath unless given)
		want    []string          // in the error; none: passes
		notWant string
	}{
		{name: "our worker complete", cfg: cluster.Config{Command: []string{ours}}, env: good},
		{name: "our worker by a relative path", cfg: cluster.Config{Command: []string{"./bin/worker"}}, env: good},
		{name: "our worker's env in the config", cfg: cluster.Config{Command: []string{ours}, Env: good}},
		{name: "no database", cfg: cluster.Config{Command: []string{ours}}, env: map[string]string{"JWT_SECRET": "x"},
			want: []string{"SQLITE_PATH is not set", "env file"}, notWant: "JWT"},
		{name: "no secret", cfg: cluster.Config{Command: []string{ours}}, env: map[string]string{"SQLITE_PATH": "data/feed.db"},
			want: []string{"neither JWT_SECRET nor JWT_SECRET_FILE", "JWT_SECRET_FILE=PATH"}},
		{name: "nothing (the README's unit)", cfg: cluster.Config{Command: []string{ours}},
			want: []string{"SQLITE_PATH is not set", "neither JWT_SECRET"}},
		{name: "database missing", cfg: cluster.Config{Command: []string{ours}}, env: map[string]string{"SQLITE_PATH": "data/nope.db", "JWT_SECRET": "x"},
			want: []string{"SQLITE_PATH data/nope.db", filepath.Join(dir, "data/nope.db"), "is not a database file"}},
		{name: "-db wins over SQLITE_PATH", cfg: cluster.Config{Command: []string{ours, "-db", "data/feed.db"}}, env: map[string]string{"SQLITE_PATH": "data/nope.db", "JWT_SECRET": "x"}},
		{name: "secret file unreadable", cfg: cluster.Config{Command: []string{ours}}, env: map[string]string{"SQLITE_PATH": "data/feed.db", "JWT_SECRET_FILE": "data/absent"},
			want: []string{"JWT_SECRET_FILE data/absent", "no such file"}},
		{name: "secret file empty", cfg: cluster.Config{Command: []string{ours}}, env: map[string]string{"SQLITE_PATH": "data/feed.db", "JWT_SECRET_FILE": "data/empty"},
			want: []string{"JWT_SECRET_FILE data/empty is empty"}},
		{name: "both secrets", cfg: cluster.Config{Command: []string{ours}}, env: map[string]string{"SQLITE_PATH": "data/feed.db", "JWT_SECRET": "x", "JWT_SECRET_FILE": "data/jwt_secret"},
			want: []string{"both set"}},
		{name: "cwd missing", cfg: cluster.Config{Command: []string{ours}, Cwd: "nowhere"}, env: good,
			want: []string{`cwd: "nowhere"`, "create it, or fix cwd"}},
		{name: "node on PATH", cfg: cluster.Config{Command: []string{"node", "--max-old-space-size=512", "./server.js"}}},
		{name: "node not on PATH", cfg: cluster.Config{Command: []string{"node", "./server.js"}}, env: map[string]string{"PATH": "/nonexistent"},
			want: []string{`command: "node" is not found on the workers' PATH (/nonexistent)`, "add its directory to PATH"}},
		{name: "script missing", cfg: cluster.Config{Command: []string{"node", "-r", "./preload.js", "./app.js"}},
			want: []string{"script: ./app.js is not there", "fix script or cwd"}},
		{name: "script under cwd", cfg: cluster.Config{Command: []string{"node", "server.js"}, Cwd: "."}},
		{name: "program missing", cfg: cluster.Config{Command: []string{"./bin/absent"}},
			want: []string{"command: ./bin/absent", "no such file"}},
		{name: "not our worker: no env wanted", cfg: cluster.Config{Command: []string{filepath.Join(dir, "bin", "node"), "-e", "1"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"PATH": binPath}
			for k, v := range tc.env {
				env[k] = v
			}
			lc := LaunchCheck{Dir: dir, Getenv: func(k string) string { return env[k] }, Ours: ours, Access: true, Config: "cluster.yaml"}
			err := lc.Check([]cluster.App{{Name: "api", Config: tc.cfg}})
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("check = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("check = nil, want %q", tc.want)
			}
			for _, w := range append(tc.want, "app api: ") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("check = %v\nwant %q in it", err, w)
				}
			}
			if tc.notWant != "" && strings.Contains(err.Error(), tc.notWant) {
				t.Errorf("check = %v\nwant no %q", err, tc.notWant)
			}
		})
	}
}
