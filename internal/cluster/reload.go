// Replacing and counting workers: rolling reload, restart, scale.

package cluster

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/systemd"
)

// Reload replaces every worker, one slot at a time: a new worker on the slot's socket,
// wait until it is ready (listen_timeout), then drain the old one (SIGKILL after
// kill_timeout). If a new worker exits or is not ready in time, it is killed, the roll
// stops, the remaining old workers keep serving, and Reload returns the reason. Errored
// slots get a fresh worker too.
func (s *Supervisor) Reload(ctx context.Context) error {
	if s.cfg.Fork() {
		// PM2 too restarts fork-mode processes on reload: no shared socket keeps serving
		// while a successor starts, and a program that binds its own port could not start
		// beside its predecessor.
		return s.Restart(ctx)
	}
	s.ops.Lock()
	defer s.ops.Unlock()
	// A stop already announced (it may wait for ops too) refuses the reload, so that
	// systemd hears no RELOADING=1 after STOPPING=1.
	ids, ok := s.slotsUnlessStopping(func() { s.notify(systemd.Reloading()) })
	if !ok {
		return ErrStopped
	}
	s.log.Info("rolling reload", zap.Ints("slots", ids))
	s.reloads.Add(1)
	for i, id := range ids {
		if err := s.reloadSlot(ctx, id, nil); err != nil {
			s.log.Error("reload aborted: the remaining workers keep serving", zap.Int("slot", id), zap.Error(err))
			err = fmt.Errorf("reload aborted at slot %d (%d of %d slots replaced): %w", id, i, len(ids), err)
			s.reloadsAborted.Add(1)
			s.notifyReloaded("reload aborted, the previous workers serve: " + err.Error())
			return err
		}
	}
	s.log.Info("reload done", zap.Int("slots", len(ids)))
	s.notifyReloaded("")
	return nil
}

// Restart replaces every worker, one slot at a time, as `pm2 restart` does: the slot's
// worker is stopped (drained, SIGKILL after kill_timeout) before its successor starts,
// so the two never run at once; Restart waits for each new worker to be ready (at most
// listen_timeout) before the next slot. Other slots serve meanwhile (with round-robin
// steering the stopped slot gets no new connection; with the hash its queue waits for
// the successor). Unlike Reload it never aborts for a successor that is not ready: it
// is started, and the slot's restart rules take it from there.
func (s *Supervisor) Restart(ctx context.Context) error {
	s.ops.Lock()
	defer s.ops.Unlock()
	ids, ok := s.slotsUnlessStopping(nil)
	if !ok {
		return ErrStopped
	}
	s.log.Info("restart", zap.Ints("slots", ids))
	for _, id := range ids {
		if err := s.restartSlot(ctx, id); err != nil {
			return fmt.Errorf("restart slot %d: %w", id, err)
		}
	}
	s.log.Info("restart done", zap.Int("slots", len(ids)))
	return nil
}

