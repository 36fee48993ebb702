package main

// Unmodified Node apps in cluster mode, as a PM2 user runs them: a plain node:http app, an
// Express app and a Fastify app from npm (testdata/node, installed by `npm ci` there, which
// .ci/run does), each calling listen(process.env.PORT) and knowing nothing of fd 3. The
// supervisor's preload (internal/cluster/nodepreload) gives their listen the slot's socket.

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/cluster/clustertest"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/proctest"
)

// nodeApps returns the directory of the Node test apps, skipping t (failing it in CI) when
// node or the npm packages are missing.
func nodeApps(t *testing.T, npm bool) string {
	t.Helper()
	proctest.Need(t, "node")
	dir, err := filepath.Abs("testdata/node")
	if err != nil {
		t.Fatal(err)
	}
	if npm {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "fastify")); err != nil {
			proctest.Missing(t, "the npm packages of testdata/node are not installed: run `npm ci` in "+dir+" (.ci/run does)")
		}
	}
	return dir
}

// nodeAppConfig runs an unmodified Node app on two workers with PM2's defaults where they
// matter here: wait_ready false (online at 'listening'); its listen_timeout is 3 s, 6 s
// here, since node itself took 3.1 s to start on a 2-core machine busy with other tests,
// and a slow start is not what these tests are about.
const nodeAppConfig = "instances: 2\nwait_ready: false\nlisten_timeout: 6s\nstats_interval: 200ms\nheartbeat_timeout: 1s\nkill_timeout: 5s\n"

func TestNodeAppsUnmodified(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real servers")
	}
	for _, tc := range []struct {
		name, app string
		npm       bool
	}{
		{"node:http", "plain.js", false},
		{"express", "express.js", true},
		{"fastify", "fastify.js", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := nodeApps(t, tc.npm)
			c := startRun(t, nodeAppConfig, "--", "node", filepath.Join(dir, tc.app))
			st, err := c.status()
			if err != nil {
				t.Fatal(err)
			}
			onlineAt := time.Now()
			// Online at 'listening' (the preload's word), each of them.
			listening := onlineBy(c.logs.String(), "listening")
			for _, pid := range workerPIDs(st) {
				if !listening[pid] {
					t.Errorf("worker %d has no \"worker online\" line with \"ready\":\"listening\" (those that have: %v)", pid, listening)
				}
			}
			url := "http://" + st.Addr + "/"
			reachesEach(t, "after start", url, workerPIDs(st))

			// Past listen_timeout and many heartbeat_timeouts: nobody is restarted.
			time.Sleep(time.Until(onlineAt.Add(8 * time.Second)))
			now, err := c.status()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(workerPIDs(now), workerPIDs(st)) {
				t.Errorf("workers %v after 8 s, want the same %v", workerPIDs(now), workerPIDs(st))
			}
			for _, w := range now.Workers {
				if w.Restarts != 0 || w.Status != "online" {
					t.Errorf("worker %+v after 8 s: want online, no restart", w)
				}
				if w.NoCounters || w.Requests == 0 {
					t.Errorf("worker %d: counters %d/%v/%d (none: %v), want the requests the preload counted", w.ID, w.Requests, w.RPS, w.Connections, w.NoCounters)
				}
			}
			if out, _ := c.cmd("status"); !strings.Contains(out, "online") || strings.Contains(out, "not-serving") {
				t.Errorf("status:\n%s", out)
			}

			// A rolling reload under load: nothing fails.
			after := reloadUnderLoad(t, c, url, st)
			reachesEach(t, "after reload", url, workerPIDs(after))

			// scale +1 and -1 under load: nothing fails.
			load := clustertest.StartLoad(url, 4)
			time.Sleep(300 * time.Millisecond)
			if out, err := c.cmd("scale", "+1"); err != nil {
				t.Errorf("scale +1: %v %s", err, out)
			}
			up, err := c.status()
			if err != nil || len(up.Workers) != 3 || !everyOnline(up) {
				t.Errorf("after scale +1: %+v %v, want 3 online", up, err)
			}
			time.Sleep(500 * time.Millisecond)
			if out, err := c.cmd("scale", "-1"); err != nil {
				t.Errorf("scale -1: %v %s", err, out)
			}
			time.Sleep(500 * time.Millisecond)
			load.Finish(t)
			down, err := c.status()
			if err != nil || len(down.Workers) != 2 || !everyOnline(down) {
				t.Errorf("after scale -1: %+v %v, want 2 online", down, err)
			}
			if len(up.Workers) == 3 {
				reachesEach(t, "after scale", url, workerPIDs(down))
			}
		})
	}
}

