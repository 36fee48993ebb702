package cluster

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"
)

// ErrStopped is returned by operations on a supervisor that has stopped.
var ErrStopped = errors.New("supervisor stopped")

// Stop drains every worker, waits for them (SIGKILL after kill_timeout), closes the
// sockets and ends the loop.
func (s *Supervisor) Stop(ctx context.Context) error { return s.stop(ctx, false) }

// Kill ends every worker at once with SIGKILL, closes the sockets and ends the loop.
func (s *Supervisor) Kill() error { return s.stop(context.Background(), true) }

func (s *Supervisor) stop(ctx context.Context, now bool) error {
	s.call(func() {
		// STOPPING=1 once, however many stops are asked for (a second signal means now),
		// and in the loop, which sends every READY=1: none can follow it.
		if !s.stopAnnounced {
			s.stopAnnounced = true
			s.notify("STOPPING=1")
		}
		if now {
			// Do not wait for a running Reload or Scale: killing its workers ends it.
			s.stopping = true
			for p := range s.procs {
				p.kill()
			}
		}
	})
	s.stopBackground() // before ops: a reload they began ends with their context
	s.ops.Lock()
	defer s.ops.Unlock()
	begun := time.Now()
	var procs []*proc
	if !s.call(func() {
		s.stopping = true
		for _, sl := range s.slots {
			if sl.timer != nil {
				sl.timer.Stop()
			}
		}
		for p := range s.procs {
			procs = append(procs, p)
			if now {
				p.kill()
			} else if p.state != StateStopping {
				s.drain(p)
			}
		}
	}) {
		return ErrStopped
	}
	var err error
	for _, p := range procs {
		select {
		case <-p.exited:
		case <-ctx.Done():
			p.kill()
			<-p.exited
			err = ctx.Err()
		}
	}
	s.endGroups(procs, begun.Add(s.cfg.KillTimeout.D()))
	s.call(func() {
		for _, sl := range s.slots {
			s.closeAppPorts(sl)
			if sl.file != nil {
				sl.file.Close()
				sl.file = nil
			}
		}
		if s.steer != nil {
			s.steer.Close()
			s.steer = nil // the loop's last updateSteering must not touch it
		}
		if s.rendezvous != nil {
			s.rendezvous.Close() // and its path: a clean stop leaves no worker to adopt
		}
		if s.notifyDir != "" {
			os.RemoveAll(s.notifyDir)
		}
	})
	s.log.Info("cluster stopped")
	s.post(nil)
	<-s.quit
	return err
}

// endGroups waits until deadline for what the stopped workers forked and left in their
// process groups (the leaders have exited), then SIGKILLs what remains, as systemd ends a
// stopped service's remaining processes after TimeoutStopSec: else they would outlive
// the supervisor and hold the port.
func (s *Supervisor) endGroups(procs []*proc, deadline time.Time) {
	// waitGone polls until the groups of procs are gone or until, and returns those left.
	waitGone := func(procs []*proc, until time.Time, every time.Duration) []*proc {
		for {
			left := procs[:0:0]
			for _, p := range procs {
				if syscall.Kill(-p.pid, 0) == nil {
					left = append(left, p)
				}
			}
			if len(left) == 0 || !time.Now().Before(until) {
				return left
			}
			procs = left
			time.Sleep(every)
		}
	}
	left := waitGone(procs, deadline, 50*time.Millisecond)
	for _, p := range left {
		p.log.Warn("worker's children still running after kill_timeout: SIGKILL to its process group")
		syscall.Kill(-p.pid, syscall.SIGKILL)
	}
	// SIGKILL is delivered, not yet done: a process dies when it next runs in the kernel,
	// which on a busy machine can be milliseconds later. Stop returns once the groups are
	// gone, so that nothing it killed still holds the port; bounded, because an orphan
	// whose new parent never reaps it stays a group member as a zombie.
	waitGone(left, time.Now().Add(time.Second), 10*time.Millisecond)
}
