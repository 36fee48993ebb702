package applog

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLogRotation: a log file past its size moves to PATH.1 (older ones shift), at most
// keep old files stay, and no entry is split across two files.
func TestLogRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.log")
	l, err := OpenFile(path, Rotation{MaxSize: 100, Keep: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	line := strings.Repeat("x", 39) + "\n" // 40 bytes: two fit in 100, a third does not
	for i := range 7 {
		if _, err := l.Write([]byte(fmt.Sprintf("%d%s", i, line[1:]))); err != nil {
			t.Fatal(err)
		}
	}
	// 7 entries, 2 per file: 0-1, 2-3, 4-5 rotated (0-1 dropped, keep 2), 6 current.
	for name, want := range map[string]string{"": "6", ".1": "45", ".2": "23"} {
		b, err := os.ReadFile(path + name)
		if err != nil {
			t.Fatalf("%s%s: %v", path, name, err)
		}
		var firsts string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if len(l) != 39 {
				t.Errorf("%s%s: a split entry %q", path, name, l)
			}
			firsts += l[:1]
		}
		if firsts != want {
			t.Errorf("%s%s holds entries %q, want %q", path, name, firsts, want)
		}
	}
	if _, err := os.Stat(path + ".3"); err == nil {
		t.Error("a third old file kept with keep 2")
	}
}

// TestLogFilesPrivate: log files (the merged log, a slot's, and the fresh file after a
// rotation) are created mode 0600, whatever the umask lets through: they hold the
// application's output.
func TestLogFilesPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.log")
	l, err := OpenFile(path, Rotation{MaxSize: 10, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Write([]byte("0123456789\n"))
	l.Write([]byte("0123456789\n")) // rotates: path.1, and a new path
	for _, p := range []string{path, path + ".1"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("%s: mode %v, want 0600", p, got)
		}
	}
}

func TestLogFileReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cluster.log")
	l, err := OpenFile(path, Rotation{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	io.WriteString(l, "before\n")
	if err := os.Rename(path, path+".1"); err != nil { // what logrotate does
		t.Fatal(err)
	}
	io.WriteString(l, "still old\n")
	if err := l.Reopen(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(l, "after\n")
	old, _ := os.ReadFile(path + ".1")
	cur, _ := os.ReadFile(path)
	if string(old) != "before\nstill old\n" || string(cur) != "after\n" {
		t.Errorf("rotated file %q, new file %q; want %q and %q", old, cur, "before\nstill old\n", "after\n")
	}
}
