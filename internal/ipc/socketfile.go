package ipc

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// SocketFile duplicates a socket (a net.Listener or net.Conn) into a file to pass to
// another process, leaving the socket non-blocking.
//
// Why not the socket's File method: the os.File it returns switches the descriptor to
// blocking mode when its Fd method is called, and os/exec (ExtraFiles) and SCM_RIGHTS
// callers call it. O_NONBLOCK belongs to the open file description, which every duplicate
// and every process the socket was passed to share: one Fd call anywhere made the socket
// blocking under every worker serving it. A goroutine-per-connection server hardly notices
// (an accept ties up a thread); an event loop's accept then blocks its whole loop. A file
// made by os.NewFile from a non-blocking descriptor keeps it non-blocking through Fd.
func SocketFile(sock syscall.Conn, name string) (*os.File, error) {
	rc, err := sock.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("duplicate socket: %w", err)
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, fmt.Errorf("duplicate socket: %w", err)
	}
	if derr != nil {
		return nil, fmt.Errorf("duplicate socket: %w", derr)
	}
	return os.NewFile(uintptr(fd), name), nil
}
