package main

// Node reloads that lose nothing, the counters the preload reports, and the host the app
// asks for (issue 36's points 2, 3 and 10): unmodified apps of testdata/node under the
// supervisor, a keep-alive load from the project's own generator (internal/loadgen, which
// never retries: a request that meets a closed connection is a failure, as it is to
// autocannon).

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/loadgen"
)

// TestNodeReloadKeepAlive reloads an unmodified app under keep-alive load: every request
// is answered (200), none meets a closed connection; the workers' requests and
// connections show in `status -json`.
func TestNodeReloadKeepAlive(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real servers")
	}
	for _, tc := range []struct {
		name, app string
		npm       bool
	}{
		{"fastify", "fastify-default.js", true},
		{"node:http", "plain.js", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := nodeApps(t, tc.npm)
			c := startRun(t, nodeAppConfig, "--", "node", filepath.Join(dir, tc.app))
			st, err := c.status()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type outcome struct {
				res *loadgen.Result
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := loadgen.Run(ctx, loadgen.Config{URL: "http://" + st.Addr + "/", Connections: 20, Duration: time.Minute})
				done <- outcome{res, err}
			}()
			time.Sleep(500 * time.Millisecond)
			if out, err := c.cmd("reload"); err != nil {
				t.Errorf("reload: %v %s", err, out)
			}
			waitUntil(t, 20*time.Second, "the old generation exited", func() bool {
				return !slices.ContainsFunc(workerPIDs(st), func(pid int) bool { return !processGone(pid) })
			})
			// The counters of the new generation, under load: requests and connections.
			var seen string
			waitUntil(t, 10*time.Second, "the new workers' counters in status -json", func() bool {
				now, err := c.status()
				if err != nil {
					return false
				}
				var reqs uint64
				var conns int64
				for _, w := range now.Workers {
					if w.NoCounters {
						return false
					}
					reqs += w.Requests
					conns += w.Connections
				}
				seen = fmt.Sprintf("%+v", now.Workers)
				return reqs > 0 && conns > 0
			})
			t.Logf("workers under load: %s", seen)
			time.Sleep(300 * time.Millisecond)
			cancel()
			o := <-done
			if o.err != nil {
				t.Fatalf("load: %v", o.err)
			}
			r := o.res
			t.Logf("load: %d responses, %d errors, status codes %v, %d reconnects", r.Responses, r.Errors, r.StatusCodes, r.Reconnects)
			if r.Errors != 0 {
				t.Errorf("%d requests failed across the reload under keep-alive load, want 0", r.Errors)
			}
			if r.Responses == 0 || r.StatusCodes[200] != r.Responses {
				t.Errorf("status codes %v of %d responses, want all 200", r.StatusCodes, r.Responses)
			}
		})
	}
}

// TestNodeHost runs apps on a slot's socket bound on every interface: an app that asks
// for localhost (Fastify's default) answers on loopback and not on the host's other
// address; one that asks for no host answers on both.
func TestNodeHost(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real servers")
	}
	other := nonLoopback(t)
	const config = "instances: 1\nwait_ready: false\nlisten_timeout: 6s\nkill_timeout: 5s\n"
	for _, tc := range []struct {
		name, app string
		npm       bool
		public    bool // answers on the other address
	}{
		{"fastify on localhost", "fastify-default.js", true, false},
		{"node:http on every interface", "plain.js", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := nodeApps(t, tc.npm)
			c := startRun(t, config, "-listen", "0.0.0.0:0", "--", "node", filepath.Join(dir, tc.app))
			st, err := c.status()
			if err != nil {
				t.Fatal(err)
			}
			_, port, err := net.SplitHostPort(st.Addr)
			if err != nil {
				t.Fatal(err)
			}
			if code, body, err := fetch("http://"+net.JoinHostPort("127.0.0.1", port)+"/", 5*time.Second); err != nil || code != 200 {
				t.Errorf("on loopback: %d %q %v, want 200", code, body, err)
			}
			code, body, err := fetch("http://"+net.JoinHostPort(other.String(), port)+"/", 5*time.Second)
			switch served := err == nil && code == 200; {
			case tc.public && !served:
				t.Errorf("on %s: %d %q %v, want 200", other, code, body, err)
			case !tc.public && err == nil:
				t.Errorf("on %s: %d %q, want no answer (the app asked for localhost)", other, code, body)
			}
			if said := strings.Contains(c.logs.String(), "the app listens on localhost but the slot's socket is bound on every interface"); said == tc.public {
				t.Errorf("the supervisor's warning about the host logged: %v, want %v", said, !tc.public)
			}
		})
	}
}

// nonLoopback returns an IPv4 address of this host that is not loopback, skipping t when
// there is none.
func nonLoopback(t *testing.T) netip.Addr {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() && !p.Addr().IsLinkLocalUnicast() {
			return p.Addr()
		}
	}
	t.Skip("SKIP: this host has no non-loopback IPv4 address to reach the app on")
	return netip.Addr{}
}
