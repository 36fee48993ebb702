package feed

// One database for the fleet (Options.Log). Every host keeps its own copy of the file, and
// every write of every host goes through one log (a JetStream stream, internal/writelog)
// whose order is the fleet's one order of writes; each host's write owner applies the log
// in that order into its own copy (logapply.go), so every copy computes the same rows:
//
//   - the owner's group commit (batch.go) does not commit: it encodes the batch's ops as
//     one message of intents, with one created_at for all of them chosen here, and publishes
//     it (publish), retried under the same message id until the log acknowledges it;
//   - the owner's applier (one per host: it holds an flock on PATH.apply, so a new owner's
//     applier starts only once the old one has stopped) follows the log from the sequence
//     the file holds and applies each batch of messages in one transaction, the sequence
//     stored in the same transaction (logapply.go);
//   - when the applier meets a message of its own, it hands that batch's ops their results
//     (the results of its own apply, the same on every host), and the acker answers them
//     once every host in the balancer has applied it (writelog's WaitApplied): a read sent
//     to any host afterwards sees the write;
//   - a process that is not the owner never writes the file: it forwards its writes to the
//     owner, and while there is none it waits for one (at most WriteTimeout) instead of
//     writing itself as it would alone (exec).
//
// A write whose publish was not acknowledged in time, or which was published but not
// applied within WriteTimeout, fails as undecided (503): it may still be applied later,
// in its place in the log, on every host alike.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/owner"
	"github.com/onehost/onehost/internal/writepath"
)

// Log is the fleet's write log as the Store uses it (internal/writelog's Log, through a
// small adapter in cmd/worker, so that this package links no NATS).
type Log interface {
	// Self is this host's name: message ids begin with it.
	Self() string
	// Publish appends data under id, retried with the same id until acknowledged or ctx
	// ends (then an error: undecided), and returns its sequence.
	Publish(ctx context.Context, id string, data []byte) (uint64, error)
	// Follow calls apply with every message after after, in order, in batches, until
	// ctx ends (nil) or apply fails (its error); apply returns once the batch is durable.
	Follow(ctx context.Context, after uint64, apply func([]LogMsg) error) error
	// WaitApplied returns once every host in the balancer has applied seq.
	WaitApplied(ctx context.Context, seq uint64) error
	// Serving is "" while this host may take traffic, else why not.
	Serving() string

	// Leads reports whether this host takes the snapshots.
	Leads() bool
	// SnapshotSeq is the latest snapshot's sequence (an error when there is none).
	SnapshotSeq(ctx context.Context) (uint64, error)
	// PutSnapshot stores a snapshot holding every write through seq.
	PutSnapshot(ctx context.Context, seq uint64, r io.Reader) error
	// MinLiveApplied is the lowest sequence a live host applied.
	MinLiveApplied() (uint64, bool)
	// Purge drops the log's messages below keep.
	Purge(ctx context.Context, keep uint64) error
}

// LogMsg is one message of the log.
type LogMsg struct {
	Seq  uint64
	ID   string
	Data []byte
}

// ErrLogUndecided reports a write the fleet's log did not take, or this host did not
// apply, within WriteTimeout: it may or may not be saved (a 503, as an owner's timeout).
var ErrLogUndecided = errors.New("the fleet's write log did not take the write in time; it may or may not have been saved")

// errNoOwnerFleet reports a write that found no write owner within WriteTimeout.
var errNoOwnerFleet = fmt.Errorf("no write owner on this host to send the write to: %w", ErrLogUndecided)

// pendingBatch is a published batch waiting for its apply, then for the hosts.
type pendingBatch struct {
	ops   []*op
	seq   uint64
	since time.Time
}

