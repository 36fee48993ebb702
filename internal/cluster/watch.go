// Reloads the cluster starts itself: PM2's watch (a file changed) and cron_restart (a time
// came). Both roll a reload, one worker at a time (a restart in fork mode), as `reload`
// does; they run in goroutines of the supervisor's that stop before it does.

package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/cron"
	"github.com/onehost/onehost/internal/filewatch"
)

// workDir is the workers' working directory, where watch's relative paths start.
func (s *Supervisor) workDir() string {
	d := s.cfg.Cwd
	if d == "" {
		d = s.opt.Dir
	}
	if d == "" {
		d, _ = os.Getwd()
	}
	return d
}

// checkWatch refuses watch paths that are not there (New), before anything starts.
func (s *Supervisor) checkWatch() error {
	for _, p := range s.cfg.Watch {
		if !filepath.IsAbs(p) {
			p = filepath.Join(s.workDir(), p)
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("watch: %w: name files or directories that exist (relative paths start at the app's cwd, %s)", err, s.workDir())
		}
	}
	return nil
}

// startBackground starts the watch and cron_restart goroutines, if configured (Start).
// They end with ctx, or when stop calls bgStop, and stop waits for them.
func (s *Supervisor) startBackground(ctx context.Context) {
	bg, cancel := context.WithCancel(ctx)
	s.bgStop = cancel
	if len(s.cfg.Watch) > 0 {
		w, err := filewatch.New(filewatch.Config{Dir: s.workDir(), Paths: s.cfg.Watch, Ignore: s.cfg.IgnoreWatch,
			OnError: func(err error) { s.log.Warn("watch", zap.Error(err)) }})
		if err != nil {
			s.log.Error("watch is off: changes will not reload the cluster", zap.Error(err))
		} else {
			s.log.Info("watching for changes", zap.Strings("watch", s.cfg.Watch), zap.Strings("ignore_watch", s.cfg.IgnoreWatch))
			s.bg.Go(func() {
				defer w.Close()
				s.watchLoop(bg, w.Changes())
			})
		}
	}
	if s.cfg.CronRestart != "" {
		sched, _ := cron.Parse(s.cfg.CronRestart) // validated
		s.bg.Go(func() { s.cronLoop(bg, sched) })
	}
}

// stopBackground stops the watch and cron goroutines and waits for them (stop). A reload
// they began ends with their context.
func (s *Supervisor) stopBackground() {
	if s.bgStop != nil {
		s.bgStop()
	}
	s.bg.Wait()
}

// watchLoop rolls a reload watch_delay after a change; changes meanwhile join it, and one
// seen during the reload rolls another after it, so the last change is always served.
func (s *Supervisor) watchLoop(ctx context.Context, changes <-chan string) {
	for {
		var first string
		select {
		case <-ctx.Done():
			return
		case first = <-changes:
		}
		n := 1
		delay := time.NewTimer(s.cfg.WatchDelay.D())
	wait:
		for {
			select {
			case <-ctx.Done():
				delay.Stop()
				return
			case <-changes:
				n++
			case <-delay.C:
				break wait
			}
		}
		s.log.Info("watch: files changed: rolling reload", zap.String("path", first), zap.Int("changes", n))
		s.reloadBy(ctx, "watch")
	}
}

// cronLoop rolls a reload at each time of sched.
func (s *Supervisor) cronLoop(ctx context.Context, sched cron.Schedule) {
	for {
		next, err := sched.Next(time.Now())
		if err != nil {
			s.log.Error("cron_restart: the expression matches no date: no restarts", zap.String("cron_restart", s.cfg.CronRestart))
			return
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		s.log.Info("cron_restart: rolling reload", zap.String("cron_restart", s.cfg.CronRestart))
		s.reloadBy(ctx, "cron_restart")
	}
}

// reloadBy runs a reload the cluster started itself and logs how it ended.
func (s *Supervisor) reloadBy(ctx context.Context, by string) {
	err := s.Reload(ctx)
	switch {
	case err == nil:
	case errors.Is(err, ErrStopped) || ctx.Err() != nil:
	default:
		s.log.Error(by+": reload failed: the previous workers serve on", zap.Error(err))
	}
}
