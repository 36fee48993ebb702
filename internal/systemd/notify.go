package systemd

// The service notification protocol (sd_notify(3)): one datagram of newline-separated
// VARIABLE=VALUE assignments ("READY=1", "STATUS=...", "WATCHDOG=1") per notification,
// sent to the unix datagram socket that NOTIFY_SOCKET names. Under a Type=notify unit,
// systemd learns from them when the service is ready, reloading or stopping, shows
// STATUS= in `systemctl status`, and restarts a service whose WATCHDOG=1 stops arriving
// within WatchdogSec=.

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Notifier sends notifications to one socket. A nil *Notifier sends nothing, so callers
// need not care whether they run under systemd.
type Notifier struct {
	conn *net.UnixConn
}

// NewNotifier connects to the socket NOTIFY_SOCKET names: an absolute path, or an abstract name
// starting with '@'. An empty name returns a nil Notifier and no error: not under systemd.
func NewNotifier(socket string) (*Notifier, error) {
	if socket == "" {
		return nil, nil
	}
	if socket[0] != '/' && socket[0] != '@' {
		return nil, fmt.Errorf("notify socket %q: want an absolute path or an @abstract name (vsock is not supported)", socket)
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("connect to notify socket %s: %w", socket, err)
	}
	return &Notifier{conn: c}, nil
}

// Notify sends one notification: state is one or more VARIABLE=VALUE lines.
func (n *Notifier) Notify(state string) error {
	if n == nil {
		return nil
	}
	if _, err := n.conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("notify systemd: %w", err)
	}
	return nil
}

// NotifyFiles sends one notification with descriptors attached (SCM_RIGHTS): what
// FDSTORE=1 hands to systemd's file descriptor store.
func (n *Notifier) NotifyFiles(state string, files ...*os.File) error {
	if n == nil {
		return nil
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	// sendmsg on the raw socket: package net refuses WriteMsgUnix on a connected datagram
	// socket (ErrWriteToConnected), and the notify socket is one.
	rc, err := n.conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("notify systemd: %w", err)
	}
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), []byte(state), unix.UnixRights(fds...), nil, 0)
		return serr != unix.EAGAIN
	}); err != nil {
		return fmt.Errorf("notify systemd: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("notify systemd: %w", serr)
	}
	return nil
}

// Close closes the socket.
func (n *Notifier) Close() error {
	if n == nil {
		return nil
	}
	return n.conn.Close()
}

// Reloading is the notification that a reload starts. systemd ≥ 253 wants the monotonic
// clock with it (to tell this reload from an earlier one), older ones ignore it.
func Reloading() string {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return "RELOADING=1\nMONOTONIC_USEC=" + strconv.FormatInt(ts.Nano()/1000, 10)
}

// Status is a STATUS= line: what `systemctl status` shows. Newlines would end it early.
func Status(s string) string {
	return "STATUS=" + strings.ReplaceAll(s, "\n", " ")
}

// Watchdog reads WATCHDOG_USEC and WATCHDOG_PID as systemd sets them and returns how often
// to send WATCHDOG=1: half the timeout, as sd_watchdog_enabled(3) advises; 0 when no
// watchdog is asked of this process (no timeout, or one meant for another pid).
func Watchdog(usec, pid string, self int) (time.Duration, error) {
	if usec == "" {
		return 0, nil
	}
	if pid != "" {
		p, err := strconv.Atoi(pid)
		if err != nil {
			return 0, fmt.Errorf("WATCHDOG_PID %q: not a pid", pid)
		}
		if p != self {
			return 0, nil
		}
	}
	us, err := strconv.ParseUint(usec, 10, 63)
	if err != nil || us == 0 {
		return 0, fmt.Errorf("WATCHDOG_USEC %q: want a positive number of microseconds", usec)
	}
	return time.Duration(us) * time.Microsecond / 2, nil
}