// logWriter is the Store's part in the fleet (nil without Options.Log).
type logWriter struct {
	s        *Store
	log      Log
	lg       *zap.Logger
	timeout  time.Duration // WriteTimeout
	every    uint64        // SnapshotEvery
	prefix   string        // this process's message ids: host.pid.start.
	n        atomic.Uint64 // the next message id's number
	buf      []byte        // the batcher's encoding buffer
	lockPath string        // PATH.apply: one applier per host

	mu      sync.Mutex
	pending map[string]*pendingBatch
	applier *applier // while this process is the owner

	acks    chan *pendingBatch // applied batches, in the log's order, for the acker
	stop    chan struct{}
	stopped bool
	wg      sync.WaitGroup // acker and janitor

	// apply's scratch (the applier goroutine's).
	results     []intentResult
	bounds      []int
	lastApplied atomic.Uint64 // the file's position after the last apply
	since       atomic.Int64  // when the running applier started (unix ns; 0: none)

	snapshotting atomic.Bool   // one snapshot at a time (maybeSnapshot)
	hasSnap      atomic.Bool   // the log holds a snapshot (known here)
	lastSnap     atomic.Uint64 // the latest snapshot's sequence known here
}

// applier is a running follow of the log.
type applier struct {
	cancel context.CancelFunc
	done   chan struct{}
	locked chan struct{} // closed once it holds the host's apply lock
}

func newLogWriter(s *Store, opts Options) *logWriter {
	w := &logWriter{
		s: s, log: opts.Log, lg: s.log.With(zap.String("log", "fleet")), timeout: opts.WriteTimeout,
		every:    opts.SnapshotEvery,
		prefix:   opts.Log.Self() + "." + strconv.Itoa(os.Getpid()) + "." + strconv.FormatInt(time.Now().UnixNano(), 36) + ".",
		lockPath: s.path + ".apply",
		pending:  map[string]*pendingBatch{},
		acks:     make(chan *pendingBatch, 4096),
		stop:     make(chan struct{}),
	}
	w.wg.Add(2)
	go w.acker()
	go w.janitor()
	return w
}

// publish is the batcher's commit in fleet mode: it owns batch's ops from here on. It
// publishes only once this process's applier holds the host's apply lock: the results of
// a message come from the apply of the process that published it, so a new owner must not
// publish while the previous one may still apply (it hands the lock over as it closes,
// once its own published batches are answered: milliseconds).
func (w *logWriter) publish(batch []*op) {
	now := time.Now()
	w.mu.Lock()
	a := w.applier
	w.mu.Unlock()
	var locked <-chan struct{}
	if a != nil {
		locked = a.locked
	}
	wait := time.NewTimer(w.timeout)
	select {
	case <-locked:
		wait.Stop()
	case <-wait.C:
		w.fail(&pendingBatch{ops: slices.Clone(batch)}, fmt.Errorf("%w: this process does not apply the log (no apply lock)", ErrLogUndecided))
		return
	}
	id := w.prefix + strconv.FormatUint(w.n.Add(1), 10)
	w.buf = appendIntents(w.buf[:0], batch, now)
	pb := &pendingBatch{ops: slices.Clone(batch), since: now}
	w.mu.Lock()
	w.pending[id] = pb
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	_, err := w.log.Publish(ctx, id, w.buf)
	cancel()
	if err != nil {
		w.lg.Warn("write log: publish failed: the batch is undecided", zap.String("id", id), zap.Int("writes", len(batch)), zap.Error(err))
		if pb := w.claim(id); pb != nil {
			w.fail(pb, fmt.Errorf("%w: %v", ErrLogUndecided, err))
		}
	}
}

// claim takes the pending batch id away from the others who might answer it.
func (w *logWriter) claim(id string) *pendingBatch {
	w.mu.Lock()
	defer w.mu.Unlock()
	pb := w.pending[id]
	if pb != nil {
		delete(w.pending, id)
	}
	return pb
}

// fail answers every op of pb with err.
func (w *logWriter) fail(pb *pendingBatch, err error) {
	for _, o := range pb.ops {
		o.err = err
		o.created, o.id, o.nCreated = false, 0, 0
		o.finish()
	}
}

// acker answers applied batches once every host in the balancer has applied them.
func (w *logWriter) acker() {
	defer w.wg.Done()
	for pb := range w.acks {
		ctx, cancel := context.WithDeadline(context.Background(), pb.since.Add(w.timeout))
		// An error is a deadline: the write is applied here and in the log; the hosts
		// that have not applied it have been given up on (and leave the balancer).
		w.log.WaitApplied(ctx, pb.seq)
		cancel()
		for _, o := range pb.ops {
			o.finish()
		}
	}
}

