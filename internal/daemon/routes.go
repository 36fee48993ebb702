package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/applog"
	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/registry"
)

// controlHandler serves the control protocol's routes (internal/control names them), each
// with ?app=NAME for one app (every app without) where it acts on apps. Every answer says
// the protocol's version; the commands that change anything are refused to the
// supervisor's own workers (operatorOnly).
func (im *image) controlHandler() http.Handler {
	reg := im.reg
	mux := http.NewServeMux()
	app := func(r *http.Request) string { return r.URL.Query().Get("app") }
	mux.HandleFunc("GET "+control.PathStatus, func(w http.ResponseWriter, r *http.Request) {
		st, err := reg.Status(app(r))
		if err != nil {
			fail(w, err)
			return
		}
		st.UpgradeError, _ = im.up.failed.Load().(string)
		st.Config, st.Cwd = im.configPath, im.cwd
		st.Drained = reg.Drained()
		if im.ag != nil {
			st.Agent = im.ag.Addr().String()
			st.AgentAskers = im.ag.Askers()
		}
		reply(w, http.StatusOK, st)
	})
	mux.HandleFunc("GET "+control.PathDescribe, func(w http.ResponseWriter, r *http.Request) {
		d, err := reg.Describe(app(r))
		answer(w, d, err)
	})
	mux.Handle("GET "+control.PathMetrics, promhttp.HandlerFor(im.prom, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET "+control.PathLogs, im.logs)
	for path, roll := range map[string]func(w http.ResponseWriter, r *http.Request) error{
		control.PathReload:  func(w http.ResponseWriter, r *http.Request) error { return reg.Reload(r.Context(), app(r)) },
		control.PathRestart: func(w http.ResponseWriter, r *http.Request) error { return reg.Restart(r.Context(), app(r)) },
	} {
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) {
			var notes []string
			if r.URL.Query().Get("update_env") == "1" { // the file's env read again first
				var err error
				if notes, err = reg.UpdateEnv(app(r)); err != nil {
					fail(w, err)
					return
				}
			}
			if err := roll(w, r); err != nil {
				fail(w, err)
				return
			}
			reply(w, http.StatusOK, control.Notes{OK: true, Notes: notes})
		})
	}
	mux.HandleFunc("POST "+control.PathScale, func(w http.ResponseWriter, r *http.Request) {
		n, rel, err := cluster.ParseScale(r.URL.Query().Get("n"))
		if err != nil {
			badRequest(w, err)
			return
		}
		answer(w, ok, reg.Scale(r.Context(), app(r), n, rel))
	})
	mux.HandleFunc("POST "+control.PathStart, func(w http.ResponseWriter, r *http.Request) {
		answer(w, ok, reg.StartApps(r.Context(), app(r), r.URL.Query().Get("revive") == "1"))
	})
	mux.HandleFunc("POST "+control.PathDelete, func(w http.ResponseWriter, r *http.Request) { answer(w, ok, reg.Delete(r.Context(), app(r))) })
	mux.HandleFunc("POST "+control.PathFlush, func(w http.ResponseWriter, r *http.Request) {
		files, err := reg.Flush(app(r))
		answer(w, control.Flushed{Files: files}, err)
	})
	mux.HandleFunc("POST "+control.PathSave, func(w http.ResponseWriter, r *http.Request) {
		d, err := im.dump()
		answer(w, d, err)
	})
	mux.HandleFunc("POST "+control.PathUpgrade, im.upgradeRoute)
	for path, on := range map[string]bool{control.PathDrain: true, control.PathReady: false} {
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) {
			if err := reg.SetDrained(on); err != nil {
				fail(w, err)
				return
			}
			if !on && im.ag != nil {
				im.ag.SetReady() // every balancer told ready: whatever drained the host, the operator wants it back
			}
			im.log.Info("host "+map[bool]string{true: "drained", false: "ready"}[on], zap.String("by", "control socket"))
			reply(w, http.StatusOK, ok)
		})
	}
	// POST /stop: one app, or every app with "all", stopped here, the supervisor running on
	// (pm2 stop NAME, pm2 stop all); no app stops the supervisor (pm2 kill).
	mux.HandleFunc("POST "+control.PathStop, func(w http.ResponseWriter, r *http.Request) {
		if name := app(r); name != "" {
			answer(w, ok, reg.StopApp(r.Context(), name))
			return
		}
		select {
		case im.stopReq <- struct{}{}:
		default:
		}
		reply(w, http.StatusAccepted, ok)
	})
	versioned := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(control.VersionHeader, strconv.Itoa(control.Version))
		mux.ServeHTTP(w, r)
	})
	return operatorOnly(reg, im.log, versioned)
}

// ok is a success with nothing more to say.
var ok = map[string]bool{"ok": true}

// logs is GET /logs?n=15&app=A&slot=S&follow=1: the last n lines (of app A's slot S, or
// all), then, with follow, every new one as it is written, until the client goes.
func (im *image) logs(w http.ResponseWriter, r *http.Request) {
	reg := im.reg
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
	if v := q.Get("app"); v != "" && v != "all" && !reg.IsLabel(v) {
		if err := reg.Has(v); err != nil {
			fail(w, err)
			return
		}
		sel.App = v
	}
	// The rest (applog.ParseQuery): &format=raw|json, &timestamp=FORMAT, &type=out|err,
	// &apps=1 (the apps' lines only); a slot no app has is an error.
	p, err := applog.ParseQuery(q, &sel)
	if err != nil {
		badRequest(w, err)
		return
	}
	if sel.Slot >= 0 {
		if err := reg.HasSlot(sel.App, sel.Slot); err != nil {
			fail(w, err)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	flush := func() {}
	if f, ok := w.(http.Flusher); ok {
		flush = f.Flush
	}
	im.ring.Follow(r.Context(), func(l applog.Line) { p.Print(w, w, l) }, flush, sel, n, q.Get("follow") == "1")
}

// upgradeRoute is POST /upgrade?binary=PATH: check the binary, then re-execute
// (upgrade.go). The answer comes before the exec: the new image's own status tells the
// rest.
func (im *image) upgradeRoute(w http.ResponseWriter, r *http.Request) {
	up := im.up
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

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// answer replies v, or the error.
func answer(w http.ResponseWriter, v any, err error) {
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, http.StatusOK, v)
}

// fail is the one place errors become statuses: a name the registry lacks is 404, a
// stopped cluster 503, a bad argument 400 (ParseScale's, before this), the rest a conflict
// with what the cluster is doing (a reload aborted, a scale refused).
func fail(w http.ResponseWriter, err error) {
	code := http.StatusConflict
	switch {
	case errors.Is(err, registry.ErrUnknownApp), errors.Is(err, registry.ErrNoWorker):
		code = http.StatusNotFound
	case errors.Is(err, cluster.ErrStopped):
		code = http.StatusServiceUnavailable
	}
	reply(w, code, control.ErrorReply{Error: err.Error()})
}

func badRequest(w http.ResponseWriter, err error) {
	reply(w, http.StatusBadRequest, control.ErrorReply{Error: err.Error()})
}
