package writelog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/fleetspec"
)

// Msg is one message of the stream.
type Msg struct {
	Seq  uint64 // its sequence in the stream: its place in the fleet's order of writes
	ID   string // the id it was published under (Nats-Msg-Id)
	Data []byte
}

// ErrTruncated reports that the stream no longer holds the messages Follow must hand over
// next: it was purged past them, after a snapshot. The database must start again from the
// latest snapshot (internal/feed's RestoreLog).
var ErrTruncated = errors.New("the write log was purged past this database's position: restore it from the latest snapshot")

// maxBatch bounds the messages handed to apply at once.
const maxBatch = 256

// Follow hands apply every message after after, in order, in batches of what has arrived
// (at most maxBatch), until ctx ends (then it returns nil) or apply fails (it returns that
// error). apply returns once the batch is applied (committed): while Follow runs, this host
// reports the last sequence applied (progress.go) and the other hosts count it live.
//
// The messages come from an ephemeral pull consumer with idle heartbeats (Heartbeat): when
// two are missed (its node died), the connection moved to another node, or a message is
// not the one expected, the consumer is made again from the next sequence wanted, on
// whichever node the connection reaches (this host's own first). apply sees each sequence
// once, in order, with no gap: a gap the stream cannot fill is ErrTruncated.
func (l *Log) Follow(ctx context.Context, after uint64, apply func([]Msg) error) error {
	l.prog.startReporting(after)
	defer l.prog.stopReporting()
	next := after + 1
	wait := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := l.followFrom(ctx, &next, apply)
		var ae applyError
		switch {
		case errors.As(err, &ae):
			return ae.err
		case errors.Is(err, ErrTruncated):
			return err
		case ctx.Err() != nil:
			return nil
		case err != nil:
			l.log.Warn("write log: following again", zap.Uint64("from", next), zap.Error(err))
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
			wait = min(2*wait, 500*time.Millisecond)
		default:
			wait = 50 * time.Millisecond
		}
	}
	return nil
}

// applyError marks an error of apply (Follow returns it rather than following again).
type applyError struct{ err error }

func (e applyError) Error() string { return e.err.Error() }

// followFrom reads from one consumer until it fails; *next advances past what apply took.
func (l *Log) followFrom(ctx context.Context, next *uint64, apply func([]Msg) error) error {
	// A reconnect may have lost what was in flight (the consumer does not ask for acks,
	// so it counts a message delivered once sent): make the consumer again at once rather
	// than at the next message's gap.
	l.movedMu.Lock()
	moved := l.moved
	l.movedMu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	cons, err := l.js.CreateConsumer(cctx, fleetspec.Stream, jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       *next,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: 10 * time.Second,
	})
	cancel()
	if err != nil {
		// Making a consumer needs the log's meta group to have a leader, which it has not
		// for 4-9 s after its leader's node died (an election): read by sequence from any
		// replica meanwhile (direct gets need no leader), then try a consumer again.
		l.log.Warn("write log: no consumer now: reading by sequence meanwhile", zap.Uint64("from", *next), zap.Error(err))
		return l.followDirect(ctx, next, apply, 2*time.Second)
	}
	defer func() {
		// Best effort: the inactivity threshold removes it anyway.
		dctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		l.js.DeleteConsumer(dctx, fleetspec.Stream, cons.CachedInfo().Name)
		cancel()
	}()
	it, err := cons.Messages(jetstream.PullMaxMessages(2*maxBatch), jetstream.PullHeartbeat(l.cfg.Heartbeat),
		jetstream.WithMessagesErrOnMissingHeartbeat(true))
	if err != nil {
		return fmt.Errorf("read consumer: %w", err)
	}
	type item struct {
		m   Msg
		pen uint64
		err error
	}
	ch := make(chan item, 2*maxBatch)
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() { // owned by followFrom: it stops it (it.Stop, quit) and waits (done)
		defer close(done)
		for {
			m, err := it.Next()
			var x item
			if err != nil {
				x.err = err
			} else if md, merr := m.Metadata(); merr != nil {
				x.err = merr
			} else {
				x.m = Msg{Seq: md.Sequence.Stream, ID: m.Headers().Get("Nats-Msg-Id"), Data: m.Data()}
				x.pen = md.NumPending
			}
			select {
			case ch <- x:
			case <-quit:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() { it.Stop(); close(quit); <-done }()

	batch := make([]Msg, 0, maxBatch)
	for {
		var x item
		select {
		case <-ctx.Done():
			return nil
		case <-moved:
			return errors.New("the connection moved to another node")
		case x = <-ch:
		}
		batch = batch[:0]
		var pending uint64
		var ferr error
	gather:
		for {
			switch {
			case x.err != nil:
				ferr = x.err // apply what came before it first
				break gather
			case x.m.Seq < *next: // seen already (a consumer made again overlaps): skip
			case x.m.Seq > *next:
				ferr = l.gap(ctx, *next, x.m.Seq)
				break gather
			default:
				batch = append(batch, x.m)
				pending = x.pen
				*next = x.m.Seq + 1
			}
			if len(batch) == maxBatch {
				break gather
			}
			select {
			case x = <-ch:
			default:
				break gather
			}
		}
		if len(batch) > 0 {
			if err := apply(batch); err != nil {
				return applyError{err}
			}
			l.prog.applied(batch[len(batch)-1].Seq, pending)
		}
		if ferr != nil {
			return ferr
		}
	}
}

// gap explains a message past the one expected: the stream was purged past it
// (ErrTruncated), or the consumer skipped (it is made again).
func (l *Log) gap(ctx context.Context, want, got uint64) error {
	if first, _, err := l.Bounds(ctx); err == nil && first > want {
		return fmt.Errorf("%w (want %d, the stream starts at %d)", ErrTruncated, want, first)
	}
	return fmt.Errorf("message %d where %d was expected", got, want)
}

// Bounds returns the stream's first and last sequences.
func (l *Log) Bounds(ctx context.Context) (first, last uint64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := l.js.Stream(ctx, fleetspec.Stream)
	if err != nil {
		return 0, 0, fmt.Errorf("read stream: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("read stream: %w", err)
	}
	return info.State.FirstSeq, info.State.LastSeq, nil
}
