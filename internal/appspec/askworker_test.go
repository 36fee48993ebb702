package appspec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onehost/onehost/internal/cluster"
)

// TestAskWorker: our worker's own verdict (`worker -check`) joins the launch check's
// errors, its last line named as the worker printed it; the variables the check named
// already, and a worker too old to know -check, are left out. The worker is run in the
// workers' directory with their environment, the app's env over it, its arguments after
// -check (serve dropped), HOST and PORT of the address it will serve and none of the
// variables the supervisor sets per worker. (Scripts stand in for the worker's exit and
// output here; cmd/supervisor's TestRunCheckAsksOurWorker runs the real one.)
func TestAskWorker(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "feed.db"), []byte("x"), 0o600)
	seen := filepath.Join(dir, "seen")
	ok := map[string]string{"SQLITE_PATH": "feed.db", "JWT_SECRET": "x"}
	tests := []struct {
		name   string
		script string // the worker's body
		env    map[string]string
		want   string // in the error; "" passes
	}{
		{name: "ok", script: `echo ok`, env: ok},
		{name: "refusal", env: ok,
			script: `echo '{"level":"warn","msg":"a log line first"}' >&2; echo 'worker: COMPRESS (-compress): parse codings "gzip:12": gzip level "12": want 1 to 6' >&2; exit 1`,
			want:   `app api: worker -check: COMPRESS (-compress): parse codings "gzip:12": gzip level "12": want 1 to 6 (set under env: in cluster.yaml, in the env file, or by a flag in command)`},
		{name: "a variable named above", env: map[string]string{"JWT_SECRET": "x"},
			script: `echo 'worker: SQLITE_PATH is not set: point it (or -db) at a copy' >&2; exit 1`,
			want:   "env: SQLITE_PATH is not set, and the worker refuses"},
		{name: "older worker", env: ok, script: `echo 'flag provided but not defined: -check' >&2; echo 'worker: flag provided but not defined: -check' >&2; exit 2`},
		{name: "silent failure", env: ok, script: `exit 3`, want: "worker -check: exited with exit status 3 and said nothing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ours := filepath.Join(dir, "worker")
			os.WriteFile(ours, []byte("#!/bin/sh\n{ pwd; echo \"$@\"; env; } >"+seen+"\n"+tc.script+"\n"), 0o755)
			lc := LaunchCheck{Dir: dir, Getenv: func(k string) string { return tc.env[k] }, Ours: ours, Config: "cluster.yaml",
				Environ: []string{"PATH=/usr/bin:/bin", "FROM_ENV_FILE=1", "LISTEN_FDS=1", "ONEHOST_IPC_FD=3", "COMPRESS=zstd"}}
			cfg := cluster.Config{Command: []string{ours, "serve", "-commit-window", "2ms"}, Listen: "0.0.0.0:8080", Env: map[string]string{"COMPRESS": "gzip"}}
			err := lc.Check([]cluster.App{{Name: "api", Config: cfg}})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("check = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("check = %v, want %q", err, tc.want)
			case tc.name == "a variable named above" && strings.Contains(err.Error(), "worker -check"):
				t.Errorf("check = %v, want SQLITE_PATH named once", err)
			}
			b, _ := os.ReadFile(seen)
			lines := strings.Split(string(b), "\n")
			if lines[0] != dir || lines[1] != "-check -commit-window 2ms" {
				t.Errorf("the worker ran in %q with %q, want %q with -check -commit-window 2ms", lines[0], lines[1], dir)
			}
			env := "\n" + strings.Join(lines[2:], "\n")
			for _, want := range []string{"\nFROM_ENV_FILE=1\n", "\nCOMPRESS=gzip\n", "\nHOST=0.0.0.0\n", "\nPORT=8080\n"} {
				if !strings.Contains(env, want) {
					t.Errorf("the worker's environment lacks %q:%s", strings.TrimSpace(want), env)
				}
			}
			for _, not := range []string{"\nLISTEN_FDS=", "\nONEHOST_IPC_FD=", "\nCOMPRESS=zstd\n"} {
				if strings.Contains(env, not) {
					t.Errorf("the worker's environment has %q:%s", strings.TrimSpace(not), env)
				}
			}
		})
	}
}
