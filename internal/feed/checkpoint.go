package feed

import (
	"errors"
	"time"

	"go.uber.org/zap"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/onehost/onehost/internal/sqlitec"
	"github.com/onehost/onehost/internal/writepath"
)

// checkpointLoop is the checkpointer: a PASSIVE checkpoint every interval, or every
// interval/10 while the WAL holds more than frames frames, until Close.
func (s *Store) checkpointLoop(c *sqlitec.Conn, interval time.Duration, frames int, restartWait time.Duration) {
	defer close(s.done)
	defer c.Close()
	timer := time.NewTimer(interval)
	defer timer.Stop()
	// PRAGMA data_version on this connection changes whenever another connection, in any
	// process, committed: how several read connections learn that the file is quiet.
	version, _ := c.QueryText("PRAGMA data_version")
	var lastCommit time.Time
	for {
		select {
		case <-s.stop:
			return
		case <-timer.C:
		}
		if v, err := c.QueryText("PRAGMA data_version"); err == nil {
			now := time.Now()
			if v != version {
				version, lastCommit = v, now
				s.setQuiet(false)
			} else if now.Sub(lastCommit) >= readsQuietAfter {
				s.setQuiet(true)
			}
		}
		next := interval
		began := writepath.Now()
		nLog, nCkpt, err := c.Checkpoint(sqlite3.SQLITE_CHECKPOINT_PASSIVE)
		if err == nil && (nLog-nCkpt > 4*frames || nLog > 16*frames) {
			// Other processes outran it (frames left behind), or the WAL was copied but
			// never restarted (a reader in some process always held a snapshot in it):
			// wait for every writer and reader, copy all, restart the WAL.
			c.SetBusyTimeout(restartWait)
			nLog, nCkpt, err = c.Checkpoint(sqlite3.SQLITE_CHECKPOINT_RESTART)
			c.SetBusyTimeout(0)
			s.restarts.Add(1)
		}
		s.wp.Checkpoint(began)
		var se *sqlitec.Error
		switch {
		case errors.As(err, &se) && isBusy(se.Code):
			// Another process is checkpointing: its checkpoint serves this one too.
			s.checkpointsBusy.Add(1)
		case err != nil:
			s.log.Warn("checkpoint failed", zap.Error(err))
		default:
			s.checkpoints.Add(1)
			s.walFrames.Store(int64(nLog))
			if nLog > frames {
				next = interval / 10
				s.log.Debug("wal is large", zap.Int("frames", nLog), zap.Int("checkpointed", nCkpt))
			}
		}
		timer.Reset(next)
	}
}
