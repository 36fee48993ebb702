package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/onehost/onehost/internal/applog"
	"github.com/onehost/onehost/internal/cluster"
	"go.uber.org/zap"
)

// Reload rolls the named apps' workers (every app's for ""), one app after the other.
func (r *Registry) Reload(ctx context.Context, name string) error {
	as, sups, err := r.running(name)
	if err != nil {
		return err
	}
	var errs []error
	for i, sup := range sups {
		if err := sup.Reload(ctx); err != nil {
			errs = append(errs, r.wrap(as[i], err))
		}
	}
	return errors.Join(errs...)
}

// Restart restarts the named apps (every app for ""), as `pm2 restart`: each worker
// stopped before its successor starts; a stopped app is started again.
func (r *Registry) Restart(ctx context.Context, name string) error {
	apps, err := r.pick(name)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range apps {
		if sup := a.current(); sup != nil {
			if err := sup.Restart(ctx); err != nil {
				errs = append(errs, r.wrap(a, err))
			}
			continue
		}
		if err := r.startApp(ctx, a); err != nil {
			errs = append(errs, r.wrap(a, err))
		}
	}
	return errors.Join(errs...)
}

// startApp starts a stopped app's cluster again and waits for its workers.
func (r *Registry) startApp(ctx context.Context, a *app) error {
	r.ops.Lock()
	defer r.ops.Unlock()
	if a.current() != nil {
		return nil
	}
	if err := a.launch(r.ctx); err != nil {
		return err
	}
	if r.drained.Load() { // a host drained stays so, whatever starts on it
		a.current().SetHostDrained(true)
	}
	a.log.Info("app started again")
	return a.current().WaitOnline(ctx)
}

// Scale sets the number of workers of one app.
func (r *Registry) Scale(ctx context.Context, name string, n int, rel bool) error {
	a, err := r.one(name)
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
	return r.wrap(a, sup.Scale(ctx, n, rel))
}

// StopApp stops one app's cluster gracefully; the others serve on, and `restart NAME`
// starts it again.
func (r *Registry) StopApp(ctx context.Context, name string) error {
	apps, err := r.pick(name)
	if err != nil {
		return err
	}
	r.ops.Lock()
	defer r.ops.Unlock()
	var errs []error
	for _, a := range apps {
		a.mu.Lock()
		sup := a.sup
		a.sup = nil
		if sup != nil {
			// Its workers' restarts carry over to the next start, as PM2's ↺ does.
			for _, w := range sup.Status() {
				a.restarts[w.ID] += w.Restarts
			}
		}
		a.mu.Unlock()
		if sup == nil {
			continue
		}
		a.log.Info("stopping the app", zap.String("reason", "stop command"))
		if err := sup.Stop(ctx); err != nil {
			errs = append(errs, r.wrap(a, err))
		}
	}
	return errors.Join(errs...)
}

// Stop stops every app's cluster at once (each drains its workers in parallel).
func (r *Registry) Stop(ctx context.Context) error {
	r.ops.Lock()
	defer r.ops.Unlock()
	errs := make([]error, len(r.apps))
	var wg sync.WaitGroup
	for i, a := range r.apps {
		if sup := a.current(); sup != nil {
			wg.Go(func() { errs[i] = r.wrap(a, sup.Stop(ctx)) })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Kill ends every worker of every app at once.
func (r *Registry) Kill() {
	for _, a := range r.apps {
		if sup := a.current(); sup != nil {
			sup.Kill()
		}
	}
}

// Delete stops the named apps and removes them from every list (pm2 delete); the
// supervisor runs on, with no app if they were all.
func (r *Registry) Delete(ctx context.Context, name string) error {
	if name == "" {
		return fmt.Errorf("%w: name the app to delete (or all)", ErrUnknownApp)
	}
	apps, err := r.pick(name)
	if err != nil {
		return err
	}
	err = r.StopApp(ctx, name)
	r.ops.Lock()
	defer r.ops.Unlock()
	for _, a := range apps {
		a.mu.Lock()
		if a.sup == nil {
			a.deleted = true
		}
		a.mu.Unlock()
		a.log.Info("app deleted")
	}
	return err
}

// Flush empties the log files of the named apps (every app's and the supervisor's own for
// ""), as pm2 flush: the files stay open and go on from empty.
func (r *Registry) Flush(name string) ([]string, error) {
	apps, err := r.pick(name)
	if err != nil {
		return nil, err
	}
	var files []*applog.File
	all := name == "" || name == "all"
	if all && r.setup.MainLog != nil {
		files = append(files, r.setup.MainLog)
	}
	for _, a := range apps {
		if a.outFile != nil {
			files = append(files, a.outFile)
		}
	}
	if r.setup.WorkerLogs != nil {
		for _, a := range apps {
			files = append(files, r.setup.WorkerLogs.Slots(a.logName)...)
		}
	}
	var done []string
	var errs []error
	for _, l := range files {
		if err := l.Truncate(); err != nil {
			errs = append(errs, fmt.Errorf("flush %s: %w", l.Path(), err))
			continue
		}
		done = append(done, l.Path())
	}
	slices.Sort(done)
	return done, errors.Join(errs...)
}

// StartApps starts the named stopped apps again (every stopped app for "" or "all", as
// pm2 start all) and waits for their workers; running ones are left as they are. revive
// brings deleted ones back first (start FILE of the file the supervisor runs, as pm2 start
// ecosystem.config.js after pm2 delete).
func (r *Registry) StartApps(ctx context.Context, name string, revive bool) error {
	if revive {
		for _, a := range r.apps {
			if name == "" || name == "all" || a.name == name {
				a.mu.Lock()
				if a.deleted {
					a.deleted = false
					a.log.Info("app brought back (start of its file)")
				}
				a.mu.Unlock()
			}
		}
	}
	apps, err := r.pick(name)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range apps {
		if err := r.startApp(ctx, a); err != nil {
			errs = append(errs, r.wrap(a, err))
		}
	}
	return errors.Join(errs...)
}
