package safepath

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// nobody is a uid that is neither root nor the test's user.
const nobody = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("gives a file to another uid: needs root (CI runs as root)")
	}
}

func TestCheckDir(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		root bool
		// make builds the tree under base and returns the directory to check.
		make func(t *testing.T, base string) string
		want string // "" for no error
	}{
		{name: "private directory", make: func(t *testing.T, base string) string {
			return mkdir(t, base, "a/b", 0o700)
		}},
		{name: "parent writable by others", want: "is writable by others and not sticky", make: func(t *testing.T, base string) string {
			p := mkdir(t, base, "open", 0o777)
			return mkdir(t, p, "mine", 0o700)
		}},
		{name: "parent group-writable, ours", want: "is writable by its group", make: func(t *testing.T, base string) string {
			if os.Geteuid() == 0 {
				t.Skip("root's own directories are root's: see the case below")
			}
			p := mkdir(t, base, "group", 0o770)
			return mkdir(t, p, "mine", 0o700)
		}},
		{name: "parent group-writable, root's (as Ubuntu's /var/log)", root: true, make: func(t *testing.T, base string) string {
			p := mkdir(t, base, "group", 0o775)
			return mkdir(t, p, "mine", 0o700)
		}},
		{name: "parent group-writable, another user's", root: true, want: "belongs to uid 65534", make: func(t *testing.T, base string) string {
			p := mkdir(t, base, "group", 0o770)
			d := mkdir(t, p, "mine", 0o700)
			chown(t, p)
			return d
		}},
		{name: "sticky parent writable by all (as /tmp)", make: func(t *testing.T, base string) string {
			p := mkdir(t, base, "sticky", 0o777|os.ModeSticky)
			return mkdir(t, p, "mine", 0o700)
		}},
		{name: "parent of another user", root: true, want: "belongs to uid 65534", make: func(t *testing.T, base string) string {
			p := mkdir(t, base, "theirs", 0o755)
			d := mkdir(t, p, "mine", 0o700)
			chown(t, p)
			return d
		}},
		{name: "the directory itself writable by others", want: "is writable by others", make: func(t *testing.T, base string) string {
			return mkdir(t, base, "open", 0o777)
		}},
		{name: "a link to a safe directory", make: func(t *testing.T, base string) string {
			d := mkdir(t, base, "real", 0o700)
			l := filepath.Join(base, "link")
			if err := os.Symlink(d, l); err != nil {
				t.Fatal(err)
			}
			return l
		}},
		{name: "a relative link into an unsafe directory", want: "is writable by others", make: func(t *testing.T, base string) string {
			p := mkdir(t, base, "open", 0o777)
			mkdir(t, p, "real", 0o700)
			l := filepath.Join(base, "link")
			if err := os.Symlink("open/real", l); err != nil {
				t.Fatal(err)
			}
			return l
		}},
		{name: "a link loop", want: "too many symbolic links", make: func(t *testing.T, base string) string {
			l := filepath.Join(base, "loop")
			if err := os.Symlink("loop", l); err != nil {
				t.Fatal(err)
			}
			return l
		}},
		{name: "a file", want: "not a directory", make: func(t *testing.T, base string) string {
			p := filepath.Join(base, "f")
			os.WriteFile(p, nil, 0o600)
			return p
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.root {
				needRoot(t)
			}
			dir := c.make(t, t.TempDir())
			err := CheckDir(dir)
			if c.want == "" {
				if err != nil {
					t.Fatalf("CheckDir(%s) = %v, want nil", dir, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("CheckDir(%s) = %v, want an error with %q", dir, err, c.want)
			}
		})
	}
}

// TestCheckDirError: the error names the directory and a fix that works.
func TestCheckDirError(t *testing.T) {
	base := t.TempDir()
	p := mkdir(t, base, "open", 0o777)
	d := mkdir(t, p, "mine", 0o700)
	err := CheckDir(d)
	var ue *UnsafeError
	if !errors.As(err, &ue) || ue.Dir != p {
		t.Fatalf("err = %v, want an UnsafeError for %s", err, p)
	}
	if !strings.Contains(err.Error(), "chmod go-w "+p) {
		t.Errorf("err = %v, want the chmod fix", err)
	}
}

func TestMkdirAll(t *testing.T) {
	base := t.TempDir()
	d := filepath.Join(base, "a", "b", "c")
	if err := MkdirAll(d); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("made %v, %v; want a 0700 directory", fi, err)
	}
	open := mkdir(t, base, "open", 0o777)
	under := filepath.Join(open, "x", "y")
	if err := MkdirAll(under); err == nil {
		t.Fatal("MkdirAll under a directory writable by others succeeded")
	}
	if _, err := os.Lstat(filepath.Join(open, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("made %s under the unsafe directory (%v): want nothing created", filepath.Join(open, "x"), err)
	}
}

func TestReadPrivate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		root bool
		make func(t *testing.T, path string)
		want string
	}{
		{name: "ours, 0600", make: func(t *testing.T, p string) { write(t, p, 0o600) }},
		{name: "ours, 0400", make: func(t *testing.T, p string) { write(t, p, 0o400) }},
		{name: "readable by others", want: "lets others read or change it", make: func(t *testing.T, p string) { write(t, p, 0o644) }},
		{name: "another user's", root: true, want: "belongs to uid 65534", make: func(t *testing.T, p string) {
			write(t, p, 0o600)
			chown(t, p)
		}},
		{name: "a symbolic link to ours", want: "is a symbolic link", make: func(t *testing.T, p string) {
			write(t, p+".real", 0o600)
			os.Symlink(p+".real", p)
		}},
		{name: "two links", want: "has 2 links", make: func(t *testing.T, p string) {
			write(t, p, 0o600)
			os.Link(p, p+".other")
		}},
		{name: "a fifo (read would block)", want: "not a regular file", make: func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "in a directory others write", want: "is writable by others", make: func(t *testing.T, p string) {
			write(t, p, 0o600)
			os.Chmod(filepath.Dir(p), 0o777)
		}},
		{name: "too large", want: "larger than", make: func(t *testing.T, p string) {
			os.WriteFile(p, make([]byte, 2000), 0o600)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.root {
				needRoot(t)
			}
			dir := mkdir(t, t.TempDir(), "d", 0o700)
			p := filepath.Join(dir, "dump.json")
			c.make(t, p)
			b, err := ReadPrivate(p, 1000)
			if c.want == "" {
				if err != nil || string(b) != "secret\n" {
					t.Fatalf("ReadPrivate = %q, %v; want the content", b, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ReadPrivate = %v, want an error with %q", err, c.want)
			}
		})
	}
}

// TestWritePrivatePlantedTemp: a file or link planted where a fixed temporary name would
// be (PATH.tmp) gets nothing written to it; the file is written whole, 0600.
func TestWritePrivatePlantedTemp(t *testing.T) {
	dir := mkdir(t, t.TempDir(), "shared", 0o777|os.ModeSticky)
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("precious\n"), 0o600)
	p := filepath.Join(dir, "dump.json")
	os.Symlink(victim, p+".tmp")
	os.WriteFile(filepath.Join(dir, ".dump.json.planted.tmp"), nil, 0o666)
	if err := WritePrivate(p, []byte("secret\n")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("victim = %q: written through the planted link", b)
	}
	b, err := ReadPrivate(p, 100)
	if err != nil || string(b) != "secret\n" {
		t.Fatalf("read back %q, %v", b, err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".dump.json.") && e.Name() != ".dump.json.planted.tmp" {
			t.Errorf("left %s behind", e.Name())
		}
	}
}

func TestWritePrivateUnsafeDir(t *testing.T) {
	dir := mkdir(t, t.TempDir(), "open", 0o777)
	p := filepath.Join(dir, "dump.json")
	if err := WritePrivate(p, []byte("secret\n")); err == nil {
		t.Fatal("wrote into a directory others write")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left %d entries", len(ents))
	}
}

func mkdir(t *testing.T, base, rel string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(base, rel)
	if err := os.MkdirAll(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func write(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, p string) {
	t.Helper()
	if err := os.Chown(p, nobody, nobody); err != nil {
		t.Fatal(err)
	}
}
