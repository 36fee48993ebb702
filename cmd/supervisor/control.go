// The control socket: who may connect, and the commands it serves.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/onehost/onehost/internal/applog"
	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/procstat"
)

// listenControl creates the control socket, mode 0600, replacing a stale one (we hold the
// lock, so no live supervisor owns it). It accepts only this user and root (see
// sameUserListener).
func listenControl(path string, log *zap.Logger) (net.Listener, error) {
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restrict control socket: %w", err)
	}
	return sameUserListener{ln.(*net.UnixListener), log}, nil
}

// sameUserListener accepts connections only from processes of the supervisor's own user
// or root, by their kernel-given credentials (SO_PEERCRED). Mode 0600 keeps other users
// out too, but only after the chmod that follows bind (the socket is born with the
// umask's mode), and only as long as nobody loosens it; the commands behind it stop and
// reshape the cluster, so they get a check that depends on neither.
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
		cred, err := peerCred(c)
		if err == nil && (cred.Uid == uint32(os.Geteuid()) || cred.Uid == 0) {
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
	cred unix.Ucred
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

// peerCred is the credentials (pid, uid, gid) of the process at the other end of c.
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("read peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, fmt.Errorf("read peer credentials: %w", err)
	}
	if cerr != nil {
		return nil, fmt.Errorf("read peer credentials: %w", cerr)
	}
	return cred, nil
}

// peerUID is the user id of the process at the other end of c.
func peerUID(c *net.UnixConn) (uint32, error) {
	cred, err := peerCred(c)
	if err != nil {
		return 0, err
	}
	return cred.Uid, nil
}

// workerPIDs are the pids of every app's workers now, by their status.
func (fl *fleet) workerPIDs() map[int]bool {
	pids := map[int]bool{}
	for _, a := range fl.apps {
		if sup := a.current(); sup != nil {
			for _, w := range sup.Status() {
				if w.PID > 0 {
					pids[w.PID] = true
				}
			}
		}
	}
	return pids
}

// workerLineage finds whether process pid is one of the supervisor's workers or a process
// one of them started, and returns that worker's pid (self's when pid descends from the
// supervisor by another way: any child of the supervisor is a worker, a shim or a check it
// runs), 0 when it is neither. A worker starts in a process group of its own (spawn.go's
// Setpgid), which its children share unless they leave it; one that left it (setsid) still
// has the worker among its ancestors, unless it also double-forked away, and an adopted
// worker is no child of this supervisor but is in the status. So each process from pid up
// to init is checked by its pid, its parent and its process group. read is
// procstat.ReadLineage in the supervisor (a table in the tests). Pid 0 is a peer outside
// the supervisor's pid namespace, which none of its descendants is. An unreadable process
// is an error: the caller refuses rather than guess.
func workerLineage(pid, self int, workers map[int]bool, read func(int) (procstat.Lineage, error)) (int, error) {
	if pid <= 0 || pid == self {
		return 0, nil
	}
	for p, hops := pid, 0; p > 1 && hops < 1<<16; hops++ {
		if workers[p] || (p == self && p != pid) {
			return p, nil
		}
		l, err := read(p)
		if err != nil {
			return 0, err
		}
		if workers[l.PGID] {
			return l.PGID, nil
		}
		p = l.PPID
	}
	return 0, nil
}

// operatorOnly refuses every command but the reads (GET: status, metrics, logs) to the
// supervisor's own workers and their children. The control socket takes any process of
// the supervisor's user, and those are of it; but a worker runs the application, the first
// thing an attacker takes, and reload, restart, scale, stop and above all upgrade (which
// re-executes a binary as the supervisor, with its capabilities) would hand it the whole
// cluster. A worker has its ipc channel for what it needs. Any method but GET and HEAD is
// checked, so a command added later is the operator's unless said otherwise.
func operatorOnly(fl *fleet, log *zap.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		cred, ok := r.Context().Value(peerKey{}).(unix.Ucred)
		if !ok { // not from the control socket's listener (tests of the handler alone)
			next.ServeHTTP(w, r)
			return
		}
		by, err := workerLineage(int(cred.Pid), os.Getpid(), fl.workerPIDs(), func(pid int) (procstat.Lineage, error) {
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
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		json.NewEncoder(w).Encode(control.ErrorReply{Error: msg})
	})
}

