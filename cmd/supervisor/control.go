// The control socket: who may connect, and the commands it serves.

package main

import (
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

	"github.com/onehost/onehost/internal/cluster"
)

// statusReply is the body of GET /status and the output of `status -json`.
type statusReply struct {
	// Addr is the address served: the first cluster-mode app's when there are several
	// (each app's own is in Apps).
	Addr string `json:"addr"`
	// Steering is how new connections reach the workers: "bpf-rr" (round robin over the
	// online workers) or "hash" (the kernel's); the first cluster-mode app's.
	Steering string `json:"steering"`
	// Workers are every app's workers, each with its app's name (WorkerStatus.App).
	Workers []cluster.WorkerStatus `json:"workers"`
	// Apps are the configuration's apps in order, running or stopped, as `pm2 ls` lists
	// them.
	Apps []appStatus `json:"apps,omitempty"`
	// UpgradeError is why the last upgrade's new binary gave this one back (upgrade.go's
	// fallback); empty if none did.
	UpgradeError string `json:"upgrade_error,omitempty"`
}

type errorReply struct {
	Error string `json:"error"`
}

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
		uid, err := peerUID(c)
		if err == nil && (uid == uint32(os.Geteuid()) || uid == 0) {
			return c, nil
		}
		l.log.Warn("control socket: refused a connection from another user", zap.Uint32("uid", uid), zap.Error(err))
		c.Close()
	}
}

// peerUID is the user id of the process at the other end of c.
func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("read peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, fmt.Errorf("read peer credentials: %w", err)
	}
	if cerr != nil {
		return 0, fmt.Errorf("read peer credentials: %w", cerr)
	}
	return cred.Uid, nil
}

// controlHandler serves GET /status, GET /logs, POST /reload, POST /restart, POST
// /scale?n=N|+N|-N and POST /stop, each with ?app=NAME for one app (every app without).
func controlHandler(fl *fleet, log *zap.Logger, ring *logRing, reg *prometheus.Registry, stop chan<- struct{}, up *upgrader) http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(v)
	}
	// The one place errors become statuses: a name the fleet lacks is 404, a stopped
	// cluster 503, a bad argument 400 (ParseScale's, before this), the rest a conflict
	// with what the cluster is doing (a reload aborted, a scale refused).
	fail := func(w http.ResponseWriter, err error) {
		code := http.StatusConflict
		switch {
		case errors.Is(err, errUnknownApp):
			code = http.StatusNotFound
		case errors.Is(err, cluster.ErrStopped):
			code = http.StatusServiceUnavailable
		}
		reply(w, code, errorReply{err.Error()})
	}
	badRequest := func(w http.ResponseWriter, err error) { reply(w, http.StatusBadRequest, errorReply{err.Error()}) }
	ok := func(w http.ResponseWriter) { reply(w, http.StatusOK, map[string]bool{"ok": true}) }
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		st, err := fl.status(r.URL.Query().Get("app"))
		if err != nil {
			fail(w, err)
			return
		}
		st.UpgradeError, _ = up.failed.Load().(string)
		reply(w, http.StatusOK, st)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// GET /logs?n=15&app=A&slot=S&follow=1: the last n lines (of app A's slot S, or all),
	// then, with follow, every new one as it is written, until the client goes.
	mux.HandleFunc("GET /logs", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		sel := lineFilter{slot: -2}
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
			if sel.slot, err = strconv.Atoi(v); err != nil || sel.slot < 0 {
				badRequest(w, fmt.Errorf("slot: %q is not a slot number", v))
				return
			}
		}
		if v := q.Get("app"); v != "" && v != "all" {
			if _, err := fl.pick(v); err != nil {
				fail(w, err)
				return
			}
			sel.app = v
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		flush := func() {}
		if f, ok := w.(http.Flusher); ok {
			flush = f.Flush
		}
		ring.follow(r.Context(), w, flush, sel, n, q.Get("follow") == "1")
	})
	mux.HandleFunc("POST /reload", func(w http.ResponseWriter, r *http.Request) {
		if err := fl.reload(r.Context(), r.URL.Query().Get("app")); err != nil {
			fail(w, err)
			return
		}
		ok(w)
	})
	mux.HandleFunc("POST /restart", func(w http.ResponseWriter, r *http.Request) {
		if err := fl.restart(r.Context(), r.URL.Query().Get("app")); err != nil {
			fail(w, err)
			return
		}
		ok(w)
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
		ok(w)
	})
	// POST /upgrade?binary=PATH: check the binary, then re-execute (upgrade.go). The
	// answer comes before the exec: the new image's own status tells the rest.
	mux.HandleFunc("POST /upgrade", func(w http.ResponseWriter, r *http.Request) {
		bin := r.URL.Query().Get("binary")
		if bin == "" {
			bin = up.defaultBinary
		}
		if err := up.check(bin); err != nil {
			reply(w, http.StatusConflict, errorReply{err.Error()})
			return
		}
		if !up.busy.CompareAndSwap(false, true) {
			reply(w, http.StatusConflict, errorReply{"one is under way already"})
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
	})
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, r *http.Request) {
		if name := r.URL.Query().Get("app"); name != "" && name != "all" {
			// One app: stopped here, the others serve on (pm2 stop NAME).
			if err := fl.stopApp(r.Context(), name); err != nil {
				fail(w, err)
				return
			}
			ok(w)
			return
		}
		select {
		case stop <- struct{}{}:
		default:
		}
		reply(w, http.StatusAccepted, map[string]bool{"ok": true})
	})
	return mux
}
