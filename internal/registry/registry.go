// Package registry is the supervisor's apps: one cluster (internal/cluster) per app of the
// configuration, as PM2 keeps one process list entry per app, and what the control
// commands do to them by name (start, stop, reload, scale, delete, flush, update-env), what
// the status shows of them, and the host's state behind a balancer (drained, stopping).
//
// What changes at run time has one owner each: an app's cluster and its deleted mark are
// under its mutex; its configuration is a snapshot replaced whole (reload -update-env), so
// that readers (status, metrics, the agent) need no lock; the registry's own list of apps
// is fixed at New. Stops, restarts of stopped apps and env updates go one at a time (ops).
//
// Files: registry.go the apps and their lookup; ops.go the commands; status.go what the
// status, describe, logs and the agent read; updateenv.go reload -update-env; held.go what
// survives an upgrade (the apps left stopped or deleted) and the dump of `save`.
package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/onehost/onehost/internal/applog"
	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// app is one app of the configuration, as PM2 keeps one per entry of an ecosystem file's
// apps: its own cluster (slots, port, restarts, logs). A configuration of ours, or a
// command line, is one app without a name.
type app struct {
	name string // "" for the one app of a configuration without names
	// cfg is the app's configuration: a snapshot never written once stored, replaced whole
	// by reload --update-env (updateenv.go), so that readers (status, metrics, the agent,
	// describe) need no lock and see one configuration or the next, never half of each.
	cfg atomic.Pointer[cluster.Config]
	opt cluster.Options
	log *zap.Logger

	mu      sync.Mutex
	sup     *cluster.Supervisor // nil while stopped (`supervisor stop APP`)
	deleted bool                // `supervisor delete APP`: in no list any more (pm2.go)
	outFile *applog.File        // its own out_file with several apps; nil if none (flush)
	// logName names its slots' files in -log-dir: NAME-SLOT.log (logName).
	logName string
	// restarts are each slot's restarts before the app was last stopped (under mu): the
	// status adds them to the running cluster's, so `stop` then `start` loses no count.
	restarts map[int]int
}

// current returns the app's running cluster, nil when it is stopped.
func (a *app) current() *cluster.Supervisor {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sup
}

// config is the app's configuration now. It must not be written to: setEnv replaces it.
func (a *app) config() *cluster.Config { return a.cfg.Load() }

// setEnv replaces the configuration with one whose env is env.
func (a *app) setEnv(env map[string]string) {
	next := *a.cfg.Load()
	next.Env = env
	a.cfg.Store(&next)
}

// mode is the app's exec mode as PM2 shows it.
func (a *app) mode() string {
	if a.config().Fork() {
		return cluster.ExecFork
	}
	return cluster.ExecCluster
}

// Registry is the supervisor's apps, in the configuration's order. Each app's cluster is
// independent: a reload, restart, scale or stop of one leaves the others alone, and a
// crash restarts only the crashed worker of its app.
type Registry struct {
	apps  []*app
	setup Setup
	ctx   context.Context // the clusters' lifetime (Start's ctx); set by Start, before the control socket serves
	ops   sync.Mutex      // one stop or restart of a stopped app at a time

	// The host behind a balancer: drained by `supervisor drain`, stopping once the
	// supervisor began to stop.
	drained, stopping atomic.Bool
}