// controlHandler serves GET /status, GET /metrics, GET /logs, POST /reload, POST
// /restart, POST /scale?n=N|+N|-N, POST /upgrade?binary=PATH and POST /stop, each with
// ?app=NAME for one app (every app without) but metrics and upgrade, and POST /drain and
// POST /ready (the whole host: drain.go). The POSTs are refused to the supervisor's
// workers (operatorOnly).
func controlHandler(fl *fleet, log *zap.Logger, ring *applog.Ring, reg *prometheus.Registry, stop chan<- struct{}, up *upgrader) http.Handler {
	mux := http.NewServeMux()
	c := &controlAPI{fl: fl, log: log, ring: ring, stop: stop, up: up}
	mux.HandleFunc("GET /status", c.status)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /logs", c.logs)
	c.clusterRoutes(mux)
	mux.HandleFunc("POST /upgrade", c.upgrade)
	c.drainRoutes(mux)
	pm2Routes(mux, fl, reply, fail) // start APP, delete, flush, save, describe (pm2.go)
	mux.HandleFunc("POST /stop", c.stopRoute)
	return operatorOnly(fl, log, mux)
}

// controlAPI is what controlHandler's routes act on.
type controlAPI struct {
	fl   *fleet
	log  *zap.Logger
	ring *applog.Ring
	stop chan<- struct{}
	up   *upgrader
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// fail is the one place errors become statuses: a name the fleet lacks is 404, a stopped
// cluster 503, a bad argument 400 (ParseScale's, before this), the rest a conflict
// with what the cluster is doing (a reload aborted, a scale refused).
func fail(w http.ResponseWriter, err error) {
	code := http.StatusConflict
	switch {
	case errors.Is(err, errUnknownApp), errors.Is(err, errNoWorker):
		code = http.StatusNotFound
	case errors.Is(err, cluster.ErrStopped):
		code = http.StatusServiceUnavailable
	}
	reply(w, code, control.ErrorReply{Error: err.Error()})
}

func badRequest(w http.ResponseWriter, err error) {
	reply(w, http.StatusBadRequest, control.ErrorReply{Error: err.Error()})
}

func replyOK(w http.ResponseWriter) { reply(w, http.StatusOK, map[string]bool{"ok": true}) }

// replyNotes is a success with what the operator should know of it.
func replyNotes(w http.ResponseWriter, notes []string) {
	if notes == nil {
		replyOK(w)
		return
	}
	reply(w, http.StatusOK, control.Notes{OK: true, Notes: notes})
}

// status is GET /status.
func (c *controlAPI) status(w http.ResponseWriter, r *http.Request) {
	st, err := c.fl.status(r.URL.Query().Get("app"))
	if err != nil {
		fail(w, err)
		return
	}
	st.UpgradeError, _ = c.up.failed.Load().(string)
	st.Drained, st.Agent = c.fl.drained.Load(), c.fl.agentAddr
	reply(w, http.StatusOK, st)
}

// logs is GET /logs?n=15&app=A&slot=S&follow=1: the last n lines (of app A's slot S, or
// all), then, with follow, every new one as it is written, until the client goes.
func (c *controlAPI) logs(w http.ResponseWriter, r *http.Request) {
	fl := c.fl
	q := r.URL.Query()
	sel := applog.Filter{Slot: applog.AllSlots}
	n := 15
	if v := q.Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 0 {
			badRequest(w, fmt.Errorf("n: %q is not a count", v))
			return
		}
	}
	if v := q.Get("slot"); v != "" {
		var err error
		if sel.Slot, err = strconv.Atoi(v); err != nil || sel.Slot < 0 {
			badRequest(w, fmt.Errorf("slot: %q is not a slot number", v))
			return
		}
	}
	if v := q.Get("app"); v != "" && v != "all" && !fl.isLabel(v) {
		if _, err := fl.pick(v); err != nil {
			fail(w, err)
			return
		}
		sel.App = v
	}
	// The rest (logprint.go): &format=raw|json, &timestamp=FORMAT, &type=out|err,
	// &apps=1 (the apps' lines only); a slot no app has is an error.
	p, err := applog.ParseQuery(q, &sel)
	if err != nil {
		badRequest(w, err)
		return
	}
	if sel.Slot >= 0 {
		if err := fl.hasSlot(sel.App, sel.Slot); err != nil {
			fail(w, err)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	flush := func() {}
	if f, ok := w.(http.Flusher); ok {
		flush = f.Flush
	}
	c.ring.Follow(r.Context(), func(l applog.Line) { p.Print(w, w, l) }, flush, sel, n, q.Get("follow") == "1")
}

// clusterRoutes are POST /reload, /restart and /scale.
func (c *controlAPI) clusterRoutes(mux *http.ServeMux) {
	fl := c.fl
	mux.HandleFunc("POST /reload", func(w http.ResponseWriter, r *http.Request) {
		notes, err := fl.updateEnvIf(r) // ?update_env=1 (updateenv.go)
		if err != nil {
			fail(w, err)
			return
		}
		if err := fl.reload(r.Context(), r.URL.Query().Get("app")); err != nil {
			fail(w, err)
			return
		}
		replyNotes(w, notes)
	})
	mux.HandleFunc("POST /restart", func(w http.ResponseWriter, r *http.Request) {
		notes, err := fl.updateEnvIf(r) // ?update_env=1 (updateenv.go)
		if err != nil {
			fail(w, err)
			return
		}
		if err := fl.restart(r.Context(), r.URL.Query().Get("app")); err != nil {
			fail(w, err)
			return
		}
		replyNotes(w, notes)
	})
	mux.HandleFunc("POST /scale", func(w http.ResponseWriter, r *http.Request) {
		n, rel, err := cluster.ParseScale(r.URL.Query().Get("n"))
		if err != nil {
			badRequest(w, err)
			return
		}
		if err := fl.scale(r.Context(), r.URL.Query().Get("app"), n, rel); err != nil {
			fail(w, err)
			return
		}
		replyOK(w)
	})
}

// upgrade is POST /upgrade?binary=PATH: check the binary, then re-execute (upgrade.go).
// The answer comes before the exec: the new image's own status tells the rest.
func (c *controlAPI) upgrade(w http.ResponseWriter, r *http.Request) {
	up := c.up
	bin := r.URL.Query().Get("binary")
	if bin == "" {
		bin = up.defaultBinary
	}
	bin, err := up.check(bin)
	if err != nil {
		reply(w, http.StatusConflict, control.ErrorReply{Error: err.Error()})
		return
	}
	if !up.busy.CompareAndSwap(false, true) {
		reply(w, http.StatusConflict, control.ErrorReply{Error: "one is under way already"})
		return
	}
	up.failed.Store("") // the status speaks of this one from now on
	// The whole answer is out (a length, not chunks that the handler's return would
	// end) before the exec closes this connection.
	body, _ := json.Marshal(map[string]string{"binary": bin})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusAccepted)
	w.Write(body)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	up.req <- bin
}

// drainRoutes are POST /drain and /ready: the host out of its balancer and back
// (drain.go). The client (`supervisor drain`) then watches the request counters itself.
func (c *controlAPI) drainRoutes(mux *http.ServeMux) {
	for path, on := range map[string]bool{"POST /drain": true, "POST /ready": false} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if err := c.fl.setDrained(on); err != nil {
				fail(w, err)
				return
			}
			c.log.Info("host "+map[bool]string{true: "drained", false: "ready"}[on], zap.String("by", "control socket"))
			replyOK(w)
		})
	}
}

// stopRoute is POST /stop: one app, or every app with "all", stopped here, the
// supervisor running on (pm2 stop NAME, pm2 stop all); no app stops the supervisor (pm2
// kill).
func (c *controlAPI) stopRoute(w http.ResponseWriter, r *http.Request) {
	if name := r.URL.Query().Get("app"); name != "" {
		if err := c.fl.stopApp(r.Context(), name); err != nil {
			fail(w, err)
			return
		}
		replyOK(w)
		return
	}
	select {
	case c.stop <- struct{}{}:
	default:
	}
	reply(w, http.StatusAccepted, map[string]bool{"ok": true})
}
