package writelog

// Snapshots. The stream would grow without bound; a snapshot of the database (VACUUM
// INTO, taken by internal/feed with the sequence it holds) is put in the log's own object
// store, replicated like the stream, so a brand-new host needs no other channel: it
// fetches the latest snapshot and follows the stream from the snapshot's sequence on.
// Then the stream is purged below the oldest sequence still needed: the snapshot's, or a
// live host's applied sequence if one is behind it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/onehost/onehost/internal/fleetspec"
)

// snapshotName is the one object: each snapshot replaces the last.
const snapshotName = "latest"

// metaSeq is the object's metadata key for the sequence the snapshot holds.
const metaSeq = "seq"

// ErrNoSnapshot reports that the log holds no snapshot yet.
var ErrNoSnapshot = errors.New("the write log holds no snapshot yet")

// SnapshotSeq returns the sequence the latest snapshot holds (ErrNoSnapshot if none).
func (l *Log) SnapshotSeq(ctx context.Context) (uint64, error) {
	store, err := l.js.ObjectStore(ctx, fleetspec.SnapshotBucket)
	if err != nil {
		return 0, fmt.Errorf("open snapshot store: %w", err)
	}
	info, err := store.GetInfo(ctx, snapshotName)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return 0, ErrNoSnapshot
	}
	if err != nil {
		return 0, fmt.Errorf("read snapshot: %w", err)
	}
	return parseSeq(info.Metadata)
}

func parseSeq(md map[string]string) (uint64, error) {
	seq, err := strconv.ParseUint(md[metaSeq], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read snapshot: its sequence %q: %w", md[metaSeq], err)
	}
	return seq, nil
}

// PutSnapshot stores r, a database holding every write through seq, as the latest
// snapshot.
func (l *Log) PutSnapshot(ctx context.Context, seq uint64, r io.Reader) error {
	store, err := l.js.ObjectStore(ctx, fleetspec.SnapshotBucket)
	if err != nil {
		return fmt.Errorf("open snapshot store: %w", err)
	}
	_, err = store.Put(ctx, jetstream.ObjectMeta{
		Name:        snapshotName,
		Description: "the feed database after write " + strconv.FormatUint(seq, 10),
		Metadata:    map[string]string{metaSeq: strconv.FormatUint(seq, 10)},
	}, r)
	if err != nil {
		return fmt.Errorf("put snapshot: %w", err)
	}
	return nil
}

// GetSnapshot writes the latest snapshot to w and returns the sequence it holds.
func (l *Log) GetSnapshot(ctx context.Context, w io.Writer) (uint64, error) {
	store, err := l.js.ObjectStore(ctx, fleetspec.SnapshotBucket)
	if err != nil {
		return 0, fmt.Errorf("open snapshot store: %w", err)
	}
	obj, err := store.Get(ctx, snapshotName)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return 0, ErrNoSnapshot
	}
	if err != nil {
		return 0, fmt.Errorf("get snapshot: %w", err)
	}
	defer obj.Close()
	info, err := obj.Info()
	if err != nil {
		return 0, fmt.Errorf("get snapshot: %w", err)
	}
	seq, err := parseSeq(info.Metadata)
	if err != nil {
		return 0, err
	}
	if _, err := io.Copy(w, obj); err != nil {
		return 0, fmt.Errorf("get snapshot: %w", err)
	}
	return seq, nil
}

// Purge removes the stream's messages below keep (keep itself stays).
func (l *Log) Purge(ctx context.Context, keep uint64) error {
	st, err := l.js.Stream(ctx, fleetspec.Stream)
	if err != nil {
		return fmt.Errorf("purge write log: %w", err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSequence(keep)); err != nil {
		return fmt.Errorf("purge write log below %d: %w", keep, err)
	}
	return nil
}
