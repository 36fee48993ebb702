package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/control"
)

// servedEnv asks the app at addr for the variable name on fresh connections until every
// worker of pids has answered (at most 400 requests), and returns each one's value.
func servedEnv(t *testing.T, addr, name string, pids map[int]bool) map[int]string {
	t.Helper()
	got := map[int]string{}
	for i := 0; i < 400 && len(got) < len(pids); i++ {
		code, body, err := fetch("http://"+addr+"/env/"+name, 5*time.Second)
		if err != nil || code != 200 {
			t.Fatalf("GET /env/%s: %d %q %v", name, code, body, err)
		}
		var v string
		var pid int
		if _, err := fmt.Sscanf(strings.TrimSpace(body), "%s %d", &v, &pid); err != nil {
			t.Fatalf("answer %q: %v", body, err)
		}
		got[pid] = v
	}
	if len(got) < len(pids) {
		t.Fatalf("%d of %d workers answered in 400 requests: %v", len(got), len(pids), got)
	}
	return got
}

// TestUpdateEnv: a reload keeps the env the workers started with, as PM2's does; reload
// -update-env (and restart --update-env) reads the file again and rolls its env into
// every worker, under load without a failed request, and names the other fields the file
// changed; a new env.PORT is refused and changes nothing.
func TestUpdateEnv(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	eco := filepath.Join(tmp, "ecosystem.config.json")
	write := func(greeting string, killTimeout int, port int) {
		t.Helper()
		doc := fmt.Sprintf(`{"apps": [{"name": "api", "script": %q, "interpreter": "none", "instances": 2, "wait_ready": true, "kill_timeout": %d,
  "env": {"PORT": %d, "HOST": "127.0.0.1", %q: "worker", "GORACE": "atexit_sleep_ms=0", "GREETING": %q},
  "env_production": {"MODE": "production"}}]}`, os.Args[0], killTimeout, port, roleEnv, greeting)
		if err := os.WriteFile(eco, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("one", 3000, 0)
	c, _ := runEcosystem(t, eco, "-env", "production")
	var st control.Status
	waitUntil(t, 30*time.Second, "workers online", func() bool {
		var err error
		st, err = c.status()
		return err == nil && len(st.Workers) == 2 && everyOnline(st)
	})
	addr := st.Apps[0].Addr
	workers := func() map[int]bool {
		st, err := c.status()
		if err != nil {
			t.Fatal(err)
		}
		m := map[int]bool{}
		for _, w := range st.Workers {
			m[w.PID] = true
		}
		return m
	}
	every := func(name, want string) {
		t.Helper()
		for pid, v := range servedEnv(t, addr, name, workers()) {
			if v != want {
				t.Errorf("worker %d serves %s=%q, want %q", pid, name, v, want)
			}
		}
	}
	every("GREETING", "one")
	every("MODE", "production")

	probe := startLoadProbe("http://" + addr + "/")
	write("two", 5000, 0)
	if out, err := c.cmd("reload"); err != nil {
		t.Fatalf("reload: %v\n%s", err, out)
	}
	every("GREETING", "one") // PM2's default: the env at start stays

	out, err := c.cmd("reload", "-update-env")
	if err != nil {
		t.Fatalf("reload -update-env: %v\n%s", err, out)
	}
	for _, want := range []string{"reloaded", "app api: env updated (changed GREETING)",
		"app api: kill_timeout changed in the file too, and a reload rolls in env alone: stop the supervisor and run it again with the file"} {
		if !strings.Contains(out, want) {
			t.Errorf("reload -update-env said:\n%s\nwant %q", out, want)
		}
	}
	t.Logf("reload -update-env:\n%s", out)
	every("GREETING", "two")
	every("MODE", "production") // -env production still applies
	probe.end(t)

	write("three", 5000, 0)
	if out, err := c.cmd("restart", "api", "--update-env"); err != nil || !strings.Contains(out, "changed GREETING") {
		t.Fatalf("restart api --update-env: %v\n%s", err, out)
	}
	every("GREETING", "three")

	// A new port is the sockets' address, which a reload keeps: refused, nothing changed.
	write("four", 5000, 1)
	out, err = c.cmd("reload", "-update-env")
	if err == nil || !strings.Contains(err.Error(), "env.PORT") || !strings.Contains(err.Error(), "stop the supervisor and run it again") {
		t.Errorf("reload -update-env with a new PORT: %v\n%s, want a refusal naming env.PORT", err, out)
	}
	every("GREETING", "three")

	// A file that no longer parses changes nothing either.
	os.WriteFile(eco, []byte(`{"apps": [`), 0o600)
	if out, err := c.cmd("reload", "-update-env"); err == nil || !strings.Contains(err.Error(), "nothing changed") {
		t.Errorf("reload -update-env of a broken file: %v\n%s", err, out)
	}
}

// TestUpdateEnvWithoutFile: a supervisor started without a configuration file says there
// is nothing to read again, and how to have one.
func TestUpdateEnvWithoutFile(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "s.sock")
	c := &runningCluster{socket: sock, done: make(chan error, 1), logs: &syncBuffer{}}
	go func() {
		c.done <- run(t.Context(), []string{"run", "-config", "", "-socket", sock, "-listen", "127.0.0.1:0", "-instances", "1", "--", os.Args[0]},
			func(k string) string { return "" }, os.Stderr, c.logs)
	}()
	waitUntil(t, 30*time.Second, "the supervisor answers", func() bool { _, err := c.status(); return err == nil })
	out, err := c.cmd("reload", "-update-env")
	if err == nil || !strings.Contains(err.Error(), "started without a configuration file") || !strings.Contains(err.Error(), "-config FILE") {
		t.Errorf("reload -update-env: %v\n%s", err, out)
	}
	c.cmd("stop")
	<-c.done
}

// TestUpdateEnvWhileRead: reload -update-env rolls new env in while status, describe, the
// metrics and the HAProxy agent read the app over and over, and the race detector (the
// tests run with -race, the supervisor in this process) sees every read of the app's
// configuration ordered with the update's write. The update once wrote the env under the
// app's lock while every reader copied the whole configuration without it: DATA RACE.
func TestUpdateEnvWhileRead(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	eco := filepath.Join(tmp, "ecosystem.config.json")
	write := func(n int) {
		doc := fmt.Sprintf(`{"apps": [{"name": "api", "script": %q, "interpreter": "none", "instances": 1, "wait_ready": true,
  "env": {%q: "worker", "GORACE": "atexit_sleep_ms=0", "ROUND": "%d"}}]}`, os.Args[0], roleEnv, n)
		if err := os.WriteFile(eco+".tmp", []byte(doc), 0o600); err != nil {
			t.Error(err)
		}
		os.Rename(eco+".tmp", eco)
	}
	write(0)
	c, _ := runEcosystem(t, eco, "-agent", "127.0.0.1:0")
	var st control.Status
	waitUntil(t, 30*time.Second, "workers online", func() bool {
		var err error
		st, err = c.status()
		return err == nil && len(st.Workers) == 1 && everyOnline(st) && st.Agent != ""
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	readers := map[string]func() error{
		"status":   func() error { _, err := c.cmd("status", "-json"); return err },
		"describe": func() error { _, err := c.cmd("describe", "api"); return err },
		"metrics": func() error {
			_, err := controlCall(context.Background(), c.socket, "GET", "/metrics", nil)
			return err
		},
		"agent": func() error {
			conn, err := net.DialTimeout("tcp", st.Agent, 5*time.Second)
			if err != nil {
				return err
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			_, err = bufio.NewReader(conn).ReadString('\n')
			return err
		},
	}
	for name, read := range readers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := read(); err != nil {
					t.Errorf("%s: %v", name, err)
					return
				}
			}
		})
	}
	for i := 1; i <= 4; i++ {
		write(i)
		if out, err := c.cmd("reload", "-update-env"); err != nil {
			t.Errorf("reload -update-env %d: %v\n%s", i, err, out)
		}
	}
	close(stop)
	wg.Wait()
}
