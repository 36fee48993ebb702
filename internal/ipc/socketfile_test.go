package ipc

import (
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSocketFileStaysNonblocking: a socket passed on as SocketFile's file (to a child by
// os/exec, and through Fd, as SCM_RIGHTS callers do) stays non-blocking for everyone
// serving it; the socket's own File, passed the same way, does not (why SocketFile exists).
func TestSocketFileStaysNonblocking(t *testing.T) {
	tests := []struct {
		name            string
		file            func(ln *net.TCPListener) (*os.File, error)
		wantNonblocking bool
	}{
		{"SocketFile", func(ln *net.TCPListener) (*os.File, error) { return SocketFile(ln, "listener") }, true},
		{"the listener's File", (*net.TCPListener).File, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			f, err := tt.file(ln)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cmd := exec.Command("/bin/true")
			cmd.ExtraFiles = []*os.File{f}
			if err := cmd.Run(); err != nil {
				t.Skipf("run /bin/true: %v", err)
			}
			syscall.UnixRights(int(f.Fd()))
			rc, err := ln.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var fl int
			rc.Control(func(fd uintptr) { fl, _ = unix.FcntlInt(fd, unix.F_GETFL, 0) })
			if got := fl&unix.O_NONBLOCK != 0; got != tt.wantNonblocking {
				t.Errorf("after passing it on, the listener is non-blocking: %v, want %v", got, tt.wantNonblocking)
			}
		})
	}
}
