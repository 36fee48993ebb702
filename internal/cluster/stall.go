package cluster

import (
	"sync"
	"time"
)

// stallClock tells the supervisor's own absences apart from its workers' silences. A
// supervisor that was not running (SIGSTOP, a paused VM, a swap storm, a debugger) finds,
// once it runs again, every worker's answers unread and every deadline past, while the
// workers served the whole time; judging then would kill them all. Every judgment of a
// deadline therefore first observes the clock: a gap between two observations longer than
// allowed means the supervisor was away, and the judge restarts its clocks instead.
//
// The loop observes it every stats_interval; other judges (a reload waiting for its new
// worker) observe it when their timer fires. Safe for concurrent use.
type stallClock struct {
	allowed time.Duration // the longest gap between observations that is not a stall

	mu    sync.Mutex
	last  time.Time
	total time.Duration // every stall so far, summed
}

func newStallClock(allowed time.Duration, now time.Time) *stallClock {
	return &stallClock{allowed: allowed, last: now}
}

// observe records that the supervisor runs at now. It returns the stall it found since the
// previous observation (0: none) and the sum of all stalls so far, this one included.
func (c *stallClock) observe(now time.Time) (stall, total time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gap := now.Sub(c.last); gap > c.allowed {
		stall = gap
		c.total += gap
	}
	if now.After(c.last) {
		c.last = now
	}
	return stall, c.total
}

// hushGrace is how many heartbeat_timeouts the workers still silent after a whole-cluster
// silence are given after the last of the others woke, before they are judged.
const hushGrace = 2

// hush is a whole-cluster silence and the cluster's waking from it (loop only). When every
// worker is silent at once (a host frozen or swapping, every worker stopped together), the
// supervisor kills none; but the workers do not wake at once, and the first to answer would
// turn the rest into a partial silence, one of them killed per heartbeat_timeout. So the
// silence is remembered: no worker is judged until each of those that were silent has been
// heard from since it began (or has exited), or until none has woken for hushGrace
// heartbeat_timeouts since the last one did (the time the whole cluster was silent does
// not count). A worker still silent then is silent on its own, and judged as usual.
type hush struct {
	since   time.Time      // when every worker was found silent
	thaw    time.Time      // when the last member woke (or the first answer came); zero while all are silent
	members map[*proc]bool // the workers silent together; true: heard from since
	woken   int
}

func newHush(now time.Time) *hush { return &hush{since: now, members: map[*proc]bool{}} }

// silent records that every worker is silent, again perhaps: ps join the silence, and the
// waking clock waits for the next answer.
func (h *hush) silent(ps []*proc) {
	for _, p := range ps {
		if _, ok := h.members[p]; !ok {
			h.members[p] = false
		}
	}
	h.thaw = time.Time{}
}

// over reports whether silence may be judged again at now, some worker being heard from.
// live tells the members still worth waiting for (online) from those gone.
func (h *hush) over(now time.Time, heartbeat time.Duration, live func(*proc) bool) bool {
	if h.thaw.IsZero() {
		h.thaw = now
	}
	waiting := 0
	for p, heard := range h.members {
		switch {
		case heard:
		case !live(p):
			delete(h.members, p)
		case p.lastHeard.After(h.since):
			h.members[p] = true
			h.woken++
			h.thaw = now
		default:
			waiting++
		}
	}
	return waiting == 0 || now.Sub(h.thaw) > hushGrace*heartbeat
}
