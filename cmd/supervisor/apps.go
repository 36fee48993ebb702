package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/onehost/onehost/internal/applog"
	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/sdnotify"
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

// fleet is the supervisor's apps, in the configuration's order. Each app's cluster is
// independent: a reload, restart, scale or stop of one leaves the others alone, and a
// crash restarts only the crashed worker of its app.
type fleet struct {
	apps []*app
	ctx  context.Context // the clusters' lifetime (Start's ctx); set by start
	ops  sync.Mutex      // one stop or restart of a stopped app at a time

	// The host behind a balancer (drain.go): drained by `supervisor drain`, stopping once
	// the supervisor began to stop, and the agent's address ("" without one).
	drained, stopping atomic.Bool
	agentAddr         string // set before the control socket serves

	// Set before the control socket serves, for pm2.go: the arguments of `run` (save),
	// and the log files flush empties (nil: none).
	runArgs    []string
	mainLog    *applog.File
	workerLogs *applog.WorkerLogs
	// reread reads the configuration file again as at start (-env, -only and the command
	// line's overrides applied), for `reload --update-env` (updateenv.go); nil when the
	// supervisor runs no file. Set before the control socket serves.
	reread func() ([]cluster.App, error)
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

// fleetSetup is what the apps' clusters share: the supervisor's options and log, and
// what each app takes its part of.
type fleetSetup struct {
	opts     cluster.Options
	log      *zap.Logger
	newCore  func(zapcore.WriteSyncer) zapcore.Core // a log core of the supervisor's format and level
	rot      applog.Rotation
	workers  *applog.WorkerLogs  // -log-dir; nil: none
	notifier *sdnotify.Notifier  // systemd's; nil: not under systemd
	kept     map[string]*os.File // sockets systemd kept (listenFDs); an app takes its own out
	socket   string              // the control socket, beside which the rendezvous sockets live
	output   *applog.Output      // where the apps' lines go (logprint.go); nil: into log
}

// newFleet makes one app per spec, each with its own logger (its name on every line),
// per-worker files and, with several apps, its own out_file beside the merged log (returned
// for the caller to reopen and close, even with an error).
func newFleet(specs []cluster.App, fs fleetSetup) (*fleet, []*applog.File, error) {
	multi := len(specs) > 1
	var notifyApp func(app string) func(string)
	if fs.opts.Notify != nil && multi {
		notifyApp = joinNotify(len(specs), fs.opts.Notify)
	}
	var appFiles []*applog.File
	fl := &fleet{}
	for _, sp := range specs {
		a := &app{name: sp.Name, opt: fs.opts, log: fs.log}
		a.cfg.Store(&sp.Config)
		a.opt.Name = sp.Name
		if multi {
			core := fs.log.Core()
			if sp.LogFile != "" {
				f, err := applog.OpenFile(sp.LogFile, fs.rot)
				if err != nil {
					return nil, appFiles, fmt.Errorf("app %s: %w", sp.Name, err)
				}
				appFiles = append(appFiles, f)
				a.outFile = f
				core = zapcore.NewTee(core, fs.newCore(f))
			}
			a.log = zap.New(core).With(zap.String("app", sp.Name))
			if notifyApp != nil {
				a.opt.Notify = notifyApp(sp.Name)
			}
		}
		a.opt.Logger = a.log
		if len(fs.kept) > 0 {
			a.opt.Inherited = inheritedFor(fs.kept, sp.Name, multi)
		}
		if fs.notifier != nil && !sp.Config.Fork() {
			a.opt.SocketStore = fdStore(fs.notifier, sp.Name, multi, a.log)
		}
		{
			// A worker that can outlive this supervisor (kill -9, an upgrade) rejoins the
			// next one here (internal/cluster's adopt.go): it clears its own parent-death
			// signal and says so (cmd/worker does, wherever it lies); others die with it.
			rv := fs.socket + ".adopt"
			if multi {
				rv = fs.socket + "." + sp.Name + ".adopt"
			}
			if len(rv) <= control.MaxSocketPath {
				a.opt.Adopt = rv
			} else {
				a.log.Warn("workers will not outlive the supervisor: the rendezvous socket path is too long (choose a shorter -socket)", zap.String("path", rv))
			}
		}
		if fs.output != nil {
			var own io.Writer
			if a.outFile != nil {
				own = a.outFile
			}
			a.opt.Output = fs.output.ForApp(sp.Name, applog.Label(sp), own)
		}
		if fs.workers != nil {
			a.opt.WorkerLog = fs.workers.For
			if multi {
				a.opt.WorkerLog = fs.workers.ForApp(sp.Name)
			}
		}
		fl.apps = append(fl.apps, a)
	}
	return fl, appFiles, nil
}

// start starts every app's cluster, in order, but those held (an upgrade's: the apps the
// previous image had stopped or deleted stay so); on an error the ones started are killed.
func (f *fleet) start(ctx context.Context, held map[string]string) error {
	f.ctx = ctx
	for i, a := range f.apps {
		switch held[a.name] {
		case heldDeleted:
			a.mu.Lock()
			a.deleted = true
			a.mu.Unlock()
			continue
		case heldStopped:
			a.log.Info("app left stopped, as it was before the upgrade")
			continue
		}
		if err := a.launch(ctx); err != nil {
			for _, b := range f.apps[:i] {
				if a.opt.AdoptAll { // an upgrade's: the previous binary takes their workers over
					break
				}
				if sup := b.current(); sup != nil {
					sup.Kill()
				}
			}
			return f.wrap(a, err)
		}
	}
	return nil
}

// names lists the apps' names.
func (f *fleet) names() []string {
	var out []string
	for _, a := range f.live() {
		out = append(out, a.name)
	}
	return out
}

// errUnknownApp is a name the fleet has no app of (mapped to 404).
var errUnknownApp = errors.New("no such app")

// pick returns the app named, or every app for "" (and "all", as pm2 says).
func (f *fleet) pick(name string) ([]*app, error) {
	if name == "" || name == "all" {
		return f.live(), nil
	}
	for _, a := range f.live() {
		if a.name == name {
			return []*app{a}, nil
		}
	}
	if len(f.apps) == 1 && f.apps[0].name == "" {
		return nil, fmt.Errorf("app %q: %w: this supervisor runs one app without a name (give no name)", name, errUnknownApp)
	}
	return nil, fmt.Errorf("app %q: %w: the apps are %s", name, errUnknownApp, strings.Join(f.names(), ", "))
}

// one returns the single app an operation on one cluster needs (scale): the one named, or
// the only app.
func (f *fleet) one(name string) (*app, error) {
	if name == "" && len(f.apps) > 1 {
		return nil, fmt.Errorf("name the app: this supervisor runs %s", strings.Join(f.names(), ", "))
	}
	apps, err := f.pick(name)
	if err != nil {
		return nil, err
	}
	if len(apps) == 0 {
		return nil, fmt.Errorf("%w: every app was deleted", errUnknownApp)
	}
	return apps[0], nil
}

// status is GET /status: every app, and every worker of the running ones with its app's
// name. Addr and Steering are the first running cluster-mode app's (the only one's, for a
// configuration of one app), so that one-app readers keep their fields.
func (f *fleet) status(name string) (control.Status, error) {
	apps, err := f.pick(name)
	if err != nil {
		return control.Status{}, err
	}
	st := control.Status{Workers: []control.Worker{}}
	for _, a := range apps {
		as := control.App{Name: a.name, Mode: a.mode(), Status: "stopped"}
		if sup := a.current(); sup != nil {
			rows := sup.Status()
			as.Status, as.Workers = "running", len(rows)
			if !a.config().Fork() {
				as.Addr, as.Steering = sup.Addr(), sup.Steering()
				if st.Addr == "" {
					st.Addr, st.Steering = as.Addr, as.Steering
				}
			}
			st.Workers = append(st.Workers, workerRows(rows)...)
		}
		st.Apps = append(st.Apps, as)
	}
	return st, nil
}

// running returns the running clusters of the apps named ("" all), with the app of each.
func (f *fleet) running(name string) ([]*app, []*cluster.Supervisor, error) {
	apps, err := f.pick(name)
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

// reload rolls the named apps' workers (every app's for ""), one app after the other.
func (f *fleet) reload(ctx context.Context, name string) error {
	as, sups, err := f.running(name)
	if err != nil {
		return err
	}
	var errs []error
	for i, sup := range sups {
		if err := sup.Reload(ctx); err != nil {
			errs = append(errs, f.wrap(as[i], err))
		}
	}
	return errors.Join(errs...)
}

// restart restarts the named apps (every app for ""), as `pm2 restart`: each worker
// stopped before its successor starts; a stopped app is started again.
func (f *fleet) restart(ctx context.Context, name string) error {
	apps, err := f.pick(name)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range apps {
		if sup := a.current(); sup != nil {
			if err := sup.Restart(ctx); err != nil {
				errs = append(errs, f.wrap(a, err))
			}
			continue
		}
		if err := f.startApp(ctx, a); err != nil {
			errs = append(errs, f.wrap(a, err))
		}
	}
	return errors.Join(errs...)
}

// startApp starts a stopped app's cluster again and waits for its workers.
func (f *fleet) startApp(ctx context.Context, a *app) error {
	f.ops.Lock()
	defer f.ops.Unlock()
	if a.current() != nil {
		return nil
	}
	if err := a.launch(f.ctx); err != nil {
		return err
	}
	if f.drained.Load() { // a host drained stays so, whatever starts on it
		a.current().SetHostDrained(true)
	}
	a.log.Info("app started again")
	return a.current().WaitOnline(ctx)
}

// scale sets the number of workers of one app.
func (f *fleet) scale(ctx context.Context, name string, n int, rel bool) error {
	a, err := f.one(name)
	if err != nil {
		return err
	}
	sup := a.current()
	if sup == nil {
		if a.name == "" {
			return fmt.Errorf("%w: the app is stopped (supervisor start all starts it)", cluster.ErrStopped)
		}
		return fmt.Errorf("%w: app %s is stopped (supervisor start %s starts it)", cluster.ErrStopped, a.name, a.name)
	}
	return f.wrap(a, sup.Scale(ctx, n, rel))
}

// stopApp stops one app's cluster gracefully; the others serve on, and `restart NAME`
// starts it again.
func (f *fleet) stopApp(ctx context.Context, name string) error {
	apps, err := f.pick(name)
	if err != nil {
		return err
	}
	f.ops.Lock()
	defer f.ops.Unlock()
	var errs []error
	for _, a := range apps {
		a.mu.Lock()
		sup := a.sup
		a.sup = nil
		a.mu.Unlock()
		if sup == nil {
			continue
		}
		a.log.Info("stopping the app", zap.String("reason", "stop command"))
		if err := sup.Stop(ctx); err != nil {
			errs = append(errs, f.wrap(a, err))
		}
	}
	return errors.Join(errs...)
}

// stop stops every app's cluster at once (each drains its workers in parallel).
func (f *fleet) stop(ctx context.Context) error {
	f.ops.Lock()
	defer f.ops.Unlock()
	errs := make([]error, len(f.apps))
	var wg sync.WaitGroup
	for i, a := range f.apps {
		if sup := a.current(); sup != nil {
			wg.Go(func() { errs[i] = f.wrap(a, sup.Stop(ctx)) })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// kill ends every worker of every app at once.
func (f *fleet) kill() {
	for _, a := range f.apps {
		if sup := a.current(); sup != nil {
			sup.Kill()
		}
	}
}

// wrap names the app in an error when there are several.
func (f *fleet) wrap(a *app, err error) error {
	if err == nil || len(f.apps) == 1 {
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

// workerRows are the cluster's status rows as the control protocol carries them.
func workerRows(rows []cluster.WorkerStatus) []control.Worker {
	out := make([]control.Worker, len(rows))
	for i, w := range rows {
		out[i] = control.Worker(w)
	}
	return out
}
