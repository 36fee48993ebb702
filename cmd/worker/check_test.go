package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestCheckFlag: `worker -check` judges the flags and environment as a start would and
// says ok, or refuses naming the variable (and its flag), opening and binding nothing: no
// products database generated, no WAL beside the database, a port in use no obstacle.
func TestCheckFlag(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "feed.db")
	os.WriteFile(db, nil, 0o600) // a file is all -check asks of the database: opening it is the start's
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, busyPort, _ := net.SplitHostPort(busy.Addr().String())
	good := []string{"SQLITE_PATH=" + db, "JWT_SECRET=" + strings.Repeat("k", 32), "PORT=" + busyPort}
	tests := []struct {
		name string
		args []string
		env  []string // over good
		want string   // in the error; "" for ok
	}{
		{name: "ok", args: []string{"-check"}},
		{name: "serve -check", args: []string{"serve", "-check"}},
		{name: "flags", args: []string{"-check", "-compress", "zstd,gzip:6", "-commit-window", "2ms", "-log-format", "console"}},
		{name: "COMPRESS level", args: []string{"-check"}, env: []string{"COMPRESS=gzip:12"},
			want: `COMPRESS (-compress): parse codings "gzip:12": gzip level "12": want 1 to 6`},
		{name: "-compress level", args: []string{"-check", "-compress", "br:11"}, want: "br level 11 costs more than"},
		{name: "COMMIT_WINDOW", args: []string{"-check"}, env: []string{"COMMIT_WINDOW=5s"},
			want: `COMMIT_WINDOW (-commit-window) "5s": want a duration from 0s to 1s`},
		{name: "COMPRESS_ROUTES", args: []string{"-check"}, env: []string{"COMPRESS_ROUTES=api"}, want: `unknown route "api"`},
		{name: "WRITES", args: []string{"-check"}, env: []string{"WRITES=all"}, want: `WRITES "all"`},
		{name: "LOG_LEVEL", args: []string{"-check"}, env: []string{"LOG_LEVEL=loud"}, want: `LOG_LEVEL "loud"`},
		{name: "log format", args: []string{"-check"}, env: []string{"ONEHOST_LOG_FORMAT=pretty"},
			want: `ONEHOST_LOG_FORMAT (-log-format) "pretty": want json or console`},
		{name: "unknown flag", args: []string{"-check", "-compres", "gzip"}, want: "flag provided but not defined: -compres"},
		{name: "no database", args: []string{"-check"}, env: []string{"SQLITE_PATH=" + filepath.Join(dir, "absent.db")},
			want: "SQLITE_PATH " + filepath.Join(dir, "absent.db") + ": no such file or directory"},
		{name: "database a directory", args: []string{"-check"}, env: []string{"SQLITE_PATH=" + dir}, want: "not a regular file"},
		{name: "no secret", args: []string{"-check"}, env: []string{"JWT_SECRET="}, want: "JWT_SECRET is empty"},
		{name: "challenge secret on every interface", args: []string{"-check"}, env: []string{"JWT_SECRET=" + testSecret, "HOST=0.0.0.0"},
			want: "JWT_SECRET is the challenge's published secret (twelve-dollar-challenge) and the worker listens on 0.0.0.0:" + busyPort},
		{name: "challenge secret allowed", args: []string{"-check"}, env: []string{"JWT_SECRET=" + testSecret, "HOST=0.0.0.0", "ALLOW_CHALLENGE_SECRET=1"}},
		{name: "challenge secret on loopback", args: []string{"-check"}, env: []string{"JWT_SECRET=" + testSecret}},
		{name: "HOST unresolvable", args: []string{"-check"}, env: []string{"HOST=no-such-host.invalid"}, want: "HOST (-host) no-such-host.invalid:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for _, kv := range append(append([]string(nil), good...), tc.env...) {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			var stdout, stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := run(ctx, tc.args, func(k string) string { return env[k] }, &stdout, &stderr)
			if tc.want == "" {
				if err != nil || stdout.String() != "ok\n" {
					t.Errorf("run %q = %v, stdout %q, want nil and ok\n%s", tc.args, err, stdout.String(), &stderr)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run %q = %v, want an error with %q", tc.args, err, tc.want)
			} else if stdout.Len() != 0 {
				t.Errorf("run %q refused and printed %q", tc.args, stdout.String())
			}
		})
	}
	for _, name := range []string{"products.db", "feed.db-wal", "feed.db-shm"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			t.Errorf("-check made %s: it opens nothing", name)
		}
	}
}

// TestLogFormatConsole: -log-format console (ONEHOST_LOG_FORMAT, which a supervisor printing
// console lines sets) writes each event as the supervisor writes its own: one line of time,
// level, message and fields, the worker's id among them; json, the default, one object.
func TestLogFormatConsole(t *testing.T) {
	for _, tc := range []struct{ format, want string }{
		{"console", `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z  WARN  database unhealthy  \{"worker": 3, "path": "x\.db"\}\n$`},
		{"json", `^\{"level":"warn","ts":"[^"]+","msg":"database unhealthy","worker":3,"path":"x\.db"\}\n$`},
	} {
		var b bytes.Buffer
		log, err := newLogger(&b, "info", tc.format)
		if err != nil {
			t.Fatal(err)
		}
		log.With(zap.Int("worker", 3)).Warn("database unhealthy", zap.String("path", "x.db"))
		if !regexp.MustCompile(tc.want).MatchString(b.String()) {
			t.Errorf("-log-format %s wrote %q, want %s", tc.format, b.String(), tc.want)
		}
	}
}
