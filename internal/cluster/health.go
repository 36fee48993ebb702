// Hearing from the workers: ipc messages, stats polls, /proc samples, and the periodic
// checks (heartbeats, start deadlines, memory, silence).

package cluster

import (
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/procstat"
)

// healthOf reads the health a stats answer reports (see ipc.Msg): "" when it says nothing.
func healthOf(m ipc.Msg) (health, why string) {
	switch {
	case m.Healthy:
		return HealthOK, ""
	case m.Error != "":
		return HealthUnhealthy, m.Error
	}
	return "", ""
}

// read forwards the worker's messages to the loop.
func (s *Supervisor) read(p *proc) {
	for {
		m, err := p.conn.Recv()
		if err != nil {
			return
		}
		s.post(func() { s.message(p, m) })
	}
}

// poll asks the worker for its counters and samples /proc every stats_interval.
func (s *Supervisor) poll(p *proc) {
	t := time.NewTicker(s.cfg.StatsInterval.D())
	defer t.Stop()
	var tree *procstat.Tree // this goroutine's; made at the first tick
	for round := 1; ; round++ {
		select {
		case <-p.exited:
			return
		case <-t.C:
		}
		// Start the silence clock before the request leaves, so that the answer always
		// finds it started and stops it.
		speaks := false
		if !s.call(func() {
			if speaks = p.speaksIPC; speaks && p.askedAt.IsZero() {
				p.askedAt = time.Now()
			}
		}) {
			return
		}
		if speaks { // a program that never spoke ipc is not asked (nor judged): it may not read it
			p.conn.Send(ipc.Msg{Type: ipc.TypeStats}) // an error means it is exiting: waiter handles it
		} else {
			s.readListeners(p, round) // does it serve its slot? (serving.go)
		}
		// The worker's whole process tree, not the main process alone: a gunicorn's forked
		// workers are most of its CPU and memory, and max_memory_restart must see them.
		// Tree rescans all of /proc only every few readings, so this stays cheap.
		if tree == nil {
			var err error
			if tree, err = procstat.NewTree(procstat.TreeConfig{PID: p.pid}); err != nil {
				continue // gone before its first reading: its waiter reports the exit
			}
		}
		u, err := tree.Read()
		if err != nil {
			continue
		}
		ticks, rss := uint64(u.CPU/(time.Second/clockTicks)), u.RSS
		now := time.Now()
		s.post(func() { s.sample(p, now, ticks, rss) })
	}
}

// message handles one ipc message (loop only).
func (s *Supervisor) message(p *proc, m ipc.Msg) {
	now := time.Now()
	p.lastHeard, p.askedAt = now, time.Time{}
	p.speaksIPC = true
	switch m.Type {
	case ipc.TypeReady:
		p.rejoins = m.Rejoin
		s.becameReady(p, readyIPC)
	case ipc.TypeStats:
		if !p.prevReqAt.IsZero() && m.Requests >= p.prevReq {
			if dt := now.Sub(p.prevReqAt).Seconds(); dt > 0 {
				p.rps = float64(m.Requests-p.prevReq) / dt
			}
		}
		p.requests, p.prevReq, p.prevReqAt = m.Requests, m.Requests, now
		p.connections, p.loopConns = m.Connections, m.LoopConnections
		if m.Report != nil {
			p.report = m.Report
		}
		if m.Role != p.role && m.Role != "" {
			// Logged as said, whatever the words: the supervisor does not interpret them.
			p.log.Info("worker's role changed", zap.String("role", m.Role), zap.String("was", p.role))
			p.role = m.Role
		}
		if m.NotServing != p.serve.notServing && p.state == StateOnline {
			// The worker's own word, for a worker that speaks ipc (checkServing judges
			// only those that do not): logged on change, as the health below.
			if m.NotServing != "" {
				p.log.Warn("worker says it must not be sent traffic: status shows it not-serving", zap.String("why", m.NotServing))
			} else {
				p.log.Info("worker takes traffic again")
			}
			p.serve.notServing = m.NotServing
		}
		if h, why := healthOf(m); h != "" && (h != p.health || why != p.healthErr) {
			// Log changes only, as the worker does.
			if h == HealthUnhealthy {
				p.log.Error("worker reports itself unhealthy", zap.String("error", why))
			} else if p.health != "" {
				p.log.Info("worker healthy again")
			}
			p.health, p.healthErr = h, why
		}
	}
}

// sample records CPU and memory (loop only) and starts a memory restart when due.
func (s *Supervisor) sample(p *proc, now time.Time, ticks uint64, rss int64) {
	if !p.cpuAt.IsZero() && ticks >= p.cpuTicks {
		if dt := now.Sub(p.cpuAt).Seconds(); dt > 0 {
			p.cpuPercent = float64(ticks-p.cpuTicks) / clockTicks / dt * 100
		}
	}
	p.cpuTicks, p.cpuAt, p.rss = ticks, now, rss
	lim := int64(s.cfg.MaxMemoryRestart)
	sl := s.slots[p.slot]
	if lim > 0 && rss > lim && sl != nil && sl.cur == p && p.state == StateOnline && !s.stopping {
		p.log.Warn("worker over max_memory_restart: reloading its slot", zap.Int64("rss_bytes", rss), zap.Int64("limit", lim))
		go func() {
			if !s.ops.TryLock() {
				return // another operation runs; the next sample retries
			}
			defer s.ops.Unlock()
			if err := s.reloadSlot(s.ctx, p.slot, p); err != nil {
				s.log.Error("memory restart", zap.Int("slot", p.slot), zap.Error(err))
			}
		}()
	}
}

