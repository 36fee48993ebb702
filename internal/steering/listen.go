// Package steering decides which socket of a SO_REUSEPORT group receives each new
// connection. Without it the kernel hashes every connection's addresses over the group's
// sockets: lumpy over few connections (two connections on two sockets land on one socket
// half the time) and blind to which sockets have a live process behind them. Group loads
// an SK_REUSEPORT eBPF program that deals new connections round robin over a dense list of
// live sockets, which its owner keeps current, and that also moves a closing socket's
// queued connections to live ones. Listen makes the plain TCP listening sockets such a
// program can govern.
package steering

import (
	"context"
	"fmt"
	"net"
	"syscall"

	"github.com/libp2p/go-reuseport"
	"golang.org/x/sys/unix"
)

// Listen binds a SO_REUSEPORT listening socket on addr ("HOST:PORT", port 0 picks one) and
// returns it. The socket is plain TCP, chosen explicitly: since Go 1.24 a ListenConfig makes
// MPTCP listeners by default on Linux, which the kernel's reuseport maps refuse
// (EOPNOTSUPP) and which nobody here asked for. A listener that is not TCP after all
// (MPTCP forced through GODEBUG, say) is an error rather than a silent difference.
func Listen(ctx context.Context, addr string) (*net.TCPListener, error) {
	lc := net.ListenConfig{Control: reuseport.Control}
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	tl := ln.(*net.TCPListener)
	proto, err := Protocol(tl)
	if err != nil {
		tl.Close()
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if proto != unix.IPPROTO_TCP {
		tl.Close()
		return nil, fmt.Errorf("listen on %s: socket protocol is %d, not TCP (%d): is GODEBUG=multipathtcp set?", addr, proto, unix.IPPROTO_TCP)
	}
	return tl, nil
}

// Protocol reads a socket's SO_PROTOCOL: unix.IPPROTO_TCP, or unix.IPPROTO_MPTCP for the
// listeners Go makes by default.
func Protocol(c syscall.Conn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("read socket protocol: %w", err)
	}
	var proto int
	var serr error
	if err := rc.Control(func(fd uintptr) {
		proto, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PROTOCOL)
	}); err != nil {
		return 0, fmt.Errorf("read socket protocol: %w", err)
	}
	if serr != nil {
		return 0, fmt.Errorf("read socket protocol: %w", serr)
	}
	return proto, nil
}