// TestNotServing: a worker that does not accept from its slot is seen: status shows it
// not-serving with why, instead of online, and says what to do; its counters are unknown,
// not 0. `supervisor run -- node app.js` with an app that binds a port of its own (the
// preload turned off), and a program that takes fd 3 and never accepts.
func TestNotServing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real servers")
	}
	dir, _ := filepath.Abs("testdata/node")
	own := freePort(t)
	for _, tc := range []struct {
		name    string
		need    string
		env     string
		command []string
		why     []string // in not_serving
	}{
		{"node app binding its own port", "node", fmt.Sprintf("{ONEHOST_NODE_PRELOAD: '0', PORT: '%s'}", own),
			[]string{"node", filepath.Join(dir, "plain.js")}, []string{"it listens on", ":" + own}},
		{"a program that never accepts", "python3", "{}",
			[]string{"python3", "-c", "import time\nwhile True: time.sleep(1)"}, []string{"has not accepted", "is idle"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proctest.Need(t, tc.need)
			c := startRun(t, fmt.Sprintf("instances: 1\nwait_ready: false\nstats_interval: 200ms\nenv: %s\n", tc.env),
				append([]string{"--"}, tc.command...)...)
			st, err := c.status()
			if err != nil {
				t.Fatal(err)
			}
			// Connections to the cluster's address wait in the slot's queue: nobody accepts them.
			for range 3 {
				conn, err := net.Dial("tcp", st.Addr)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
			}
			var w control.Status
			waitUntil(t, 30*time.Second, "worker shown not-serving", func() bool {
				w, err = c.status()
				return err == nil && len(w.Workers) == 1 && w.Workers[0].Status == "not-serving"
			})
			ns := w.Workers[0].NotServing
			for _, want := range append(tc.why, st.Addr) {
				if !strings.Contains(ns, want) {
					t.Errorf("not_serving = %q, want %q in it", ns, want)
				}
			}
			out, _ := c.cmd("status")
			if !strings.Contains(out, "not-serving") || !strings.Contains(out, "worker 0 not serving: ") {
				t.Errorf("status:\n%s\nwant the worker not-serving, and why", out)
			}
			// requests, req/s and conns: "-", not 0.
			for _, line := range strings.Split(out, "\n") {
				if f := strings.Fields(line); len(f) >= 10 && f[0] == "0" && (f[7] != "-" || f[8] != "-" || f[9] != "-") {
					t.Errorf("status row %q: want - for requests, req/s and conns", line)
				}
			}
			if l := c.logs.String(); !strings.Contains(l, "worker does not serve its slot") || !strings.Contains(l, "fd 3") {
				t.Errorf("no log line saying the worker does not serve its slot, and what to do:\n%s", l)
			}
		})
	}
}

// reachesEach fetches url on fresh connections until every pid of want has answered
// (the apps answer "pid N"), failing t on a failed request or a pid never reached.
func reachesEach(t *testing.T, what, url string, want []int) {
	t.Helper()
	seen := map[string]bool{}
	for i := 0; i < 200 && len(seen) < len(want); i++ {
		code, body, err := fetch(url, 5*time.Second)
		if err != nil || code != 200 {
			t.Fatalf("%s: GET %s: %d %q %v", what, url, code, body, err)
		}
		seen[strings.TrimSpace(body)] = true
	}
	for _, pid := range want {
		if !seen[fmt.Sprintf("pid %d", pid)] {
			t.Errorf("%s: fresh connections to %s reached %v, not worker %d (workers %v)", what, url, seen, pid, want)
		}
	}
}

// reloadUnderLoad reloads the cluster under load on url and returns its status once the
// generation before (st) has exited: every request answered, every worker online with a
// new pid.
func reloadUnderLoad(t *testing.T, c *runningCluster, url string, st control.Status) control.Status {
	t.Helper()
	load := clustertest.StartLoad(url, 4)
	time.Sleep(300 * time.Millisecond)
	if out, err := c.cmd("reload"); err != nil {
		t.Errorf("reload: %v %s", err, out)
	}
	// The load runs until the old generation has gone: its stop is under load too.
	waitUntil(t, 20*time.Second, "the old generation exited", func() bool {
		for _, pid := range workerPIDs(st) {
			if !processGone(pid) {
				return false
			}
		}
		return true
	})
	time.Sleep(300 * time.Millisecond)
	load.Finish(t)
	after, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range after.Workers {
		if slices.Contains(workerPIDs(st), w.PID) || w.Status != "online" {
			t.Errorf("worker after reload: %+v, want online with a new pid (before: %v)", w, workerPIDs(st))
		}
	}
	return after
}
