package feed

// Snapshots and the restore. The host that leads (the first live host by name) takes a
// snapshot of its file every SnapshotEvery messages, and once at the start when the log
// holds none: VACUUM INTO a file beside the database (a consistent copy read in one read
// transaction, without blocking the writer; the header, and so the sequence it holds,
// comes along), put in the log's object store; then the log is purged below what the
// snapshot and every live host hold. A host whose file is missing, or older than the
// log's first message, starts from the latest snapshot (RestoreFromLog).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/onehost/onehost/internal/sqlitec"
)

// snapshotDelay: an applier takes no snapshot in its first seconds, while it has not yet
// heard every host's report (each would think it leads).
const snapshotDelay = 2 * time.Second

// maybeSnapshot starts a snapshot in the background when one is due here: the applier
// runs (for snapshotDelay at least), this host leads, and the log holds no snapshot yet or
// SnapshotEvery messages were applied since the last one. (The janitor asks.)
func (w *logWriter) maybeSnapshot() {
	applied := w.lastApplied.Load()
	since := w.since.Load()
	if w.every == NoSnapshots || since == 0 || time.Since(time.Unix(0, since)) < snapshotDelay || w.snapshotting.Load() {
		return
	}
	if w.hasSnap.Load() && applied < w.lastSnap.Load()+w.every {
		return
	}
	if !w.log.Leads() {
		return
	}
	if !w.snapshotting.CompareAndSwap(false, true) {
		return
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer w.snapshotting.Store(false)
		if err := w.snapshot(); err != nil {
			w.lg.Warn("write log: snapshot failed (the next one is tried later)", zap.Error(err))
		}
	}()
}

// snapshot takes, stores and purges (see the top of this file).
func (w *logWriter) snapshot() error {
	began := time.Now()
	tmp := w.s.path + ".snapshot"
	os.Remove(tmp)
	defer os.Remove(tmp)
	seq, err := vacuumInto(w.s.path, tmp)
	if err != nil {
		return err
	}
	if w.hasSnap.Load() && seq <= w.lastSnap.Load() {
		return nil // nothing new since the last one
	}
	f, err := os.Open(tmp)
	if err != nil {
		return err
	}
	defer f.Close()
	st, _ := f.Stat()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := w.log.PutSnapshot(ctx, seq, f); err != nil {
		return err
	}
	w.lastSnap.Store(seq)
	w.hasSnap.Store(true)
	keep := seq
	if m, ok := w.log.MinLiveApplied(); ok && m < keep {
		keep = m
	}
	if keep > 0 {
		if err := w.log.Purge(ctx, keep+1); err != nil {
			return err
		}
	}
	w.lg.Info("write log: snapshot stored, log purged", zap.Uint64("seq", seq), zap.Int64("bytes", st.Size()),
		zap.Uint64("purged_below", keep+1), zap.Duration("took", time.Since(began)))
	return nil
}

// vacuumInto writes a compact copy of the database at path to dst and returns the
// sequence the copy holds.
func vacuumInto(path, dst string) (uint64, error) {
	c, err := sqlitec.Open(path, sqlite3.SQLITE_OPEN_READONLY)
	if err != nil {
		return 0, fmt.Errorf("snapshot: open: %w", err)
	}
	defer c.Close()
	c.SetBusyTimeout(5 * time.Second)
	if err := c.Exec("VACUUM INTO '" + strings.ReplaceAll(dst, "'", "''") + "'"); err != nil {
		return 0, fmt.Errorf("snapshot: vacuum into %s: %w", dst, err)
	}
	return filePosition(dst)
}

// filePosition reads the sequence the database file at path holds.
func filePosition(path string) (uint64, error) {
	c, err := sqlitec.Open(path, sqlite3.SQLITE_OPEN_READONLY)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	defer c.Close()
	c.SetBusyTimeout(5 * time.Second)
	pos, err := positionOf(c)
	if err != nil {
		return 0, fmt.Errorf("read the applied sequence of %s: %w", path, err)
	}
	return pos, nil
}

// SnapshotSource is what RestoreFromLog needs of the fleet's log.
type SnapshotSource interface {
	// Bounds are the log's first and last sequences.
	Bounds(ctx context.Context) (first, last uint64, err error)
	// GetSnapshot writes the latest snapshot to w and returns its sequence; its error
	// is ErrNoSnapshot (errors.Is) when the log holds none yet.
	GetSnapshot(ctx context.Context, w io.Writer) (uint64, error)
}

// ErrNoSnapshot is a SnapshotSource's answer when its log holds no snapshot yet.
var ErrNoSnapshot = errors.New("the write log holds no snapshot yet")

// ErrNoDatabase reports a fleet host with no database and no snapshot to start from.
var ErrNoDatabase = errors.New("no database file here and no snapshot in the write log: seed the first host's file (worker seed -db PATH) and start it; the other hosts start from its snapshot")

// RestoreFromLog makes the database at path one the fleet's log can be applied to,
// before it is opened: when the file is missing, or holds a sequence the log was purged
// past, it is replaced by the log's latest snapshot (downloaded beside it, synced, and
// renamed over it, its old -wal and -shm removed). The processes of one host call it
// together: an flock on PATH.restore makes one of them do it. It reports whether it
// restored. A fleet's host must not have the file open meanwhile (the workers call it
// before they open the Store).
func RestoreFromLog(ctx context.Context, path string, src SnapshotSource, log *zap.Logger) (bool, error) {
	unlock, err := lockFile(ctx, path+".restore")
	if err != nil {
		return false, fmt.Errorf("restore from the write log: %w", err)
	}
	defer unlock()
	first, _, err := src.Bounds(ctx)
	if err != nil {
		return false, fmt.Errorf("restore from the write log: %w", err)
	}
	_, serr := os.Stat(path)
	missing := errors.Is(serr, os.ErrNotExist) // under the restore lock: it stays so
	if serr == nil {
		pos, err := filePosition(path)
		if err != nil {
			return false, fmt.Errorf("restore from the write log: %w", err)
		}
		if first == 0 || first <= pos+1 {
			return false, nil // the log holds every message after pos
		}
		log.Warn("the database is older than the write log's first message: starting again from the latest snapshot",
			zap.String("db", path), zap.Uint64("holds", pos), zap.Uint64("log_first", first))
	} else if !missing {
		return false, fmt.Errorf("restore from the write log: %w", serr)
	}
	tmp := path + ".restoring"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return false, fmt.Errorf("restore from the write log: %w", err)
	}
	defer os.Remove(tmp)
	seq, err := src.GetSnapshot(ctx, f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if missing && errors.Is(err, ErrNoSnapshot) {
			return false, ErrNoDatabase
		}
		return false, fmt.Errorf("restore from the write log: %w", err)
	}
	if pos, err := filePosition(tmp); err != nil || pos != seq {
		return false, fmt.Errorf("restore from the write log: the snapshot says %d and holds %d (%v)", seq, pos, err)
	}
	for _, side := range []string{path + "-wal", path + "-shm"} {
		if err := os.Remove(side); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("restore from the write log: %w", err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return false, fmt.Errorf("restore from the write log: %w", err)
	}
	log.Info("database restored from the write log's snapshot", zap.String("db", path), zap.Uint64("holds", seq))
	return true, nil
}
