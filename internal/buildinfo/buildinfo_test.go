package buildinfo

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings []debug.BuildSetting
		want     string
	}{
		{"no vcs", nil, "x example.com/m (devel), revision unknown (built without VCS stamping), go1.99"},
		{"clean", []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-12-05T05:00:00Z"}, {Key: "vcs.modified", Value: "false"}},
			"x example.com/m (devel), revision 0123456789ab (2026-12-05T05:00:00Z), go1.99"},
		{"modified", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}},
			"x example.com/m (devel), revision abc, modified, go1.99"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bi := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Path: "example.com/m", Version: "(devel)"}, Settings: tc.settings}
			if got := format("x", bi); got != tc.want {
				t.Errorf("format = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestBinaries builds every command once and checks that each answers -h with exit
// status 0 and its subcommands listed, and --version and version with its module line.
func TestBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every binary")
	}
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+"/", "github.com/onehost/onehost/cmd/...", "github.com/onehost/onehost/bench/autocannon").CombinedOutput()
	if err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string // in the output
	}{
		{"supervisor -h", []string{"supervisor", "-h"}, []string{"supervisor run", "supervisor start", "supervisor kill", "supervisor jlist", "supervisor resurrect"}},
		{"supervisor run -h", []string{"supervisor", "run", "-h"}, []string{"-share-port"}},
		{"supervisor start -h", []string{"supervisor", "start", "-h"}, []string{"supervisor start APP"}},
		{"worker -h", []string{"worker", "-h"}, []string{"worker seed", "worker seed-products", "-port"}},
		{"worker seed -h", []string{"worker", "seed", "-h"}, []string{"-db"}},
		{"ceiling -h", []string{"ceiling", "-h"}, []string{"ceiling sweep", "ceiling fleet", "ceiling model"}},
		{"ceiling sweep -h", []string{"ceiling", "sweep", "-h"}, []string{"-modes"}},
		{"ceiling model -h", []string{"ceiling", "model", "-h"}, []string{"-cores"}},
		{"autocannon -h", []string{"autocannon", "-h"}, []string{"autocannon users", "autocannon merge"}},
		{"autocannon users -h", []string{"autocannon", "users", "-h"}, []string{"Usage"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exec.Command(filepath.Join(dir, tc.args[0]), tc.args[1:]...).CombinedOutput()
			if err != nil {
				t.Errorf("%v: %v, want exit status 0\n%s", tc.args, err, out)
			}
			for _, w := range tc.want {
				if !bytes.Contains(out, []byte(w)) {
					t.Errorf("%v: no %q in:\n%s", tc.args, w, out)
				}
			}
		})
	}
	for _, bin := range []string{"supervisor", "worker", "ceiling", "autocannon"} {
		for _, arg := range []string{"--version", "version"} {
			t.Run(bin+" "+arg, func(t *testing.T) {
				out, err := exec.Command(filepath.Join(dir, bin), arg).Output()
				want := bin + " github.com/onehost/onehost "
				if err != nil || !strings.HasPrefix(string(out), want) || strings.Count(string(out), "\n") != 1 {
					t.Errorf("%s %s = %q, %v; want one line beginning %q", bin, arg, out, err, want)
				}
			})
		}
	}
}
