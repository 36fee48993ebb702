package owner

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// elect binds the name (and owns the key) or connects to whoever has bound it.
func (n *Node) elect() (*net.UnixListener, *link, error) {
	n.elections.Add(1)
	addr := &net.UnixAddr{Name: "@" + n.cfg.Key, Net: "unix"}
	var lastErr error
	for attempt := range 100 {
		if attempt > 0 {
			// The owner has just gone (connect refused) or is between bind and listen:
			// another process is about to win. Wait a little and try again.
			select {
			case <-n.quit:
				return nil, nil, ErrNoOwner
			case <-time.After(time.Duration(attempt) * 200 * time.Microsecond):
			}
		}
		ln, err := net.ListenUnix("unix", addr)
		if err == nil {
			return ln, nil, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, nil, fmt.Errorf("bind %s: %w", addr.Name, err)
		}
		c, err := net.DialUnix("unix", nil, addr)
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EAGAIN) {
				lastErr = err
				continue
			}
			return nil, nil, fmt.Errorf("connect to the owner at %s: %w", addr.Name, err)
		}
		pid, err := trustedPeer(c)
		if err != nil {
			c.Close()
			return nil, nil, fmt.Errorf("connect to the owner at %s: %w", addr.Name, err)
		}
		// Wait for the owner's hello: a connection completes in the listener's backlog
		// even when the owner is dying (its peers' sockets may close before its listener)
		// or stopped, and a request sent there would be lost as undecided, though never
		// read. After the hello, the owner has accepted: it reads what is sent.
		br := bufio.NewReaderSize(c, headerLen+MaxPayload)
		c.SetReadDeadline(time.Now().Add(helloTimeout))
		kind, _, _, err := readFrame(br)
		c.SetReadDeadline(time.Time{})
		if err != nil || kind != kindHello {
			c.Close()
			if err == nil {
				err = fmt.Errorf("first frame %q, want a hello", kind)
			}
			lastErr = fmt.Errorf("owner pid %d did not greet: %w", pid, err)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil, nil, lastErr // stopped or hung: try again later, write here meanwhile
			}
			continue
		}
		return nil, n.newLink(c, br, pid), nil
	}
	return nil, nil, fmt.Errorf("elect an owner of %s: no process could bind the name or be reached: %w", addr.Name, lastErr)
}

// trustedPeer returns the pid of the process at the other end of c, and an error unless it
// runs as this process's user or as root (SO_PEERCRED: given by the kernel, not the peer).
func trustedPeer(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("read peer credentials: %w", cerr)
	}
	if me := os.Geteuid(); int(cred.Uid) != me && cred.Uid != 0 {
		return int(cred.Pid), fmt.Errorf("peer pid %d runs as uid %d, not %d: refused", cred.Pid, cred.Uid, me)
	}
	return int(cred.Pid), nil
}

// run is the node's manager: it serves as owner, or follows until the owner goes away and
// elects again, until Close.
func (n *Node) run(ln *net.UnixListener, l *link) {
	defer close(n.runDone)
	for {
		switch {
		case ln != nil:
			n.accept(ln) // until Close
			return
		case l != nil:
			select {
			case <-l.gone:
				n.link.CompareAndSwap(l, nil)
				n.role.Store(RoleNone)
				n.ownerPID.Store(0)
				n.log.Info("write owner: gone, electing again", zap.Int("owner_pid", l.pid), zap.String("why", l.why()))
				if n.cfg.OnRole != nil {
					n.cfg.OnRole(RoleNone)
				}
			case <-n.quit:
				return
			}
		default: // Join's election failed
			select {
			case <-n.quit:
				return
			case <-time.After(time.Second):
			}
		}
		for failures := 0; ; failures++ {
			var err error
			ln, l, err = n.elect()
			if err == nil && n.adopt(ln, l) {
				break
			}
			if err == nil || errors.Is(err, ErrNoOwner) { // closing
				return
			}
			lvl := zap.WarnLevel
			if failures > 0 {
				lvl = zap.DebugLevel // said once; a hung owner would repeat it every second
			}
			n.log.Log(lvl, "write owner election failed: this process writes itself; trying again in 1s", zap.Error(err))
			select {
			case <-n.quit:
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// adopt takes the role an election gave: the listener of an owner or the link of a
// follower. It returns false, and closes what it was given, when the node is closing.
func (n *Node) adopt(ln *net.UnixListener, l *link) bool {
	n.mu.Lock()
	if n.closing {
		n.mu.Unlock()
		if ln != nil {
			ln.Close()
		}
		if l != nil {
			l.abort()
		}
		return false
	}
	role := RoleFollower
	if ln != nil {
		role = RoleOwner
		n.ln = ln
		n.ownerPID.Store(int64(os.Getpid()))
		n.role.Store(RoleOwner)
		n.log.Info("write owner: this process", zap.String("key", n.cfg.Key))
	} else {
		n.link.Store(l)
		n.ownerPID.Store(int64(l.pid))
		n.role.Store(RoleFollower)
		n.log.Info("write owner: following", zap.Int("owner_pid", l.pid), zap.String("key", n.cfg.Key))
	}
	n.mu.Unlock()
	if n.cfg.OnRole != nil {
		n.cfg.OnRole(role)
	}
	return true
}