// stallAllowance is the longest gap between the loop's observations of the stall clock
// that is not a stall: one stats_interval late, at least a quarter of a second.
func stallAllowance(statsInterval time.Duration) time.Duration {
	return statsInterval + max(statsInterval/2, 250*time.Millisecond)
}

// check kills workers that missed their heartbeat or their start deadline (loop only).
//
// Silence is judged from stats requests actually sent and left unanswered for
// heartbeat_timeout, and never right after the supervisor itself was away (stallClock):
// then every clock restarts. At most one worker is killed for silence per
// heartbeat_timeout, and none when every worker of two or more is silent at once: that is
// the host's or the supervisor's trouble, and killing them all would turn it into an
// outage. Nor while the cluster wakes from such a silence, one worker after another (hush).
func (s *Supervisor) check() {
	now := time.Now()
	// Another judge (a reload) may have observed the stall first: react to the total.
	if _, total := s.clock.observe(now); total > s.stallSeen {
		stall := total - s.stallSeen
		s.stallSeen = total
		s.log.Warn("supervisor was not running (stopped, paused VM, swap storm?): heartbeat and start clocks restarted, nothing judged",
			zap.Duration("away", stall))
		for p := range s.procs {
			p.askedAt = time.Time{}
			p.startClock = p.startClock.Add(stall)
			if !p.lastWatchdog.IsZero() {
				p.lastWatchdog = now
			}
		}
		return
	}
	var silent []*proc
	silence := map[*proc]time.Time{} // since when each silent one is silent
	online := 0
	for p := range s.procs {
		switch {
		case p.state == StateOnline:
			online++
			if !p.askedAt.IsZero() && now.Sub(p.askedAt) > s.cfg.HeartbeatTimeout.D() {
				silent, silence[p] = append(silent, p), p.askedAt
			} else if wd := s.cfg.WatchdogSec.D(); wd > 0 && !p.lastWatchdog.IsZero() && now.Sub(p.lastWatchdog) > wd {
				silent, silence[p] = append(silent, p), p.lastWatchdog
			}
		case p.state == StateLaunching && !p.candidate && now.Sub(p.startClock) > s.cfg.ListenTimeout.D():
			if !s.signals {
				// PM2's wait_ready: a program that says nothing is online after the wait.
				p.log.Warn("worker said nothing within listen_timeout: online anyway", zap.Duration("listen_timeout", s.cfg.ListenTimeout.D()))
				s.becameReady(p, readyLate)
				break
			}
			p.log.Error("worker not ready within listen_timeout: killing it", zap.Duration("listen_timeout", s.cfg.ListenTimeout.D()))
			p.state = StateStopping
			p.kill()
		}
	}
	hb := s.cfg.HeartbeatTimeout.D()
	if online >= 2 && len(silent) == online {
		if s.hush == nil {
			s.hush = newHush(now)
		}
		s.hush.silent(silent)
		if now.Sub(s.lastAllSilent) >= hb {
			s.lastAllSilent = now
			s.log.Error("every worker is silent at once: the host or the supervisor is in trouble, not the workers; killing none",
				zap.Int("workers", online), zap.Duration("heartbeat_timeout", hb))
		}
		return
	}
	// After a whole-cluster silence the workers wake one after another, and the first to
	// answer would make the rest look like a partial silence: judge none until each has
	// been heard from again, or until they stopped waking (hush.over).
	if s.hush != nil {
		if !s.hush.over(now, hb, func(p *proc) bool { _, live := s.procs[p]; return live && p.state == StateOnline }) {
			return
		}
		s.log.Info("the cluster woke from its silence: judging heartbeats again", zap.Int("still_silent", len(s.hush.members)-s.hush.woken),
			zap.Duration("silence_began", now.Sub(s.hush.since)))
		s.hush = nil
	}
	if len(silent) == 0 {
		return
	}
	if online >= 2 && !s.othersHeard(silent, now, hb/2) {
		// At the onset of a whole-cluster silence the workers cross heartbeat_timeout one
		// stats round apart (each is asked on its own ticker), and the first would look
		// silent alone. A worker is silent on its own only while others answer: wait until
		// one is heard, or the next check finds them all silent.
		return
	}
	if now.Sub(s.lastSilenceKill) < hb {
		return // one at a time: the next one, if still silent, after another heartbeat_timeout
	}
	p := slices.MinFunc(silent, func(a, b *proc) int { return silence[a].Compare(silence[b]) })
	p.log.Error("worker missed its heartbeat: killing it", zap.Duration("silent", now.Sub(silence[p])))
	s.lastSilenceKill = now
	p.state = StateStopping
	p.kill()
}

// othersHeard reports whether an online worker outside silent was heard from within
// recent of now (loop only).
func (s *Supervisor) othersHeard(silent []*proc, now time.Time, recent time.Duration) bool {
	for p := range s.procs {
		if p.state == StateOnline && !slices.Contains(silent, p) && now.Sub(p.lastHeard) < recent {
			return true
		}
	}
	return false
}
