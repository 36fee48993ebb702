package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFindSocketRun: `status` without -socket, and with no supervisor at the default
// socket, reaches a real supervisor whose socket is an installed unit's
// (/run/NAME/supervisor.sock); the unit part is cli's TestFindSocket.
func TestFindSocketRun(t *testing.T) {
	runDir := t.TempDir()
	defer func(d string) { unitRunDir = d }(unitRunDir)
	unitRunDir = runDir
	os.Mkdir(filepath.Join(runDir, "shop"), 0o700)
	sock := filepath.Join(runDir, "shop", "supervisor.sock")
	cfg := filepath.Join(t.TempDir(), "cluster.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("instances: 1\nwait_ready: true\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv)), 0o600)
	done := make(chan error, 1)
	logs := &syncBuffer{}
	go func() {
		done <- run(context.Background(), []string{"run", "-config", cfg, "-socket", sock, "-listen", "127.0.0.1:0", "--", os.Args[0]},
			func(string) string { return "" }, io.Discard, logs)
	}()
	xdg := t.TempDir() // the default socket: XDG_RUNTIME_DIR/onehost/supervisor.sock, not there
	getenv := func(k string) string {
		if k == "XDG_RUNTIME_DIR" {
			return xdg
		}
		return ""
	}
	defer func() {
		run(context.Background(), []string{"kill", "-socket", sock}, getenv, io.Discard, io.Discard)
		if err := <-done; err != nil {
			t.Errorf("run: %v\n%s", err, logs)
		}
	}()
	var out, errOut bytes.Buffer
	for deadline := time.Now().Add(20 * time.Second); ; {
		out.Reset()
		errOut.Reset()
		err := run(context.Background(), []string{"status"}, getenv, &out, &errOut)
		if err == nil && strings.Contains(out.String(), "online") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status without -socket: %v\n%s%s\n%s", err, &out, &errOut, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(errOut.String(), "using "+sock) {
		t.Errorf("status did not say which socket it used: %q", &errOut)
	}
}
