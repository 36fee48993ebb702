// What the cluster tells: Status, WaitOnline, and its systemd notifications (READY=1,
// STATUS=).

package cluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onehost/onehost/internal/systemd"
)

// notify passes a systemd notification to Options.Notify.
func (s *Supervisor) notify(state string) {
	if s.opt.Notify != nil {
		s.opt.Notify(state)
	}
}

// summary is the one-line state of the cluster for STATUS= (loop only).
func (s *Supervisor) summary() string {
	online, errored := 0, 0
	rps := 0.0
	for _, sl := range s.slots {
		switch {
		case sl.cur != nil && sl.cur.state == StateOnline:
			online++
			rps += sl.cur.rps
		case sl.state == StateErrored:
			errored++
		}
	}
	return fmt.Sprintf("%d/%d online, %d errored, %s req/s", online, len(s.slots), errored, groupThousands(int64(rps+0.5)))
}

// groupThousands writes n as 14,200.
func groupThousands(n int64) string {
	d := strconv.FormatInt(n, 10)
	for i := len(d) - 3; i > 0 && d[i-1] != '-'; i -= 3 {
		d = d[:i] + "," + d[i:]
	}
	return d
}

// notifyReady sends READY=1 once every slot's first worker is online or its slot errored
// (loop only).
func (s *Supervisor) notifyReady() {
	if s.readySent || s.stopping || s.stopAnnounced || len(s.slots) == 0 {
		return
	}
	for _, sl := range s.slots {
		online := sl.cur != nil && sl.cur.state == StateOnline
		if !online && sl.state != StateErrored && sl.state != StateStopped {
			return
		}
	}
	s.readySent = true
	s.lastStatus = s.summary()
	s.notify("READY=1\n" + systemd.Status(s.lastStatus))
}

// notifyStatus sends STATUS= when the summary changed (loop only).
func (s *Supervisor) notifyStatus() {
	if !s.readySent || s.stopping {
		return
	}
	if st := s.summary(); st != s.lastStatus {
		s.lastStatus = st
		s.notify(systemd.Status(st))
	}
}

// Status returns one row per slot, in slot order.
func (s *Supervisor) Status() []WorkerStatus {
	var rows []WorkerStatus
	s.call(func() {
		now := time.Now()
		for _, id := range s.slotIDs() {
			sl := s.slots[id]
			r := WorkerStatus{App: s.opt.Name, ID: id, Status: sl.state, Restarts: sl.restarts}
			if p := sl.cur; p != nil {
				r.PID, r.Status = p.pid, p.state
				r.UptimeS = int64(now.Sub(p.started).Seconds())
				r.CPUPercent, r.RSSBytes = p.cpuPercent, p.rss
				r.CPUSeconds = float64(p.cpuTicks) / clockTicks
				r.Requests, r.RPS, r.Connections = p.requests, p.rps, p.connections
				r.LoopConnections = p.loopConns
				r.Health, r.HealthError = p.health, p.healthErr
				r.Role, r.Report = p.role, p.report
				r.Note = p.statusText
				r.NoCounters = !p.speaksIPC && !p.nodeCounters
				r.Adopted = p.adopted
				if p.state == StateOnline && p.serve.notServing != "" {
					r.Status, r.NotServing = StateNotServing, p.serve.notServing
				}
				if p.says != "" { // what it said of its state, then its STATUS=
					r.Note = strings.TrimSuffix(p.says+": "+p.statusText, ": ")
				}
			}
			rows = append(rows, r)
		}
	})
	return rows
}

// slotIDs lists the slots in order (loop only).
func (s *Supervisor) slotIDs() []int {
	ids := make([]int, 0, len(s.slots))
	for id := range s.slots {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// WaitOnline waits until every slot's worker is online, or ctx ends.
func (s *Supervisor) WaitOnline(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		rows := s.Status()
		ok := len(rows) > 0
		for _, r := range rows {
			ok = ok && r.Status == StateOnline
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for workers online: %w (status %+v)", ctx.Err(), rows)
		case <-t.C:
		}
	}
}
