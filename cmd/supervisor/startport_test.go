package main

// `supervisor start` of a Node script and ports: PORT in the calling environment is the
// port served, and where the app's port cannot be served the report's first line says why
// and what to do.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/control"
)

// nodeHolding starts node listening on 127.0.0.1:port (a process that is not ours holding
// the port) and stops it at the end of the test.
func nodeHolding(t *testing.T) (port string, pid int) {
	t.Helper()
	cmd := exec.Command("node", "-e", `const s = require('net').createServer().listen(0, '127.0.0.1', () => console.log(s.address().port));`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	b := make([]byte, 16)
	n, err := out.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b[:n])), cmd.Process.Pid
}

// TestStartNodePortRefused: `supervisor start hard.js` whose port another process holds
// (not PM2's: a node listening there) fails, and the first line of what it says is the
// preload's explanation: the port, who holds it, and the flag that serves another port.
// Before, the explanation came first in the worker's output and was cut off by the 15 lines
// of stack under it; the report showed the error object alone.
func TestStartNodePortRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a supervisor")
	}
	dir := nodeApps(t, false)
	port, holder := nodeHolding(t)
	tmp := t.TempDir()
	sock := filepath.Join(tmp, "s.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "start", filepath.Join(dir, "hard.js"), "-i", "2", "-socket", sock, "--", port)
	cmd.Env = append(envWithout("PORT"), roleEnv+"=supervisor", "GORACE=atexit_sleep_ms=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	c := &runningCluster{socket: sock}
	t.Cleanup(func() { c.cmd("kill") })
	if err == nil {
		t.Fatalf("start succeeded:\n%s", stdout.String())
	}
	first, _, _ := strings.Cut(stderr.String(), "\n")
	if !strings.HasPrefix(strings.TrimPrefix(first, "supervisor: "), "start: ") {
		t.Errorf("first line of start's report: %q, want start's error", first)
	}
	for _, want := range []string{
		"start: app hard.js: onehost: the app's listen(" + port + ") cannot be served: ",
		fmt.Sprintf("port %s is in use by pid %d (node)", port, holder),
		"-listen HOST:PORT",
	} {
		if !strings.Contains(first, want) {
			t.Errorf("first line of start's report:\n%s\nwant %q in it; the whole report:\n%s", first, want, stderr.String())
		}
	}
}

// TestStartNodePORT: `PORT=N supervisor start plain.js -i 2` serves port N (every
// interface), says so, and both workers answer there, through a reload. Before, the
// supervisor served its default 3000 while the app asked for N, and every worker
// crash-looped.
func TestStartNodePORT(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a supervisor")
	}
	dir := nodeApps(t, false)
	port := freePort(t)
	sock := filepath.Join(t.TempDir(), "s.sock")
	out, _, err := startCmd(t, append(envWithout("PORT"), "PORT="+port), filepath.Join(dir, "plain.js"), "-i", "2", "-socket", sock)
	c := &runningCluster{socket: sock}
	t.Cleanup(func() { c.cmd("kill") })
	if err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	if want := "PORT=" + port + " in the environment: serving 0.0.0.0:" + port; !strings.Contains(out, want) {
		t.Errorf("start said:\n%s\nwant %q", out, want)
	}
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	// 0.0.0.0 is every interface, IPv6 too where there is IPv6: [::] then.
	if _, p, _ := strings.Cut(st.Addr, "]:"); (st.Addr != "0.0.0.0:"+port && p != port) || len(st.AppPorts) != 0 || len(st.Workers) != 2 {
		t.Errorf("status: addr %s, app ports %q, %d workers; want 0.0.0.0:%s served, no app port, 2 workers", st.Addr, st.AppPorts, len(st.Workers), port)
	}
	url := "http://127.0.0.1:" + port + "/"
	reachesEach(t, "after start", url, workerPIDs(st))
	if out, err := c.cmd("reload"); err != nil {
		t.Fatalf("reload: %v %s", err, out)
	}
	var after control.Status
	waitUntil(t, 20*time.Second, "the new generation online", func() bool {
		after, err = c.status()
		return err == nil && everyOnline(after) && len(after.Workers) == 2
	})
	reachesEach(t, "after reload", url, workerPIDs(after))
}
