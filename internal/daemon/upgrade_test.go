package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/registry"
)

// TestUpgradeBinaryChecks: an upgrade executes this supervisor's own binary, or one that
// -upgrade-binary names, and only a file nobody but its owner (this user or root) can
// write, in a directory likewise; symbolic links are resolved once. A binary that passes
// every check of the path goes on to the next check, which fails here since the test is
// not `supervisor run`.
func TestUpgradeBinaryChecks(t *testing.T) {
	dir := t.TempDir()
	script := []byte("#!/bin/sh\necho 'usage: supervisor run'\n")
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, script, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	os.Chmod(dir, 0o755)
	own := mk("supervisor", 0o755)
	other := mk("supervisor-2", 0o755)
	groupWritable := mk("supervisor-gw", 0o775)
	notExec := mk("supervisor-nx", 0o644)
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	inOpen := filepath.Join(open, "supervisor")
	os.WriteFile(inOpen, script, 0o755)
	link := filepath.Join(dir, "current")
	os.Symlink(own, link)
	linkToGW := filepath.Join(dir, "current-gw")
	os.Symlink(groupWritable, linkToGW)

	const passed = "" // every check passed: the fake binary's run -check too
	tests := []struct {
		name    string
		allowed []string
		bin     string
		want    string
	}{
		{"its own path", nil, own, passed},
		{"a link to its own path", nil, link, passed},
		{"another path", nil, other, "start it with -upgrade-binary " + other},
		{"another path named by -upgrade-binary", []string{other}, other, passed},
		{"a group-writable file", []string{groupWritable}, groupWritable, "is writable by its group or by others (mode -rwxrwxr-x)"},
		{"a link allowed, to a group-writable file", []string{linkToGW}, linkToGW, groupWritable + " is writable by its group"},
		{"a file in an open directory", []string{inOpen}, inOpen, open + " is writable by its group or by others"},
		{"not executable", []string{notExec}, notExec, "is not an executable file"},
		{"relative", nil, "supervisor", "want an absolute path"},
		{"missing", []string{filepath.Join(dir, "nope")}, filepath.Join(dir, "nope"), "nope: no such file or directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := &upgrader{reg: emptyRegistry(t), defaultBinary: own, allowed: tc.allowed}
			_, err := u.check(tc.bin)
			switch {
			case tc.want == passed && err != nil:
				t.Errorf("check(%s) = %v, want it accepted", tc.bin, err)
			case tc.want != passed && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("check(%s) = %v, want an error with %q", tc.bin, err, tc.want)
			}
		})
	}
}

// emptyRegistry is a registry of no app.
func emptyRegistry(t *testing.T) *registry.Registry {
	t.Helper()
	reg, _, err := registry.New(nil, registry.Setup{})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestUpgradeCheckWhileStopping: the upgrade check (SIGUSR2's, in the main loop) runs over
// and over while the one app is stopped and started again under it. It once read the app's
// cluster twice, so a stop between the reads handed the second a nil cluster and the
// supervisor died of the panic; it now reads each app once, and every check ends in one of
// the check's own answers.
func TestUpgradeCheckWhileStopping(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	cfg := cluster.Config{Command: []string{"sleep", "60"}, ExecMode: cluster.ExecFork, Instances: 1, KillTimeout: cluster.Duration(time.Second)}
	reg, _, err := registry.New([]cluster.App{{Name: "api", Config: cfg}}, registry.Setup{Socket: filepath.Join(t.TempDir(), "s.sock")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := reg.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	defer reg.Kill()
	u := &upgrader{reg: reg, defaultBinary: "/bin/true"}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := reg.StopApp(ctx, "api"); err != nil {
				t.Errorf("stop: %v", err)
				return
			}
			if err := reg.StartApps(ctx, "api", false); err != nil {
				t.Errorf("start: %v", err)
				return
			}
		}
	})
	var refused, passed int
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		_, err := u.check("relative")
		switch {
		case err != nil && strings.Contains(err.Error(), "cannot rejoin"):
			refused++ // the app was running: sleep cannot rejoin
		case err != nil && strings.Contains(err.Error(), "want an absolute path"):
			passed++ // the app was stopped: on to the binary's checks
		default:
			t.Fatalf("check = %v", err)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d checks met the app running, %d stopped", refused, passed)
}
