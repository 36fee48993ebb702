package cluster

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

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
func AcquireLock(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
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
