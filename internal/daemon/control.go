// The control socket: who may connect, and the commands it serves.

package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/procstat"
	"github.com/onehost/onehost/internal/registry"
)

// listenControl creates the control socket, mode 0600 from birth (ipc.ListenPrivate),
// replacing a stale one (we hold the lock, so no live supervisor owns it). It accepts only
// this user and root (see sameUserListener).
func listenControl(path string, log *zap.Logger) (net.Listener, error) {
	os.Remove(path)
	ln, err := ipc.ListenPrivate(path)
	if err != nil {
		return nil, fmt.Errorf("listen on control socket: %w", err)
	}
	return sameUserListener{ln, log}, nil
}

// sameUserListener accepts connections only from processes of the supervisor's own user
// or root, by their kernel-given credentials (SO_PEERCRED). Mode 0600 keeps other users
// out too, but only as long as nobody loosens it; the commands behind it stop and reshape
// the cluster, so they get a check that does not depend on it.
type sameUserListener struct {
	*net.UnixListener
	log *zap.Logger
}

func (l sameUserListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		cred, err := ipc.PeerCred(c)
		if err == nil && ipc.TrustedUID(cred.Uid) {
			return peerConn{c, *cred}, nil
		}
		var uid uint32
		if cred != nil {
			uid = cred.Uid
		}
		l.log.Warn("control socket: refused a connection from another user", zap.Uint32("uid", uid), zap.Error(err))
		c.Close()
	}
}

// peerConn is a control connection with its peer's credentials as the kernel gave them
// when it connected: controlConnContext hands them to the handlers, which refuse the
// commands that change anything to the supervisor's own workers (operatorOnly).
type peerConn struct {
	*net.UnixConn
	cred syscall.Ucred
}

type peerKey struct{}

// controlConnContext is the control server's ConnContext: the peer's credentials, for
// operatorOnly.
func controlConnContext(ctx context.Context, c net.Conn) context.Context {
	if pc, ok := c.(peerConn); ok {
		return context.WithValue(ctx, peerKey{}, pc.cred)
	}
	return ctx
}

// operatorOnly refuses every command but the reads (GET: status, metrics, logs) to the
// supervisor's own workers and their children. The control socket takes any process of
// the supervisor's user, and those are of it; but a worker runs the application, the first
// thing an attacker takes, and reload, restart, scale, stop and above all upgrade (which
// re-executes a binary as the supervisor, with its capabilities) would hand it the whole
// cluster. A worker has its ipc channel for what it needs. Any method but GET and HEAD is
// checked, so a command added later is the operator's unless said otherwise.
func operatorOnly(reg *registry.Registry, log *zap.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		cred, ok := r.Context().Value(peerKey{}).(syscall.Ucred)
		if !ok { // not from the control socket's listener (tests of the handler alone)
			next.ServeHTTP(w, r)
			return
		}
		by, err := registry.WorkerLineage(int(cred.Pid), os.Getpid(), reg.WorkerPIDs(), func(pid int) (procstat.Lineage, error) {
			return procstat.ReadLineage("", pid)
		})
		var msg string
		switch {
		case err != nil:
			msg = fmt.Sprintf("%s %s refused: cannot tell whether pid %d, which asked, is one of this supervisor's workers (%v): run it again", r.Method, r.URL.Path, cred.Pid, err)
		case by != 0:
			msg = fmt.Sprintf("%s %s refused: pid %d, which asked, is one of this supervisor's workers or a process one started (by pid %d); "+
				"the commands that change the cluster are the operator's, run from outside it (a worker's own channel to the supervisor is its ipc)", r.Method, r.URL.Path, cred.Pid, by)
		default:
			next.ServeHTTP(w, r)
			return
		}
		log.Warn("control socket: refused a command from a worker", zap.String("command", r.Method+" "+r.URL.Path),
			zap.Int32("pid", cred.Pid), zap.Int("worker", by), zap.Error(err))
		reply(w, http.StatusForbidden, control.ErrorReply{Error: msg})
	})
}