// restartSlot stops the slot's worker, then starts its successor and waits (at most
// listen_timeout) for it to be ready. The caller holds ops.
func (s *Supervisor) restartSlot(ctx context.Context, id int) error {
	var old *proc
	found := false
	s.call(func() {
		sl := s.slots[id]
		if sl == nil || s.stopping {
			return
		}
		found = true
		if sl.timer != nil { // a pending crash restart is this restart now
			sl.timer.Stop()
		}
		old = sl.cur
		sl.cur, sl.state = nil, StateStopping // exited then sees a retired worker, not a crash
		if old != nil {
			s.drain(old)
		}
	})
	if !found {
		return nil
	}
	if old != nil {
		<-old.exited // bounded by kill_timeout
	}
	var np *proc
	s.call(func() {
		sl := s.slots[id]
		if sl == nil || s.stopping || sl.cur != nil {
			return
		}
		sl.unstable, sl.crashes = 0, 0 // a deliberate new start gets a fresh restart budget
		sl.restarts++
		s.launch(sl)
		np = sl.cur
	})
	if np == nil {
		return nil // stopping, scaled away, or its start failed (launch logged why and scheduled a retry)
	}
	t := time.NewTimer(s.cfg.ListenTimeout.D())
	defer t.Stop()
	select {
	case <-np.ready:
	case <-np.exited:
		return fmt.Errorf("new worker (pid %d) exited at start: %v", np.pid, np.exitErr)
	case <-t.C:
		np.log.Warn("restarted worker not ready within listen_timeout: going on", zap.Duration("listen_timeout", s.cfg.ListenTimeout.D()))
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// slotsUnlessStopping returns the slots in order and runs then (when not nil) in the loop,
// unless a stop has begun or been announced (ok false). The caller holds ops.
func (s *Supervisor) slotsUnlessStopping(then func()) (ids []int, ok bool) {
	s.call(func() {
		if ok = !s.stopping && !s.stopAnnounced; ok {
			ids = s.slotIDs()
			if then != nil {
				then()
			}
		}
	})
	return ids, ok
}

// notifyReloaded ends a reload for systemd: READY=1 (the service serves either way) with
// the summary, or why the reload was aborted. Not after STOPPING=1 (a stop that waited
// for this reload): systemd would take the service for running again.
func (s *Supervisor) notifyReloaded(aborted string) {
	s.call(func() {
		if s.stopAnnounced {
			return
		}
		st := aborted
		if st == "" {
			st = s.summary()
		}
		s.lastStatus = st
		s.notify("READY=1\n" + systemd.Status(st))
	})
}

// reloadSlot replaces the slot's worker (if only is not nil, only while it is still the
// current one). The caller holds ops.
func (s *Supervisor) reloadSlot(ctx context.Context, id int, only *proc) error {
	var np *proc
	var err error
	s.call(func() {
		sl := s.slots[id]
		if sl == nil || s.stopping || (only != nil && sl.cur != only) {
			return
		}
		np, err = s.spawn(sl, s.separateGenerations())
		if np != nil {
			np.candidate = true // its start deadline is ours to enforce, gracefully
		}
	})
	if err != nil {
		return err
	}
	if np == nil {
		return nil // slot gone or already replaced
	}
	t := time.NewTimer(s.cfg.ListenTimeout.D())
	defer t.Stop()
	// A worker may accept on the shared socket before it says ready, so even a failed
	// one is drained (SIGKILL after kill_timeout) rather than killed: what it accepted
	// gets answered.
	fail := func(why error) error {
		s.call(func() { s.drain(np) })
		<-np.exited
		return why
	}
	_, away := s.clock.observe(time.Now())
wait:
	for {
		select {
		case <-np.ready:
			break wait
		case <-np.exited:
			return fmt.Errorf("new worker (pid %d) exited before it was ready: %v", np.pid, np.exitErr)
		case <-t.C:
			select { // a ready message read after a stall of ours counts
			case <-np.ready:
				break wait
			default:
			}
			// The supervisor's own stalls do not count against the new worker.
			if _, total := s.clock.observe(time.Now()); total > away {
				t.Reset(total - away)
				away = total
				continue
			}
			// Nor does the time it asked for (EXTEND_TIMEOUT_USEC moves its start clock, as
			// for a worker started outside a reload).
			var left time.Duration
			s.call(func() { left = time.Until(np.startClock.Add(s.cfg.ListenTimeout.D())) })
			if left > 0 {
				t.Reset(left)
				continue
			}
			strict := true
			s.call(func() { strict = s.signals })
			if !strict { // a program that never signals: PM2's reload goes on after the wait
				np.log.Warn("new worker said nothing within listen_timeout: taking it as ready", zap.Duration("listen_timeout", s.cfg.ListenTimeout.D()))
				break wait
			}
			return fail(fmt.Errorf("new worker (pid %d) not ready within listen_timeout %v", np.pid, s.cfg.ListenTimeout.D()))
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	promoted := false
	s.call(func() {
		sl := s.slots[id]
		if sl == nil || s.stopping {
			return
		}
		old := sl.cur
		if sl.timer != nil {
			sl.timer.Stop()
		}
		sl.cur, sl.state, promoted = np, "", true
		grace := time.Duration(0)
		if np.socket != nil { // the new generation's socket takes the slot's turns
			prev := sl.file
			sl.file, sl.steered = np.socket, s.register(id, np.socket)
			s.storeSocket(sl)
			np.socket = nil
			s.updateSteering()
			switch {
			case old != nil:
				old.retired = prev // closed when it exits: what is still queued there moves
				grace = retireGrace
			case prev != nil:
				prev.Close()
			}
		}
		np.candidate = false
		sl.unstable, sl.crashes = 0, 0 // a deliberate new start gets a fresh restart budget
		sl.restarts++
		if np.state == StateLaunching { // ready arrived but its event is still queued
			np.state, np.readyAt, np.lastHeard, np.prevReqAt = StateOnline, time.Now(), time.Now(), time.Now()
			np.askedAt = time.Time{}
		}
		if old != nil {
			s.drainAfter(old, grace)
		}
	})
	if !promoted {
		return fail(ErrStopped)
	}
	return nil
}

// SetEnv replaces the env (Config.Env) that every worker started from now on gets, as
// `reload --update-env` does before its reload: the reload then rolls it into every
// worker, and a worker restarted after a crash gets it too.
func (s *Supervisor) SetEnv(env map[string]string) error {
	env = maps.Clone(env)
	if !s.call(func() { s.cfg.Env = env }) {
		return ErrStopped
	}
	return nil
}

// ParseScale parses `scale` arguments: N sets the count, +N and -N change it.
func ParseScale(arg string) (n int, relative bool, err error) {
	relative = strings.HasPrefix(arg, "+") || strings.HasPrefix(arg, "-")
	n, err = strconv.Atoi(arg)
	if err != nil || (!relative && n < 1) {
		return 0, false, fmt.Errorf("%q is not N (1 to %d), +N or -N", arg, MaxInstances)
	}
	return n, relative, nil
}

// Scale sets the number of slots to n, or changes it by n when relative. New slots get
// the lowest free indexes and Scale waits for them to be ready; removed slots (the highest
// indexes) are drained before their sockets close.
func (s *Supervisor) Scale(ctx context.Context, n int, relative bool) error {
	s.ops.Lock()
	defer s.ops.Unlock()
	var cur int
	if !s.call(func() { cur = len(s.slots) }) || s.stopping {
		return ErrStopped
	}
	target := n
	if relative {
		target = cur + n
	}
	if target < 1 || target > MaxInstances {
		if relative {
			return fmt.Errorf("%+d from %d workers leaves %d: want 1 to %d workers (%+d to %+d from here)",
				n, cur, target, MaxInstances, 1-cur, MaxInstances-cur)
		}
		return fmt.Errorf("%d workers is out of range: want 1 to %d", target, MaxInstances)
	}
	s.log.Info("scaling", zap.Int("from", cur), zap.Int("to", target))
	s.scales.Add(1)
	var added []*proc
	var err error
	for id := cur; id < target; id++ {
		s.call(func() {
			sl := &slot{id: id}
			if !s.ownSockets() {
				if err = s.openSocket(sl); err != nil {
					return
				}
			}
			s.count = target
			s.slots[id] = sl
			s.launch(sl)
			if sl.cur != nil {
				added = append(added, sl.cur)
			}
		})
		if err != nil {
			return fmt.Errorf("scale up slot %d: %w", id, err)
		}
	}
	for _, p := range added {
		select {
		case <-p.ready:
		case <-p.exited:
			return fmt.Errorf("scale: new worker in slot %d (pid %d) exited before it was ready", p.slot, p.pid)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for id := cur - 1; id >= target; id-- {
		var p *proc
		s.call(func() {
			sl := s.slots[id]
			delete(s.slots, id)
			s.count = target
			if sl.timer != nil {
				sl.timer.Stop()
			}
			// Out of the steering first, then close our copy, so that the socket closes
			// as soon as the worker stops accepting, and no new connection is sent to it
			// meanwhile.
			s.updateSteering()
			s.closeSocket(sl)
			if p = sl.cur; p != nil {
				s.drain(p)
			}
		})
		if p != nil {
			<-p.exited // bounded by kill_timeout
		}
	}
	return nil
}
