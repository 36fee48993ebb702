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
