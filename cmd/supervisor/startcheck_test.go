package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunCheckEnvFile: `run -check` fails where the workers would not start, naming the
// variable, and passes given the env file (as the unit's EnvironmentFile= would give it).
func TestRunCheckEnvFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "feed.db"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(dir, "app.js"), []byte("\n"), 0o600)
	cfg := filepath.Join(dir, "cluster.yaml")
	// A node app run by the interpreter named by path (the test runs anywhere), under cwd.
	os.WriteFile(cfg, []byte(fmt.Sprintf("instances: 1\nlisten: 127.0.0.1:0\ncwd: %s\ncommand: [%s, -e, '1']\n", dir, os.Args[0])), 0o600)
	envFile := filepath.Join(dir, "onehost.env")
	os.WriteFile(envFile, []byte("# the workers' environment\nSQLITE_PATH=feed.db\nJWT_SECRET_FILE=\"secret\"\n"), 0o600)
	check := func(args ...string) (string, error) {
		var errOut bytes.Buffer
		err := run(context.Background(), append([]string{"run", "-check", "-config", cfg, "-socket", filepath.Join(dir, "s.sock")}, args...),
			func(string) string { return "" }, io.Discard, &errOut)
		return errOut.String(), err
	}
	if out, err := check(); err != nil || !strings.Contains(out, "configuration ok") {
		t.Fatalf("run -check of a program that is not our worker = %v (%s), want ok", err, out)
	}
	if out, err := check("-env-file", envFile); err != nil || !strings.Contains(out, "configuration ok") {
		t.Errorf("run -check -env-file = %v (%s), want ok", err, out)
	}
	if _, err := check("-env-file", filepath.Join(dir, "absent.env")); err == nil || !strings.Contains(err.Error(), "env-file") {
		t.Errorf("run -check -env-file ABSENT = %v, want an env-file error", err)
	}
	os.WriteFile(filepath.Join(dir, "bad.env"), []byte("SQLITE_PATH feed.db\n"), 0o600)
	if _, err := check("-env-file", filepath.Join(dir, "bad.env")); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("run -check -env-file BAD = %v, want the line named", err)
	}
	// The missing script of a node app: named.
	os.WriteFile(cfg, []byte(fmt.Sprintf("listen: 127.0.0.1:0\ncwd: %s\ncommand: [node, ./absent.js]\n", dir)), 0o600)
	var errOut bytes.Buffer
	err := run(context.Background(), []string{"run", "-check", "-config", cfg, "-socket", filepath.Join(dir, "s.sock")}, os.Getenv, io.Discard, &errOut)
	if _, lookErr := exec.LookPath("node"); lookErr == nil {
		if err == nil || !strings.Contains(err.Error(), "script: ./absent.js is not there") {
			t.Errorf("run -check of a node app without its script = %v, want the script named", err)
		}
	}
}
