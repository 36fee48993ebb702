package appspec

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/onehost/onehost/internal/cluster"
)

// TestDefaultUnitName: named after the app, the file, or (PM2's ecosystem.config.js, the
// same in every project) the project's directory.
func TestDefaultUnitName(t *testing.T) {
	for _, tc := range []struct {
		name, cfg string
		apps      []string
		want      string
	}{
		{"our yaml", "/srv/shop/configs/cluster.yaml", []string{""}, "cluster"},
		{"one app", "/srv/shop/ecosystem.config.js", []string{"api"}, "api"},
		{"several apps", "/srv/shop/ecosystem.config.js", []string{"api", "jobs"}, "shop"},
		{"several apps, odd directory", "/srv/my shop!/ecosystem.json", []string{"api", "jobs"}, "my-shop-"},
		{"named file", "/srv/shop/apps.json", []string{"api", "jobs"}, "apps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var specs []cluster.App
			for _, n := range tc.apps {
				specs = append(specs, cluster.App{Name: n})
			}
			if got := defaultUnitName(tc.cfg, specs); got != tc.want {
				t.Errorf("defaultUnitName(%s, %v) = %q, want %q", tc.cfg, tc.apps, got, tc.want)
			}
		})
	}
}

// TestPlanUnitWarnsOnce: each path under the unit's private /tmp is warned of once (the
// app's directory, which is the unit's too, was said twice).
func TestPlanUnitWarnsOnce(t *testing.T) {
	dir := t.TempDir() // under /tmp
	cfg := filepath.Join(dir, "app.yaml")
	os.WriteFile(cfg, []byte("command: [/bin/sleep, \"60\"]\n"), 0o600)
	var warn bytes.Buffer
	if _, err := PlanUnit(UnitRequest{Config: cfg, Dir: dir, Name: "app", User: "root", Bin: "/usr/local/bin/supervisor",
		Getenv: func(string) string { return "/usr/bin:/bin" }, Warnings: &warn}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(warn.String()), "\n") {
		if seen[l] {
			t.Errorf("warned twice: %s", l)
		}
		seen[l] = true
	}
	if !strings.Contains(warn.String(), dir+" is under /tmp") {
		t.Errorf("no warning of %s under /tmp:\n%s", dir, &warn)
	}
}

// TestFleetConfigFile: a configuration with a fleet: section is read with its log node by
// startup, whose unit may write the node's directory, and as its own apps alone by the
// commands that name apps by their file (reload FILE). Both once failed: "no log node
// binary".
func TestFleetConfigFile(t *testing.T) {
	dir := t.TempDir()
	logDir := t.TempDir() // not under dir: ReadWritePaths= keeps no path under another
	cfg := filepath.Join(dir, "cluster.yaml")
	os.WriteFile(cfg, []byte("command: [/bin/sleep, \"60\"]\nfleet:\n  hosts: h1=10.0.0.1,h2=10.0.0.2,h3=10.0.0.3\n  self: h1\n  dir: "+logDir+"\n"), 0o600)
	specs, err := (Source{Path: cfg}).Load()
	if err != nil || len(specs) != 1 || specs[0].Name != "" {
		t.Fatalf("the file's own apps: %+v, %v; want its one app alone", specs, err)
	}
	var warn bytes.Buffer
	u, err := PlanUnit(UnitRequest{Config: cfg, Dir: dir, Name: "feed", User: "root", Bin: "/usr/local/bin/supervisor",
		Getenv: func(string) string { return "/usr/bin:/bin" }, Warnings: &warn})
	if err != nil {
		t.Fatalf("startup of a fleet host: %v", err)
	}
	if !slices.Contains(u.ReadWrite, logDir) {
		t.Errorf("ReadWritePaths %v, want the fleet's log directory %s among them", u.ReadWrite, logDir)
	}
}
