package appspec

import (
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
