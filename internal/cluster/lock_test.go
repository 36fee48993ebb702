package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLockRefusesPlanted: a lock path someone planted (a symlink to a victim's file, a
// file of another user, a hard link) is refused, and the file it names keeps its content:
// the supervisor once truncated a symlink's target and wrote its pid there.
func TestLockRefusesPlanted(t *testing.T) {
	cases := []struct {
		name   string
		plant  func(t *testing.T, lock, victim string)
		want   string
		asRoot bool // needs chown to another uid
	}{
		{name: "symlink", want: "symbolic link", plant: func(t *testing.T, lock, victim string) {
			if err := os.Symlink(victim, lock); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "dangling symlink", want: "symbolic link", plant: func(t *testing.T, lock, victim string) {
			if err := os.Symlink(victim+".new", lock); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "hard link", want: "hard links", plant: func(t *testing.T, lock, victim string) {
			if err := os.Link(victim, lock); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "another user's file", want: "belongs to uid 65534", asRoot: true, plant: func(t *testing.T, lock, victim string) {
			if err := os.WriteFile(lock, []byte("theirs\n"), 0o666); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(lock, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.asRoot && os.Geteuid() != 0 {
				t.Skip("needs root to give a file to uid 65534 (CI runs as root)")
			}
			dir := t.TempDir()
			victim := filepath.Join(dir, "victim")
			if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			lock := filepath.Join(dir, "supervisor.sock.lock")
			c.plant(t, lock, victim)
			before, _ := os.ReadFile(lock)
			l, err := AcquireLock(lock)
			if err == nil {
				l.Release()
				t.Fatal("AcquireLock took a planted lock file")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), lock) {
				t.Errorf("error %q: want it to name %s and say %q", err, lock, c.want)
			}
			if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
				t.Errorf("victim's file now holds %q", b)
			}
			if _, err := os.Stat(victim + ".new"); err == nil {
				t.Error("the dangling symlink's target was created")
			}
			if after, _ := os.ReadFile(lock); string(after) != string(before) {
				t.Errorf("lock file went from %q to %q", before, after)
			}
		})
	}
}
