package main

// Ports as PM2 gives them: an unmodified Node app's listen on a port the configuration
// did not name (a hard-coded listen(8080), PORT set to another port in its environment) is
// served on that port, the supervisor binding it and handing it over as PM2's primary does.
// (`start`'s part: startport_test.go.)

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestNodeAppOwnPort: two workers of an app that listens on a port of its own, a
// hard-coded one (testdata/node/hard.js, its port in argv here, 8080 as users write it) or
// PORT set by its environment to another than the one served, are both served on that
// port, through a rolling reload under load that fails no request, and the slots' sockets
// there are the ones bound at start (a reload hands the same socket, and its queue, to
// the new generation). Status names the port. Before, each worker crash-looped with
// ONEHOST_PORT.
func TestNodeAppOwnPort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real servers")
	}
	dir := nodeApps(t, false)
	for _, tc := range []struct {
		name string
		env  func(port string) string // the config's env
		app  func(port string) []string
	}{
		{"hard-coded listen(PORT)", func(string) string { return "{}" },
			func(port string) []string { return []string{"node", filepath.Join(dir, "hard.js"), port} }},
		{"PORT in the app's environment", func(port string) string { return "{PORT: '" + port + "'}" },
			func(string) []string { return []string{"node", filepath.Join(dir, "plain.js")} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			port := freePort(t)
			c := startRun(t, nodeAppConfig+"env: "+tc.env(port)+"\n", append([]string{"--"}, tc.app(port)...)...)
			st, err := c.status()
			if err != nil {
				t.Fatal(err)
			}
			if want := "[::]:" + port; !slices.Contains(st.AppPorts, want) {
				t.Errorf("status app_ports = %q, want %s", st.AppPorts, want)
			}
			if out, _ := c.cmd("status"); !strings.Contains(out, "[::]:"+port+", as the app's own listen asked") {
				t.Errorf("status:\n%s\nwant the app's port named", out)
			}
			url := "http://127.0.0.1:" + port + "/"
			reachesEach(t, "after start", url, workerPIDs(st))

			after := reloadUnderLoad(t, c, url, st)
			reachesEach(t, "after reload", url, workerPIDs(after))
			if n := strings.Count(c.logs.String(), "bound a port the app's listen asked for"); n != 2 {
				t.Errorf("the app's port bound %d times, want 2 (once per slot, kept across the reload)", n)
			}
			if !strings.Contains(c.logs.String(), "-listen 0.0.0.0:"+port) {
				t.Errorf("log has no advice naming -listen 0.0.0.0:%s", port)
			}
		})
	}
}
