package cli

import (
	"bytes"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindSocket: without -socket, and with no supervisor at the default socket, the
// commands use the one unit's socket (/run/NAME/supervisor.sock) they may trust, say so,
// and refuse to guess between several; a symlinked, shared or foreign one is not trusted.
func TestFindSocket(t *testing.T) {
	runDir := t.TempDir()
	listen := func(name string) string {
		os.Mkdir(filepath.Join(runDir, name), 0o700)
		p := filepath.Join(runDir, name, "supervisor.sock")
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		os.Chmod(p, 0o600)
		return p
	}
	// Not to be trusted: a directory others may write, a symbolic link, a file.
	shared := listen("shared")
	os.Chmod(filepath.Dir(shared), 0o777)
	os.Symlink(filepath.Join(runDir, "shared"), filepath.Join(runDir, "link"))
	os.Mkdir(filepath.Join(runDir, "file"), 0o700)
	os.WriteFile(filepath.Join(runDir, "file", "supervisor.sock"), nil, 0o600)
	find := func(args ...string) (string, string, error) {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		sock := fs.String("socket", filepath.Join(t.TempDir(), "onehost", "supervisor.sock"), "")
		fs.Parse(args)
		var stderr bytes.Buffer
		err := findSocket(fs, sock, Env{Stderr: &stderr, UnitRunDir: runDir})
		return *sock, stderr.String(), err
	}
	if got, _, err := find(); err != nil || !strings.HasPrefix(got, os.TempDir()) || strings.HasPrefix(got, runDir) {
		t.Errorf("no unit: %s, %v; want the default", got, err)
	}
	one := listen("shop")
	got, said, err := find()
	if err != nil || got != one || !strings.Contains(said, "using "+one+", the control socket of the unit shop") {
		t.Errorf("one unit: %s, %q, %v; want %s, said", got, said, err, one)
	}
	if got, said, err := find("-socket", "/elsewhere.sock"); err != nil || got != "/elsewhere.sock" || said != "" {
		t.Errorf("-socket given: %s, %q, %v; want it kept", got, said, err)
	}
	two := listen("api")
	if _, _, err := find(); err == nil || !strings.Contains(err.Error(), "2 units' supervisors run: "+two+", "+one) ||
		!strings.Contains(err.Error(), "choose one with -socket") {
		t.Errorf("two units: %v; want both listed", err)
	}
	os.RemoveAll(filepath.Dir(two))
}
