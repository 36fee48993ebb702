package ipc

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// PeerCred is the kernel's record of who is at the other end of a unix socket
// (SO_PEERCRED): the process that connected, or that listened where we connected, as it
// was then, whatever the peer says of itself.
func PeerCred(c *net.UnixConn) (*syscall.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("read peer credentials: %w", err)
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, fmt.Errorf("read peer credentials: %w", err)
	}
	if cerr != nil {
		return nil, fmt.Errorf("read peer credentials: %w", cerr)
	}
	return cred, nil
}

// CheckPeer refuses a peer that is neither this process's effective user nor root: a
// socket path in a directory someone else could write to, or a path swapped under us,
// must not make us talk to (or hand a listening socket to) another user's process.
func CheckPeer(c *net.UnixConn) error {
	cred, err := PeerCred(c)
	if err != nil {
		return err
	}
	if !TrustedUID(cred.Uid) {
		return &PeerError{Addr: c.RemoteAddr().String(), PID: int(cred.Pid), UID: cred.Uid}
	}
	return nil
}

// TrustedUID reports whether uid may be our peer: this process's effective user, or root.
func TrustedUID(uid uint32) bool { return uid == uint32(os.Geteuid()) || uid == 0 }

// PeerError is CheckPeer's refusal.
type PeerError struct {
	Addr string // the socket's path as the peer bound it ("" when unnamed)
	PID  int
	UID  uint32
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("the process at %s (pid %d) belongs to uid %d, neither this user (uid %d) nor root: refused to talk to it",
		e.Addr, e.PID, e.UID, os.Geteuid())
}

// ListenPrivate listens on a unix socket at path that only this user (and root) may
// connect to from the moment it exists: the mode is set on the socket before bind (Linux
// gives the new file the socket's mode less the umask), not by a chmod of the path after
// it, which would follow a symlink swapped in between.
func ListenPrivate(path string) (*net.UnixListener, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close() // FileListener holds a duplicate
	if err := syscall.Fchmod(fd, 0o600); err != nil {
		return nil, fmt.Errorf("restrict %s: %w", path, err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := syscall.Listen(fd, syscall.SOMAXCONN); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln, err := net.FileListener(f)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(true) // as net.ListenUnix's: a clean stop leaves no path behind
	return ul, nil
}