// launch starts the app's cluster (its workers come online on their own).
func (a *app) launch(ctx context.Context) error {
	sup, err := cluster.New(*a.config(), a.opt)
	if err != nil {
		return err
	}
	if err := sup.Start(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	a.sup = sup
	a.mu.Unlock()
	return nil
}

// Setup is what the apps' clusters share, and what the registry's commands reach beyond
// the clusters. The zero value runs apps without logs of their own, systemd or a file to
// read again.
type Setup struct {
	// Options are every app's cluster's (its Name, Logger, Notify, Output and the rest set
	// here per app), the supervisor's logger the one each app's derives from.
	Options cluster.Options
	// NewCore makes a log core of the supervisor's format and level writing to a file: an
	// app's own out_file, with several apps. Needed when a spec has LogFile.
	NewCore  func(zapcore.WriteSyncer) zapcore.Core
	Rotation applog.Rotation
	// MainLog is the supervisor's own log file (-log-file), WorkerLogs the per-slot files
	// (-log-dir): flush empties them. nil: none.
	MainLog    *applog.File
	WorkerLogs *applog.WorkerLogs
	// Output is where the apps' lines go; nil: into the log.
	Output *applog.Output
	// Socket is the control socket, beside which the rendezvous sockets live.
	Socket string
	// Inherited returns the sockets systemd kept for app's slots across a restart (nil:
	// none); multi says the configuration has several apps.
	Inherited func(app string, multi bool) map[int]*os.File
	// SocketStore returns what hands app's slot sockets to systemd's store (nil: no
	// store); fork apps have none.
	SocketStore func(app string, multi bool, log *zap.Logger) func(slot int, f *os.File)
	// Reread reads the configuration file again as at start (-env, -only and the command
	// line's overrides applied), for `reload -update-env`; nil when the supervisor runs no
	// file.
	Reread func() ([]cluster.App, error)
}

// New makes one app per spec, each with its own logger (its name on every line),
// per-worker files and, with several apps, its own out_file beside the merged log (returned
// for the caller to reopen and close, even with an error).
func New(specs []cluster.App, fs Setup) (*Registry, []*applog.File, error) {
	if fs.Options.Logger == nil {
		fs.Options.Logger = zap.NewNop() // the zero Setup logs nowhere, as cluster.Options does
	}
	r := &Registry{setup: fs}
	multi := len(specs) > 1
	var notifyApp func(app string) func(string)
	if fs.Options.Notify != nil && multi {
		notifyApp = joinNotify(len(specs), fs.Options.Notify)
	}
	var appFiles []*applog.File
	for _, sp := range specs {
		a := &app{name: sp.Name, opt: fs.Options, log: fs.Options.Logger, restarts: map[int]int{}}
		a.cfg.Store(&sp.Config)
		a.opt.Name = sp.Name
		if multi {
			core := fs.Options.Logger.Core()
			if sp.LogFile != "" {
				f, err := applog.OpenFile(sp.LogFile, fs.Rotation)
				if err != nil {
					return nil, appFiles, fmt.Errorf("app %s: %w", sp.Name, err)
				}
				appFiles = append(appFiles, f)
				a.outFile = f
				core = zapcore.NewTee(core, fs.NewCore(f))
			}
			a.log = zap.New(core).With(zap.String("app", sp.Name))
			if notifyApp != nil {
				a.opt.Notify = notifyApp(sp.Name)
			}
		}
		a.opt.Logger = a.log
		if fs.Inherited != nil {
			a.opt.Inherited = fs.Inherited(sp.Name, multi)
		}
		if fs.SocketStore != nil && !sp.Config.Fork() {
			a.opt.SocketStore = fs.SocketStore(sp.Name, multi, a.log)
		}
		{
			// A worker that can outlive this supervisor (kill -9, an upgrade) rejoins the
			// next one here (internal/cluster's adopt.go): it clears its own parent-death
			// signal and says so (cmd/worker does, wherever it lies); others die with it.
			rv := fs.Socket + ".adopt"
			if multi {
				rv = fs.Socket + "." + sp.Name + ".adopt"
			}
			if len(rv) <= control.MaxSocketPath {
				a.opt.Adopt = rv
			} else {
				a.log.Warn("workers will not outlive the supervisor: the rendezvous socket path is too long (choose a shorter -socket)", zap.String("path", rv))
			}
		}
		if fs.Output != nil {
			var own io.Writer
			if a.outFile != nil {
				own = a.outFile
			}
			a.opt.Output = fs.Output.ForApp(sp.Name, applog.Label(sp), own)
		}
		a.logName = logName(sp)
		if fs.WorkerLogs != nil {
			a.opt.WorkerLog = fs.WorkerLogs.ForApp(a.logName)
		}
		r.apps = append(r.apps, a)
	}
	return r, appFiles, nil
}

// Start starts every app's cluster, in order, but those held (an upgrade's: the apps the
// previous image had stopped or deleted stay so); on an error the ones started are killed.
func (r *Registry) Start(ctx context.Context, held map[string]string) error {
	r.ctx = ctx
	for i, a := range r.apps {
		switch held[a.name] {
		case HeldDeleted:
			a.mu.Lock()
			a.deleted = true
			a.mu.Unlock()
			continue
		case HeldStopped:
			a.log.Info("app left stopped, as it was before the upgrade")
			continue
		}
		if err := a.launch(ctx); err != nil {
			if !a.opt.AdoptAll { // an upgrade's: the previous binary takes their workers over
				for _, b := range r.apps[:i] {
					if sup := b.current(); sup != nil {
						sup.Kill()
					}
				}
			}
			return r.wrap(a, err)
		}
	}
	return nil
}

// Names lists the apps' names.
func (r *Registry) Names() []string {
	var out []string
	for _, a := range r.live() {
		out = append(out, a.name)
	}
	return out
}

// ErrUnknownApp is a name the registry has no app of (mapped to 404).
var ErrUnknownApp = errors.New("no such app")

// pick returns the app named, or every app for "" (and "all", as pm2 says).
func (r *Registry) pick(name string) ([]*app, error) {
	if name == "" || name == "all" {
		return r.live(), nil
	}
	for _, a := range r.live() {
		if a.name == name {
			return []*app{a}, nil
		}
	}
	if len(r.apps) == 1 && r.apps[0].name == "" {
		return nil, fmt.Errorf("app %q: %w: this supervisor runs one app without a name (give no name)", name, ErrUnknownApp)
	}
	return nil, fmt.Errorf("app %q: %w: the apps are %s", name, ErrUnknownApp, strings.Join(r.Names(), ", "))
}

// one returns the single app an operation on one cluster needs (scale): the one named, or
// the only app.
func (r *Registry) one(name string) (*app, error) {
	if name == "" && len(r.apps) > 1 {
		return nil, fmt.Errorf("name the app: this supervisor runs %s", strings.Join(r.Names(), ", "))
	}
	apps, err := r.pick(name)
	if err != nil {
		return nil, err
	}
	if len(apps) == 0 {
		return nil, fmt.Errorf("%w: every app was deleted", ErrUnknownApp)
	}
	return apps[0], nil
}

// running returns the running clusters of the apps named ("" all), with the app of each.
func (r *Registry) running(name string) ([]*app, []*cluster.Supervisor, error) {
	apps, err := r.pick(name)
	if err != nil {
		return nil, nil, err
	}
	var as []*app
	var sups []*cluster.Supervisor
	for _, a := range apps {
		if sup := a.current(); sup != nil {
			as, sups = append(as, a), append(sups, sup)
		}
	}
	if len(sups) == 0 {
		return nil, nil, fmt.Errorf("%w: no running app of %s (supervisor start NAME, or start all, starts a stopped one)", cluster.ErrStopped, strings.Join(namesOf(apps), ", "))
	}
	return as, sups, nil
}

func namesOf(apps []*app) []string {
	var out []string
	for _, a := range apps {
		name := a.name
		if name == "" {
			name = "the app"
		}
		out = append(out, name)
	}
	return out
}

// wrap names the app in an error when there are several.
func (r *Registry) wrap(a *app, err error) error {
	if err == nil || len(r.apps) == 1 {
		return err
	}
	return fmt.Errorf("app %s: %w", a.name, err)
}

// joinNotify shares one systemd notification channel among n apps: READY=1 goes out once
// every app has said it (the service is ready when all its apps are), later ones pass
// (a reload's), and each STATUS= is prefixed with the app's name.
func joinNotify(n int, send func(string)) func(app string) func(string) {
	var mu sync.Mutex
	ready := map[string]bool{}
	return func(app string) func(string) {
		return func(state string) {
			mu.Lock()
			var out []string
			for _, l := range strings.Split(state, "\n") {
				switch {
				case l == "READY=1":
					ready[app] = true
					if len(ready) < n {
						continue
					}
				case strings.HasPrefix(l, "STATUS="):
					l = "STATUS=" + app + ": " + strings.TrimPrefix(l, "STATUS=")
				}
				out = append(out, l)
			}
			mu.Unlock()
			if len(out) > 0 {
				send(strings.Join(out, "\n"))
			}
		}
	}
}

// live are the apps not deleted, in order.
func (r *Registry) live() []*app {
	var out []*app
	for _, a := range r.apps {
		a.mu.Lock()
		d := a.deleted
		a.mu.Unlock()
		if !d {
			out = append(out, a)
		}
	}
	return out
}

// Has returns nil when name is an app's (or "" or "all"), else the error naming the apps.
func (r *Registry) Has(name string) error {
	_, err := r.pick(name)
	return err
}

// logName is what an app's per-slot log files are named after, NAME-SLOT.log, as PM2 names
// its per-instance files: the app's name, or for the one app of a configuration without
// names its program's, without its extension (worker-0.log for our worker, app-0.log for
// app.js), so that two apps started one after the other write files of their own.
func logName(sp cluster.App) string {
	n := applog.Label(sp)
	if sp.Name == "" {
		n = strings.TrimSuffix(n, filepath.Ext(n))
	}
	n = strings.Map(func(r rune) rune {
		if r == '/' || r < 0x20 || r == 0x7f {
			return '_'
		}
		return r
	}, n)
	if n == "" || n == "." || n == ".." {
		return "app"
	}
	return n
}
