package appspec

import (
	"bytes"
	"os"
	"path/filepath"
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
