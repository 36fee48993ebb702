package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/seedtest"
)

// TestOurWorker: what the supervisor and our worker agree on, with the real binaries.
func TestOurWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs the real worker")
	}
	bins := buildBinaries(t)
	t.Run("LinesReadableOnTerminal", func(t *testing.T) { ourWorkerLines(t, bins) })
	t.Run("RunCheckAsksTheWorker", func(t *testing.T) { t.Parallel(); runCheckAsksWorker(t, bins) })
}

// ourWorkerLines: our worker under a supervisor printing console lines (the default) prints
// console lines: on a pseudo-terminal each of its events is one readable line after
// `0|worker |` (time, level, message, fields with the worker's id), no JSON object; under
// -log-format json every line is one JSON object, the worker's events JSON in the entries'
// message as `pm2 logs --json` carries an app's line.
func ourWorkerLines(t *testing.T, bins binaries) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cluster.yaml")
	os.WriteFile(cfg, []byte(clusterConfig(1, seedtest.Path(t), filepath.Join(dir, "products.db"), "")), 0o600)
	consoleLine := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z  (DEBUG|INFO|WARN|ERROR)  [^{]+  \{"worker": 0, "pid": \d+`)
	for _, format := range []string{"console", "json"} {
		t.Run(format, func(t *testing.T) {
			sock := filepath.Join(dir, format+".sock")
			master, slave := openPTY(t)
			var term syncBuffer
			read := make(chan struct{})
			go func() {
				defer close(read)
				io.Copy(&term, master) // until EIO, once the slave is closed
			}()
			done := make(chan error, 1)
			go func() {
				done <- run(context.Background(), []string{"run", "-config", cfg, "-socket", sock, "-listen", "127.0.0.1:0", "-log-format", format, "--", bins.worker},
					func(string) string { return "" }, slave, slave)
			}()
			stopped := false
			stop := func() {
				if !stopped {
					stopped = true
					run(context.Background(), []string{"stop", "-socket", sock}, func(string) string { return "" }, io.Discard, io.Discard)
					if err := <-done; err != nil {
						t.Errorf("run: %v", err)
					}
					slave.Close()
					<-read
					master.Close()
				}
			}
			defer stop()
			waitUntil(t, 30*time.Second, "the worker's serving line", func() bool { return strings.Contains(term.String(), "serving") })
			stop()
			var workerLines int
			for _, line := range strings.Split(strings.ReplaceAll(term.String(), "\r\n", "\n"), "\n") {
				if line == "" {
					continue
				}
				if format == "json" {
					var e struct {
						Message, Type string
						ProcessID     int `json:"process_id"`
					}
					if err := json.Unmarshal([]byte(line), &e); err != nil {
						t.Errorf("-log-format json: a line that is no JSON object: %q", line)
					} else if e.Type == "out" || e.Type == "err" {
						workerLines++
						if !strings.HasPrefix(e.Message, "{") || !strings.Contains(e.Message, `"worker":0`) {
							t.Errorf("-log-format json: the worker's line %q, want its JSON with the worker's id", e.Message)
						}
					}
					continue
				}
				rest, ok := strings.CutPrefix(line, "0|worker")
				if !ok {
					continue // the supervisor's own
				}
				workerLines++
				_, text, _ := strings.Cut(rest, "| ")
				if !consoleLine.MatchString(text) {
					t.Errorf("on a terminal, the worker's line %q: want time, level, message and the worker's id, as the supervisor's own lines", line)
				}
			}
			if workerLines < 2 {
				t.Errorf("%d lines of the worker's, want its start-up events:\n%s", workerLines, term.String())
			}
			if t.Failed() {
				t.Logf("the terminal:\n%s", term.String())
			}
		})
	}
}

// runCheckAsksTheWorker: `run -check` refuses the worker's own settings that would have it
// crash-loop (COMPRESS=gzip:12, COMMIT_WINDOW=3s, the challenge's secret on every
// interface), judged by `worker -check`, naming the variable, whether the config's env or
// the env file sets them; with them fixed it passes.
func runCheckAsksWorker(t *testing.T, bins binaries) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "feed.db"), nil, 0o600)
	secret := "JWT_SECRET: " + strings.Repeat("k", 32)
	check := func(listen, env string, envFile ...string) (string, error) {
		cfg := filepath.Join(dir, "cluster.yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf("instances: 1\nlisten: %s\nenv: {SQLITE_PATH: feed.db, %s}\n", listen, env)), 0o600)
		args := []string{"run", "-check", "-config", cfg, "-socket", filepath.Join(dir, "s.sock")}
		if len(envFile) > 0 {
			p := filepath.Join(dir, "onehost.env")
			os.WriteFile(p, []byte(strings.Join(envFile, "\n")+"\n"), 0o600)
			args = append(args, "-env-file", p)
		}
		cmd := exec.Command(bins.supervisor, args...)
		cmd.Dir, cmd.Env = dir, []string{"PATH=" + os.Getenv("PATH")}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	for _, tc := range []struct {
		name, listen, env string
		envFile           []string
		want              string
	}{
		{"COMPRESS level", "127.0.0.1:0", secret + `, COMPRESS: "gzip:12"`, nil,
			`worker -check: COMPRESS (-compress): parse codings "gzip:12": gzip level "12": want 1 to 6`},
		{"COMMIT_WINDOW from the env file", "127.0.0.1:0", secret, []string{"COMMIT_WINDOW=3s"},
			`worker -check: COMMIT_WINDOW (-commit-window) "3s": want a duration from 0s to 1s`},
		{"the challenge's secret on every interface", "0.0.0.0:0", "JWT_SECRET: twelve-dollar-challenge", nil,
			"worker -check: JWT_SECRET is the challenge's published secret (twelve-dollar-challenge) and the worker listens on 0.0.0.0:0"},
		{"fixed", "127.0.0.1:0", secret + `, COMPRESS: "gzip:6", COMMIT_WINDOW: 2ms`, nil, ""},
		{"the challenge's secret on loopback", "127.0.0.1:0", "JWT_SECRET: twelve-dollar-challenge", nil, ""},
	} {
		out, err := check(tc.listen, tc.env, tc.envFile...)
		if tc.want == "" {
			if err != nil || !strings.Contains(out, "configuration ok") {
				t.Errorf("%s: run -check = %v, want ok:\n%s", tc.name, err, out)
			}
		} else if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%s: run -check = %v, want %q:\n%s", tc.name, err, tc.want, out)
		}
	}
}
