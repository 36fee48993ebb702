package main

// The worker in a fleet (`supervisor run -fleet ...` sets ONEHOST_FLEET and the rest,
// internal/fleetspec): its Store's writes go through the fleet's write log
// (internal/writelog, adapted to feed.Log here so that internal/feed links no NATS), and
// before it opens the file it makes sure the file can follow the log (feed.RestoreFromLog:
// a missing file, or one the log was purged past, starts from the latest snapshot).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/feed"
	"github.com/onehost/onehost/internal/fleetspec"
	"github.com/onehost/onehost/internal/writelog"
)

// EnvSnapshotEvery overrides feed.Options.SnapshotEvery (the tests take snapshots often).
const EnvSnapshotEvery = "ONEHOST_FLEET_SNAPSHOT_EVERY"

// parseFleet reads the fleet's settings from the environment the supervisor set.
func (c *serveConfig) parseFleet(getenv func(string) string) error {
	spec, ok, err := fleetspec.FromEnv(getenv)
	if err != nil {
		return err
	}
	if !ok {
		return nil
	}
	c.fleet = &spec
	if v := getenv(EnvSnapshotEvery); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%s %q: want a number of messages (0: no snapshots, for measurements)", EnvSnapshotEvery, v)
		}
		if n == 0 {
			n = feed.NoSnapshots
		}
		c.store.SnapshotEvery = n
	}
	return nil
}

// logStartWait bounds how long a worker waits at start for the fleet's log (its stream is
// created once the hosts' nodes have formed their cluster: seconds).
const logStartWait = 60 * time.Second

// openFleetLog connects to the fleet's log and readies the database file for it.
func openFleetLog(ctx context.Context, cfg serveConfig, log *zap.Logger) (*fleetLog, error) {
	ctx, cancel := context.WithTimeout(ctx, logStartWait)
	defer cancel()
	l, err := writelog.Open(ctx, writelog.Config{Spec: *cfg.fleet, Logger: log, Name: "worker " + strconv.Itoa(cfg.workerID)})
	if err != nil {
		return nil, err
	}
	fl := &fleetLog{l}
	for {
		_, err = feed.RestoreFromLog(ctx, cfg.db, fl, log)
		if err == nil || ctx.Err() != nil || err == feed.ErrNoDatabase {
			break
		}
		log.Info("waiting for the fleet's write log", zap.Error(err))
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	if err != nil {
		l.Close()
		return nil, err
	}
	return fl, nil
}

// fleetLog is writelog.Log as a feed.Log and a feed.SnapshotSource.
type fleetLog struct{ *writelog.Log }

// Follow hands apply the messages as feed.LogMsg.
func (f *fleetLog) Follow(ctx context.Context, after uint64, apply func([]feed.LogMsg) error) error {
	var buf []feed.LogMsg
	return f.Log.Follow(ctx, after, func(msgs []writelog.Msg) error {
		buf = buf[:0]
		for _, m := range msgs {
			buf = append(buf, feed.LogMsg{Seq: m.Seq, ID: m.ID, Data: m.Data})
		}
		return apply(buf)
	})
}

// GetSnapshot is the log's, its "no snapshot yet" said in feed's words (the error as it
// was, which errors.Is finds feed.ErrNoSnapshot in).
func (f *fleetLog) GetSnapshot(ctx context.Context, w io.Writer) (uint64, error) {
	seq, err := f.Log.GetSnapshot(ctx, w)
	if errors.Is(err, writelog.ErrNoSnapshot) {
		err = noSnapshot{err}
	}
	return seq, err
}

// noSnapshot is writelog.ErrNoSnapshot as feed.ErrNoSnapshot.
type noSnapshot struct{ error }

func (noSnapshot) Is(target error) bool { return target == feed.ErrNoSnapshot }
func (e noSnapshot) Unwrap() error      { return e.error }
