package feed

import (
	"errors"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/onehost/onehost/internal/sqlitec"
)

// first runs the first step of the statement st, resetting and repeating it while it
// fails with a lock conflict, until BusyTimeout passes; it returns the last result.
// (A read can only meet a lock when its transaction begins, at the first step.)
func (s *Store) first(c *sqlitec.Conn, st sqlitec.Stmt) int32 {
	rc := c.Step(st)
	if !isBusy(rc) {
		return rc
	}
	var rs retryState
	for isBusy(rc) && s.wait(&rs, rc) {
		c.Reset(st)
		rc = c.Step(st)
	}
	return rc
}

// retryErr is retry for the setup calls that report errors.
func (s *Store) retryErr(f func() error) error {
	var st retryState
	for {
		err := f()
		var se *sqlitec.Error
		if !errors.As(err, &se) || !isBusy(se.Code) || !s.wait(&st, se.Code) {
			return err
		}
	}
}

// retryState is the progress of one call's lock waits.
type retryState struct {
	tries    int
	deadline time.Time
}

// wait sleeps before the next try after a lock conflict and reports whether to try again
// (false once BusyTimeout has passed since the first try). The sleeps are jittered
// (so that processes that collided do not collide again) and grow from ~15–45 µs to at
// most ~250–750 µs: the lock is normally held for ~0.1 ms. They use nanosleep, which keeps
// this goroutine's thread, because Go's timers wake sub-millisecond sleeps after ~1 ms when
// the process is otherwise idle.
func (s *Store) wait(st *retryState, rc int32) bool {
	now := time.Now()
	if st.tries == 0 {
		st.deadline = now.Add(s.busyTimeout)
	} else if now.After(st.deadline) {
		s.lockTimeouts.Add(1)
		s.log.Warn("gave up waiting for a database lock",
			zap.Int("tries", st.tries), zap.Duration("waited", s.busyTimeout), zap.Int32("rc", rc))
		return false
	}
	d := 30 * time.Microsecond << min(st.tries, 4) // 30 µs … 480 µs
	d = d/2 + rand.N(d)                            // ±50 %
	st.tries++
	s.lockWaits.Add(1)
	ts := unix.NsecToTimespec(int64(d))
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
	return true
}

// isBusy reports whether rc means that another connection holds a lock.
func isBusy(rc int32) bool {
	return rc&0xff == sqlite3.SQLITE_BUSY || rc&0xff == sqlite3.SQLITE_LOCKED
}
