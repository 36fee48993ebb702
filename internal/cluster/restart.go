// A worker's end: exits, crash restarts with backoff, and draining.

package cluster

import (
	"os"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/ipc"
)

// exited handles the end of a process (loop only).
func (s *Supervisor) exited(p *proc) {
	delete(s.procs, p)
	// Its sockets: the slot's previous one, retired by a reload (what is still queued there
	// moves to the live slots as it closes), or a new generation's own that was never
	// promoted.
	for _, f := range []*os.File{p.retired, p.socket} {
		if f != nil {
			f.Close()
		}
	}
	p.retired, p.socket = nil, nil
	if p.drainTimer == nil {
		// It exited unasked (a crash) or was killed: what it forked and left in its group
		// would serve on beside its successor, holding the socket; it is stopped as systemd
		// stops the rest of a service whose main process exited: kill_signal now, SIGKILL
		// after kill_timeout. (A drained worker's timer does this at its kill_timeout.)
		sig, _ := parseSignal(s.cfg.KillSignal) // validated
		if syscall.Kill(-p.pid, sig) == nil {
			p.log.Warn("worker exited leaving processes in its group: kill_signal to them", zap.String("signal", s.cfg.KillSignal))
			time.AfterFunc(s.cfg.KillTimeout.D(), func() { syscall.Kill(-p.pid, syscall.SIGKILL) })
		}
	}
	// Uptime as the restart budgets see it: the time the supervisor itself ran while the
	// worker lived, so that its own stalls meanwhile do not make a worker that crashed young
	// look stable. A worker that died during a stall is seen dead only after it, and the
	// whole stall is left out: its uptime is understated by the part it lived through (wait
	// tells no time of death), which errs toward unstable, as the stall hides whether it
	// crashed young (TestUptimeAcrossStall).
	_, stalls := s.clock.observe(time.Now())
	up := time.Since(p.started) - (stalls - p.stallsAtStart)
	sl := s.slots[p.slot]
	if sl == nil || sl.cur != p {
		p.log.Info("worker exited", zap.Duration("uptime", up), zap.NamedError("status", p.exitErr))
		s.appPortsAfter(p) // replaced: its app ports stay only where its successor listens too
		return
	}
	sl.cur = nil
	if s.stopping {
		p.log.Info("worker exited", zap.Duration("uptime", up), zap.NamedError("status", p.exitErr))
		return
	}
	if s.cfg.stopsFor(p.exitErr) {
		// PM2's autorestart: false, or an exit code of stop_exit_codes: the slot stays
		// stopped until a reload or restart. Its socket closes as an errored slot's does:
		// nobody would accept what queues there.
		p.log.Info("worker exited and stays stopped (autorestart: false, or stop_exit_codes) until reload or restart",
			zap.Duration("uptime", up), zap.NamedError("status", p.exitErr))
		sl.state = StateStopped
		s.closeSocket(sl)
		return
	}
	p.log.Warn("worker crashed", zap.Duration("uptime", up), zap.NamedError("status", p.exitErr))
	s.crashed(sl, up) // the loop's updateSteering then gives up the slot's queue
}

// crashed schedules the slot's restart with backoff, or marks it errored (loop only).
func (s *Supervisor) crashed(sl *slot, up time.Duration) {
	if up < s.cfg.MinUptime.D() {
		sl.unstable++
	} else {
		sl.unstable = 0
	}
	if up >= BackoffReset {
		sl.crashes = 0
	}
	sl.crashes++
	if sl.unstable > s.cfg.MaxRestarts {
		sl.state = StateErrored
		// Connections hashed to a socket nobody accepts on would wait forever: close it
		// (its queue is reset, or migrated where tcp_migrate_req is set).
		s.closeSocket(sl)
		s.log.Error("slot errored: too many unstable restarts; no more restarts", zap.Int("slot", sl.id),
			zap.Int("max_restarts", s.cfg.MaxRestarts), zap.Duration("min_uptime", s.cfg.MinUptime.D()))
		return
	}
	d := s.backoff(sl.crashes)
	sl.state = StateWaitingRestart
	sl.restarts++
	s.log.Info("restarting worker", zap.Int("slot", sl.id), zap.Duration("delay", d), zap.Int("restarts", sl.restarts))
	sl.timer = time.AfterFunc(d, func() {
		s.post(func() {
			if s.slots[sl.id] == sl && sl.cur == nil && sl.state == StateWaitingRestart && !s.stopping {
				s.launch(sl)
			}
		})
	})
}

// backoff is the delay before the n-th consecutive restart (n from 1).
func (s *Supervisor) backoff(n int) time.Duration {
	base := s.cfg.ExpBackoffRestartDelay.D()
	if base == 0 {
		return s.cfg.RestartDelay.D()
	}
	d := float64(base)
	for i := 1; i < n && d < float64(MaxBackoff); i++ {
		d *= 1.5
	}
	return min(time.Duration(d), MaxBackoff)
}

// drain asks p to stop gracefully and arms its SIGKILL (loop only).
func (s *Supervisor) drain(p *proc) { s.drainAfter(p, 0) }

// retireGrace is how long a worker whose socket no longer gets new connections (a reload
// with separate generations) keeps running before it is asked to stop, when it does not
// speak our ipc: a program may stop by closing connections it accepted and had not yet
// read (uvicorn does), and in this time it reads them. Ipc speakers drain at once: our
// drain answers what is accepted.
const retireGrace = 500 * time.Millisecond

// drainAfter is drain, the stop request of a worker that does not speak our ipc delayed by
// grace (loop only).
func (s *Supervisor) drainAfter(p *proc, grace time.Duration) {
	p.state = StateStopping
	switch {
	case p.node != nil && s.cfg.ShutdownWithMessage:
		go p.node.send(`"shutdown"`) // never block the loop on a stopped worker
	case p.speaksIPC:
		go p.conn.Send(ipc.Msg{Type: ipc.TypeDrain})
		grace = 0
	default:
		sig, _ := parseSignal(s.cfg.KillSignal) // validated
		stop := func() {
			select {
			case <-p.exited:
			default:
				if err := syscall.Kill(p.pid, sig); err != nil {
					p.log.Warn("send kill_signal", zap.String("signal", s.cfg.KillSignal), zap.Error(err))
				}
			}
		}
		if grace > 0 {
			time.AfterFunc(grace, stop)
		} else {
			stop()
		}
	}
	// Left armed when the worker exits (exited does not stop it): at kill_timeout it also
	// kills what the worker forked and left behind in its group.
	p.drainTimer = time.AfterFunc(grace+s.cfg.KillTimeout.D(), func() {
		select {
		case <-p.exited:
			if syscall.Kill(-p.pid, syscall.SIGKILL) == nil {
				p.log.Warn("worker's children still running after kill_timeout: SIGKILL to its process group")
			}
		default:
			p.log.Warn("worker still running after kill_timeout: SIGKILL")
			p.kill()
		}
	})
}