// janitor fails the batches that were published but not applied within WriteTimeout (the
// applier is stuck or gone): undecided, they may still be applied later.
func (w *logWriter) janitor() {
	defer w.wg.Done()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		w.expire(time.Now().Add(-w.timeout - time.Second))
		w.maybeSnapshot()
	}
}

// expire fails the batches pending since before cutoff.
func (w *logWriter) expire(cutoff time.Time) {
	var old []*pendingBatch
	w.mu.Lock()
	for id, pb := range w.pending {
		if pb.since.Before(cutoff) {
			old = append(old, pb)
			delete(w.pending, id)
		}
	}
	w.mu.Unlock()
	for _, pb := range old {
		w.lg.Warn("write log: a published batch was not applied in time: undecided", zap.Int("writes", len(pb.ops)))
		w.fail(pb, ErrLogUndecided)
	}
}

// onRole starts the applier when this process becomes the owner. (An owner stops being
// one only at HandOverWrites or Close, which stop it.)
func (w *logWriter) onRole(role string) {
	if role != owner.RoleOwner {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.applier != nil || w.stopped {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &applier{cancel: cancel, done: make(chan struct{}), locked: make(chan struct{})}
	w.applier = a
	go w.follow(ctx, a)
}

// follow is the applier: it takes the host's apply lock, then follows the log from the
// file's position until ctx ends, starting again after a failure.
func (w *logWriter) follow(ctx context.Context, a *applier) {
	defer close(a.done)
	unlock, err := lockFile(ctx, w.lockPath)
	if err != nil {
		if ctx.Err() == nil {
			w.lg.Error("write log: cannot take the apply lock: this process applies nothing", zap.Error(err))
		}
		return
	}
	defer unlock()
	close(a.locked)
	if seq, err := w.log.SnapshotSeq(ctx); err == nil {
		w.lastSnap.Store(seq)
		w.hasSnap.Store(true)
	}
	w.since.Store(time.Now().UnixNano())
	defer w.since.Store(0)
	for ctx.Err() == nil {
		after, err := w.s.logPosition()
		if err == nil {
			w.lastApplied.Store(after)
			w.lg.Info("write log: applying", zap.Uint64("from", after+1))
			err = w.log.Follow(ctx, after, w.apply)
		}
		if err != nil && ctx.Err() == nil {
			w.lg.Error("write log: apply stopped; trying again in 1 s", zap.Error(err))
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// stopApplier stops the applier (if this process runs one) and waits for it.
func (w *logWriter) stopApplier() {
	w.mu.Lock()
	a := w.applier
	w.applier = nil
	w.mu.Unlock()
	if a != nil {
		a.cancel()
		<-a.done
	}
}

// close lets the published batches be applied (up to WriteTimeout), then stops the
// applier, answers the rest as undecided and stops the acker. The batcher has closed.
func (w *logWriter) close() {
	deadline := time.Now().Add(w.timeout)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		n := len(w.pending)
		w.mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	w.stopApplier()
	w.expire(time.Now().Add(time.Hour))
	close(w.stop)
	close(w.acks)
	w.wg.Wait() // a snapshot in progress too (the janitor adds it): it ends before the Store closes its file
}

// waitForOwner is exec's wait when there is no owner to forward to in fleet mode: this
// process must not write the file itself. start is when the write began (a
// writepath.Now). It reports whether to give up (o failed).
func (w *logWriter) waitForOwner(o *op, start int64) (gaveUp bool) {
	if time.Duration(writepath.Now()-start) >= w.timeout {
		o.err = errNoOwnerFleet
		return true
	}
	time.Sleep(2 * time.Millisecond)
	return false
}

// lockFile takes an exclusive flock on path (created if missing), polling so that ctx can
// end the wait; unlock releases it (and so does the process's death).
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Serving is "" while this Store's host may take traffic; with Options.Log, why it must
// not otherwise (its log node is gone, its apply lags, it has not caught up). Without a
// log it is always "".
func (s *Store) Serving() string {
	if s.flog == nil {
		return ""
	}
	return s.flog.log.Serving()
}
