package detach

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
)

// startWatch follows the status replies start polls. A program without wait_ready is
// online from the moment it is started, so online alone does not say it stays up: a
// worker counts as up once it has been seen online, as the same process, for startStable,
// and start returns only then. An app whose every worker has been restarted
// startCrashRestarts times with none up since exits at start (status carries each slot's
// restarts, not when it was last up: that is what the polls remember). A slow starter is
// launching, not restarted, and is waited for.
type startWatch map[string]*slotSeen // by "APP ID"

// slotSeen is what the polls saw of one slot.
type slotSeen struct {
	pid    int
	online time.Time // since when this pid has been seen online; zero: not online
	base   int       // the slot's restarts when it was last up
}

// startStable is how long a worker seen online must stay so (the same process) to count
// as up: the default min_uptime, under which an exit counts as an unstable start.
const startStable = cluster.DefaultMinUptime

// startCrashRestarts is how many restarts without being up make a crash loop for start:
// under the default backoff (100 ms, ×1.5) about half a second of them.
const startCrashRestarts = 3

// crashLoop is an app found crash-looping, and the first of its workers.
type crashLoop struct {
	app      string
	id       int
	restarts int // the fewest of its workers', since they were last up
}

func slotKey(w control.Worker) string { return w.App + " " + strconv.Itoa(w.ID) }

// observe records a status reply taken at now.
func (sw startWatch) observe(st control.Status, now time.Time) {
	for _, w := range st.Workers {
		s := sw[slotKey(w)]
		if s == nil {
			s = &slotSeen{}
			sw[slotKey(w)] = s
		}
		switch {
		case w.Status != cluster.StateOnline && w.Status != cluster.StateNotServing:
			s.online = time.Time{}
		case s.online.IsZero() || s.pid != w.PID:
			s.online = now
		}
		s.pid = w.PID
		if sw.up(w, now) {
			s.base = w.Restarts
		}
	}
}

// up: the worker has been online, as one process, for startStable at now.
func (sw startWatch) up(w control.Worker, now time.Time) bool {
	s := sw[slotKey(w)]
	return s != nil && !s.online.IsZero() && s.pid == w.PID && now.Sub(s.online) >= startStable
}

// settled reports whether every running app has workers and each of them is up, or has
// ended for good (appsSettled).
func (sw startWatch) settled(st control.Status, now time.Time) bool {
	if !appsSettled(st) {
		return false
	}
	for _, w := range st.Workers {
		if (w.Status == cluster.StateOnline || w.Status == cluster.StateNotServing) && !sw.up(w, now) {
			return false
		}
	}
	return true
}

// looping returns the first app (in status order) whose every worker is crash-looping.
func (sw startWatch) looping(st control.Status) (crashLoop, bool) {
	var order []string
	loops := map[string]*crashLoop{}
	bad := map[string]bool{} // an app with a worker up, stopped, or not restarted enough
	for _, w := range st.Workers {
		base := 0
		if s := sw[slotKey(w)]; s != nil {
			base = s.base
		}
		n := w.Restarts - base
		l, seen := loops[w.App]
		if !seen {
			order = append(order, w.App)
			l = &crashLoop{app: w.App, id: w.ID, restarts: n}
			loops[w.App] = l
		}
		l.restarts = min(l.restarts, n)
		if w.Status == cluster.StateStopped || w.Status == cluster.StateStopping || n < startCrashRestarts {
			bad[w.App] = true
		}
	}
	for _, app := range order {
		if !bad[app] {
			return *loops[app], true
		}
	}
	return crashLoop{}, false
}

// workerLog is the own log file of the loop's first worker in dir (-log-dir's: DIR/APP-ID.log,
// APP the app's name, or for an app without one its program's), "" without a dir: the
// named app's, else the newest file of that slot.
func (l crashLoop) workerLog(dir string) string {
	if dir == "" {
		return ""
	}
	slot := "-" + strconv.Itoa(l.id) + ".log"
	if l.app != "" {
		return filepath.Join(dir, l.app+slot)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"+slot))
	newest, at := "", time.Time{}
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.ModTime().After(at) {
			newest, at = f, fi.ModTime()
		}
	}
	return newest
}

// appsSettled reports whether every running app has workers and each of them is online,
// or has ended for good: stopped (a one-shot job under autorestart: false that finished,
// PM2's stopped) or errored (out of restarts). Waiting on those would wait the whole
// startOnlineTimeout for nothing.
func appsSettled(st control.Status) bool {
	if len(st.Workers) == 0 {
		return false
	}
	for _, w := range st.Workers {
		switch w.Status {
		case cluster.StateOnline, cluster.StateStopped, cluster.StateErrored:
		default:
			return false
		}
	}
	return true
}

// erroredWorkers names the workers out of restarts ("api 1"), none when all went well.
func erroredWorkers(st control.Status) []string {
	var out []string
	for _, w := range st.Workers {
		if w.Status == cluster.StateErrored {
			out = append(out, strings.TrimSpace(w.App+" "+strconv.Itoa(w.ID)))
		}
	}
	return out
}
