// Package safepath checks that the directories a program keeps its state in cannot be
// changed under it by another user, and reads and writes private files there safely.
//
// A directory that only root and this user can write is safe for everything below it:
// whatever is opened there by path stays what this program put there. Checking only the
// last directory is not enough: a user who can write one of its parents renames the
// checked directory away after the check and puts one of their own in its place, and
// every later open by path (a log reopened, a preload written, a dump read back) lands in
// theirs. So every directory from / down is checked, the way OpenSSH's StrictModes checks
// the path to authorized_keys: each one must belong to root or to this effective user, and
// must not be writable by others unless it is sticky (as /tmp is: there, only an entry's
// owner may rename or remove it); nor by its group, unless root owns it: a root directory
// writable by its group is root's delegation to an administrative group (Ubuntu's /var/log
// is root:syslog 0775, and systemd's LogsDirectory= puts a service's logs below it), which
// this package trusts as it trusts root. Symbolic links on the way are followed and their
// targets checked from / again; the link itself is safe when the directory it lies in is.
//
// Non-goals: defending against root, or against this same user (they can do anything the
// program can); other operating systems than Linux.
package safepath

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxLinks bounds the symbolic links followed in one path, as the kernel's ELOOP does.
const maxLinks = 40

// CheckDir returns nil when dir and every directory above it belong to root or this user
// and are writable by no one else (sticky directories and root's group excepted: see the
// package comment); else an error naming the first directory that is not, why, and the
// fix. dir must exist.
func CheckDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("check directory %s: %w", dir, err)
	}
	return walk(abs, 0)
}

// walk checks every directory of the absolute path p, p itself one too.
func walk(p string, links int) error {
	if links > maxLinks {
		return fmt.Errorf("check directory %s: too many symbolic links", p)
	}
	if err := checkOne("/"); err != nil {
		return err
	}
	parts := strings.Split(strings.Trim(filepath.Clean(p), "/"), "/")
	cur := "/"
	for i, part := range parts {
		if part == "" {
			continue
		}
		next := filepath.Join(cur, part)
		fi, err := os.Lstat(next)
		if err != nil {
			return fmt.Errorf("check directory %s: %w", next, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			// The link lies in cur, checked: only root or this user can replace it. Its
			// target is another path, checked from the top.
			target, err := os.Readlink(next)
			if err != nil {
				return fmt.Errorf("check directory %s: %w", next, err)
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			rest := filepath.Join(append([]string{target}, parts[i+1:]...)...)
			return walk(rest, links+1)
		}
		if !fi.IsDir() {
			return fmt.Errorf("check directory %s: not a directory", next)
		}
		if err := checkInfo(next, fi); err != nil {
			return err
		}
		cur = next
	}
	return nil
}

func checkOne(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("check directory %s: %w", dir, err)
	}
	return checkInfo(dir, fi)
}

// UnsafeError is a directory another user could change.
type UnsafeError struct {
	Dir  string
	UID  uint32
	Mode fs.FileMode
	// Why in words: "belongs to uid 1001" or "is writable by others".
	Why string
}

func (e *UnsafeError) Error() string {
	fix := fmt.Sprintf("choose a path under directories only root and uid %d can write", os.Geteuid())
	if e.UID == uint32(os.Geteuid()) || e.UID == 0 {
		fix = fmt.Sprintf("chmod go-w %s (or make it sticky: chmod +t %s), or %s", e.Dir, e.Dir, fix)
	}
	return fmt.Sprintf("directory %s %s (owner uid %d, mode %v): another user could replace what lies below it; %s",
		e.Dir, e.Why, e.UID, e.Mode, fix)
}

func checkInfo(dir string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("check directory %s: no owner known", dir)
	}
	me := uint32(os.Geteuid())
	switch {
	case st.Uid != 0 && st.Uid != me:
		return &UnsafeError{Dir: dir, UID: st.Uid, Mode: fi.Mode(), Why: fmt.Sprintf("belongs to uid %d", st.Uid)}
	case fi.Mode()&fs.ModeSticky != 0:
	case fi.Mode().Perm()&0o002 != 0:
		return &UnsafeError{Dir: dir, UID: st.Uid, Mode: fi.Mode(), Why: "is writable by others and not sticky"}
	case fi.Mode().Perm()&0o020 != 0 && st.Uid != 0:
		return &UnsafeError{Dir: dir, UID: st.Uid, Mode: fi.Mode(), Why: "is writable by its group and not sticky"}
	}
	return nil
}

// MkdirAll makes dir and its missing parents with mode 0700, once the directories that
// exist above them pass CheckDir (nothing is created under one that does not), and then
// checks the whole path.
func MkdirAll(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	existing := abs
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			break
		}
		existing = parent
	}
	if err := CheckDir(existing); err != nil {
		return err
	}
	if existing == abs {
		return nil // it exists, and the whole path was just checked
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	return CheckDir(abs)
}

// ReadPrivate reads a file this user wrote for itself alone, such as a dump that says what
// to start: its directory must pass CheckDir and the file must be a regular file (not a
// link: opened with O_NOFOLLOW), of this effective user, with no permission for group or
// others, and one link (a hard link to it elsewhere could be another user's to change
// later, in a directory they write). At most limit bytes are read.
func ReadPrivate(path string, limit int64) ([]byte, error) {
	if err := CheckDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("read %s: it is a symbolic link: a private file must be the file itself (remove the link)", path)
		}
		return nil, fmt.Errorf("read %s: %w", path, &fs.PathError{Op: "open", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	mode := fs.FileMode(st.Mode & 0o777)
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		return nil, fmt.Errorf("read %s: not a regular file", path)
	case st.Uid != uint32(os.Geteuid()):
		return nil, fmt.Errorf("read %s: it belongs to uid %d, not this user (uid %d): someone else may have written it; remove it",
			path, st.Uid, os.Geteuid())
	case mode&0o077 != 0:
		return nil, fmt.Errorf("read %s: mode %v lets others read or change it; want 0600 (chmod 600 %s if you wrote it)", path, mode, path)
	case st.Nlink != 1:
		return nil, fmt.Errorf("read %s: it has %d links: another name for it may lie where others can change it; copy it (cp) and read the copy", path, st.Nlink)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("read %s: larger than %d bytes", path, limit)
	}
	return b, nil
}

// WritePrivate writes data to path with mode 0600, whole or not at all: into a new file of
// a random name in the same directory (created exclusively, so nothing planted there is
// followed or reused), synced, then renamed over path. path's directory must pass
// CheckDir.
func WritePrivate(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := CheckDir(dir); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
