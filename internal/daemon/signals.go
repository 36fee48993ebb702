package daemon

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/registry"
	"github.com/onehost/onehost/internal/systemd"
)

// wait runs the signal loop until the apps stopped: signals, the control socket's stop
// and upgrade requests, and ctx's end.
func (im *image) wait(ctx context.Context) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)

	done := ctx.Done() // set to nil once seen, so a cancelled ctx asks for one stop, not many
	st := &stopper{reg: im.reg, log: im.log, stopped: make(chan error, 1), tasks: &im.tasks}
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

// stopper stops the apps gracefully on the first request and kills it on the second.
type stopper struct {
	reg      *registry.Registry
	tasks    *sync.WaitGroup // the image's: the stop's goroutines are waited for before the log closes
	log      *zap.Logger
	stopped  chan error // the registry's Stop result
	stopping bool
	began    time.Time
}

func (st *stopper) start(why string) {
	if st.stopping {
		st.log.Warn("second stop request: killing the workers now", zap.String("reason", why))
		st.tasks.Go(st.reg.Kill)
		return
	}
	st.stopping, st.began = true, time.Now()
	st.reg.SetStopping() // the agent answers drain from now on
	st.log.Info("stopping gracefully", zap.String("reason", why))
	st.tasks.Go(func() { st.stopped <- st.reg.Stop(context.Background()) })
}

// signal acts on one signal: HUP reloads, TTIN and TTOU scale, USR2 upgrades, USR1
// reopens the log files, the others stop.
func (im *image) signal(ctx context.Context, s os.Signal, st *stopper) {
	reg, log, up := im.reg, im.log, im.up
	switch s {
	case syscall.SIGHUP:
		im.tasks.Go(func() {
			if err := reg.Reload(ctx, ""); err != nil {
				log.Error("reload on SIGHUP", zap.Error(err))
			}
		})
	case syscall.SIGTTIN, syscall.SIGTTOU:
		d := 1
		if s == syscall.SIGTTOU {
			d = -1
		}
		im.tasks.Go(func() { // with several apps there is no one cluster to scale: Scale says so
			if err := reg.Scale(ctx, "", d, true); err != nil {
				log.Error("scale on signal", zap.String("signal", s.String()), zap.Error(err))
			}
		})
	case syscall.SIGUSR2: // nginx's, HAProxy's and gunicorn's signal for a new binary
		if bin, err := up.check(up.defaultBinary); err != nil {
			log.Error("upgrade on USR2 refused", zap.Error(err))
		} else if up.busy.CompareAndSwap(false, true) {
			up.req <- bin // capacity 1, and busy admits one: never blocks
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
		im.notifier.Notify(systemd.Reloading())
	}
	err := im.up.exec(bin, im.lf, im.reg.Held())
	im.log.Error("upgrade failed: the running supervisor goes on", zap.String("binary", bin), zap.Error(err))
	if im.notifier != nil {
		im.notifier.Notify("READY=1")
	}
	im.up.busy.Store(false)
}

// agentStopGrace is how long the agent stays up after the supervisor began stopping, at
// least: it answers "drain" meanwhile, so that HAProxy, asking every agent-inter (1 s in
// the documented setting), hears it at least once before the port goes silent (a silent
// agent is ignored, and the HTTP check alone decides).
const agentStopGrace = 2 * time.Second
