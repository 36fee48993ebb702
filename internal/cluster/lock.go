package cluster

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Lock is the single-instance lock of a supervisor's state directory: with SO_REUSEPORT a
// second supervisor would not fail to bind, it would silently take a share of the
// connections, so it must be refused before it binds anything.
type Lock struct{ f *os.File }

// LockedError says another supervisor holds the lock.
type LockedError struct {
	Path string
	PID  int // 0 when the holder's pid could not be read
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("another supervisor (pid %d) is running: it holds %s", e.PID, e.Path)
}

// AcquireLock takes an exclusive flock on path (created 0600) and writes this process's
// pid into it. The kernel drops the lock when the process dies, however it dies.
//
// The path is not followed if it is a symlink (O_NOFOLLOW), and a file that is not a
// plain file of this user's with one name (a hard link to someone's file) is refused
// before anything is written: else whoever could plant the name would have us truncate a
// file of their choosing and write our pid into it.
func AcquireLock(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("open lock file: %s is a symbolic link: remove it (someone may have planted it) and start again", path)
		}
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		f.Close()
		return nil, fmt.Errorf("lock file %s is not a plain file: remove it and start again", path)
	case st.Uid != uint32(os.Geteuid()):
		f.Close()
		return nil, fmt.Errorf("lock file %s belongs to uid %d, not this user (uid %d): remove it (someone may have planted it) and start again", path, st.Uid, os.Geteuid())
	case st.Nlink != 1:
		f.Close()
		return nil, fmt.Errorf("lock file %s has %d names (hard links): remove it and start again", path, st.Nlink)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
			return nil, &LockedError{Path: path, PID: pid}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write lock file: %w", err)
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write lock file: %w", err)
	}
	return &Lock{f: f}, nil
}

// Release drops the lock.
func (l *Lock) Release() error { return l.f.Close() }
