package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/sdnotify"
)

// wait runs the signal loop until the apps stopped: signals, the control socket's stop
// and upgrade requests, and ctx's end.
func (im *image) wait(ctx context.Context) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)

	done := ctx.Done() // set to nil once seen, so a cancelled ctx asks for one stop, not many
	st := &stopper{fl: im.fl, log: im.log, stopped: make(chan error, 1)}
	for {
		select {
		case s := <-sigs:
			im.signal(ctx, s, st)
		case <-im.stopReq:
			st.start("stop command")
		case bin := <-im.up.req:
			if st.stopping {
				im.log.Warn("upgrade refused: stopping")
				continue
			}
			im.upgrade(bin)
		case <-done:
			done = nil
			st.start("context done")
		case err := <-st.stopped:
			if im.ag != nil {
				// The workers are gone; the agent has said drain for at least the grace, so
				// that HAProxy heard it before the port goes silent.
				time.Sleep(time.Until(st.began.Add(agentStopGrace)))
				im.ag.Close()
			}
			return err
		}
	}
}

// stopper stops the fleet gracefully on the first request and kills it on the second.
type stopper struct {
	fl       *fleet
	log      *zap.Logger
	stopped  chan error // fl.stop's result
	stopping bool
	began    time.Time
}

func (st *stopper) start(why string) {
	if st.stopping {
		st.log.Warn("second stop request: killing the workers now", zap.String("reason", why))
		go st.fl.kill()
		return
	}
	st.stopping, st.began = true, time.Now()
	st.fl.stopping.Store(true) // the agent answers drain from now on
	st.log.Info("stopping gracefully", zap.String("reason", why))
	go func() { st.stopped <- st.fl.stop(context.Background()) }()
}

// signal acts on one signal: HUP reloads, TTIN and TTOU scale, USR2 upgrades, USR1
// reopens the log files, the others stop.
func (im *image) signal(ctx context.Context, s os.Signal, st *stopper) {
	fl, log, up := im.fl, im.log, im.up
	switch s {
	case syscall.SIGHUP:
		go func() {
			if err := fl.reload(ctx, ""); err != nil {
				log.Error("reload on SIGHUP", zap.Error(err))
			}
		}()
	case syscall.SIGTTIN, syscall.SIGTTOU:
		d := 1
		if s == syscall.SIGTTOU {
			d = -1
		}
		go func() { // with several apps there is no one cluster to scale: fleet.scale says so
			if err := fl.scale(ctx, "", d, true); err != nil {
				log.Error("scale on signal", zap.String("signal", s.String()), zap.Error(err))
			}
		}()
	case syscall.SIGUSR2: // nginx's, HAProxy's and gunicorn's signal for a new binary
		if bin, err := up.check(up.defaultBinary); err != nil {
			log.Error("upgrade on USR2 refused", zap.Error(err))
		} else if up.busy.CompareAndSwap(false, true) {
			go func() { up.req <- bin }()
		}
	case syscall.SIGUSR1:
		im.reopenLogs()
	default:
		st.start("signal " + s.String())
	}
}

// reopenLogs reopens every log file, for logrotate (USR1).
func (im *image) reopenLogs() {
	log, lf, wl := im.log, im.lf, im.wl
	if lf == nil && wl == nil && len(im.appFiles) == 0 {
		log.Info("USR1: no log file to reopen (logs go to stderr)")
	}
	for _, f := range im.appFiles {
		if err := f.Reopen(); err != nil {
			log.Error("USR1: reopen an app's log file", zap.String("path", f.Path()), zap.Error(err))
		}
	}
	if lf != nil {
		if err := lf.Reopen(); err != nil {
			fmt.Fprintln(im.stderr, "supervisor: USR1:", err) // the log itself may be what failed
		} else {
			log.Info("USR1: log file reopened", zap.String("path", lf.Path()))
		}
	}
	if wl != nil {
		wl.Reopen()
	}
}

// upgrade re-executes bin (upgrade.go). The workers serve on through the exec and rejoin
// the new image (adopt.go); this returns only if the exec failed, and then nothing was
// given up.
func (im *image) upgrade(bin string) {
	if im.notifier != nil {
		im.notifier.Notify(sdnotify.Reloading())
	}
	err := im.up.exec(bin, im.lf, im.fl.heldApps())
	im.log.Error("upgrade failed: the running supervisor goes on", zap.String("binary", bin), zap.Error(err))
	if im.notifier != nil {
		im.notifier.Notify("READY=1")
	}
	im.up.busy.Store(false)
}
