package feed

// Group commit. Every write of the process (its own, and as the write owner those its
// followers forward) is an op queued to the batcher, whose one goroutine runs the queue
// in transactions on the writer connection:
//
//	BEGIN IMMEDIATE; one statement per op; COMMIT
//
// and only then answers each op. A small batch commits no sooner than CommitWindow after
// the previous one began, a batch of commitEnough (8) or more at once (see run), so
// trickling writes make at most one commit per window: every commit by one connection drops
// every other connection's page cache (in every process), so fewer commits keep the readers
// warm; and a row costs about half as much in a batch (docs/performance.md).
//
// Each op keeps its own result: a like that exists already (200, not 201), a post id that
// does not exist (404), a user without a users row (500) fail that statement alone (SQLite
// undoes just the statement on a constraint error; the transaction goes on). Any other
// failure (disk full, I/O error, out of memory, a lock not had within BusyTimeout) may have
// undone the whole transaction, so the batch is rolled back and every op of it fails:
// nothing is acknowledged that COMMIT did not make durable (as durable as Options.Synchronous
// makes a commit).

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/onehost/onehost/internal/owner"
	"github.com/onehost/onehost/internal/sqlitec"
	"github.com/onehost/onehost/internal/writepath"
)

// Op kinds.
const (
	opLike = 'L'
	opPost = 'P'
)

// op is one write and, once done, its result.
type op struct {
	kind   byte
	userID int64
	postID int64  // opLike
	body   string // opPost

	created   bool // opLike: inserted (201), not already there (200)
	id        int64
	createdAt [32]byte // opPost: the row's created_at ...
	nCreated  int      // ... its length
	err       error

	done chan struct{} // a local op: signalled when done (capacity 1)
	peer *owner.Peer   // a forwarded op: answered to this follower ...
	req  uint64        // ... as its request req
	wire []byte        // the encoded request or answer

	arrived int64 // when it reached the batcher (writepath.Now), for the queue wait
}

var ops = sync.Pool{New: func() any { return &op{done: make(chan struct{}, 1)} }}

func getOp() *op { return ops.Get().(*op) }

func putOp(o *op) {
	*o = op{done: o.done, wire: o.wire[:0]}
	ops.Put(o)
}

// finish hands a done op back: to the waiting caller, or as an answer to the follower.
func (o *op) finish() {
	if o.peer == nil {
		o.done <- struct{}{}
		return
	}
	o.wire = appendAnswer(o.wire[:0], o)
	o.peer.Reply(o.req, o.wire)
	putOp(o)
}

// batcher queues ops and commits them in batches (see the top of this file).
type batcher struct {
	s      *Store
	window time.Duration
	max    int
	// lock, when set, is held around each transaction (design 2's flock, WritesFlock).
	lock func() (unlock func(), err error)
	// publish, when set (a fleet's write log, logwrite.go), takes each batch instead of a
	// commit here, and answers its ops once they are applied from the log.
	publish func(batch []*op)

	mu      sync.Mutex
	queue   []*op
	stopped bool
	wake    chan struct{} // capacity 1
	stop    chan struct{}
	done    chan struct{}

	batches, written atomic.Uint64
	largest          atomic.Int64
}

func newBatcher(s *Store, window time.Duration, max int) *batcher {
	b := &batcher{s: s, window: window, max: max, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	go b.run()
	return b
}

// submit queues o; o.finish runs when it is done.
func (b *batcher) submit(o *op) {
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		o.err = errClosed
		o.finish()
		return
	}
	o.arrived = writepath.Now()
	b.queue = append(b.queue, o)
	n := len(b.queue)
	b.mu.Unlock()
	if n == 1 || n == min(b.max, commitEnough) || n == b.max { // see run
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

// close commits what is queued and stops the batcher; later ops fail with errClosed.
func (b *batcher) close() {
	b.mu.Lock()
	if !b.stopped {
		b.stopped = true
		close(b.stop)
	}
	b.mu.Unlock()
	<-b.done
}

// commitEnough is the batch that commits without waiting for the window: from about 8
// writes on, a commit's fixed cost is mostly shared out (74 µs per like alone, 47 at 8 per
// transaction, 35 at 64), and the commit rate stays at most a eighth of the write rate.
const commitEnough = 8

// run is the batcher's goroutine: it takes up to max queued ops and commits them, until
// close. A batch commits once the previous commit began at least window ago, or at once when
// commitEnough ops (or max) are waiting.
//
// The window is a floor on the time between small commits, not a wait added to every
// batch: a write that arrives when the last commit began more than a window ago commits at
// once, so a lone write waits for nothing; writes that trickle in share commits, at most one
// per window, which keeps the readers' caches (dropped at every commit) warm; and a stream
// of writes is never held back: while one batch commits the next one queues, and commits as
// soon as it is large enough. (A fixed wait after each batch's first write measured 16 %
// fewer likes per second over 64 connections, and a window without the commitEnough rule
// 30-45 % fewer: the committer idled while writes waited.)
func (b *batcher) run() {
	defer close(b.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	batch := make([]*op, 0, b.max)
	var last int64 // when the previous commit began, unix nanoseconds
	for {
		select {
		case <-b.wake:
		case <-b.stop:
		}
		for {
			// Let the goroutines that are ready to run (requests read in the same wake-up
			// of the network poller) queue their writes before this batch is taken. The
			// batcher is woken by the first of them, and a woken goroutine runs next: in a
			// process with one P (a prefork worker), without this yield every batch held one
			// write (measured: 95,357 likes in 91,021 commits over 64 connections).
			runtime.Gosched()
			b.mu.Lock()
			n, stopped := len(b.queue), b.stopped
			if n == 0 {
				b.mu.Unlock()
				if stopped {
					return
				}
				break
			}
			now := time.Now().UnixNano()
			if wait := b.window - time.Duration(now-last); n < min(b.max, commitEnough) && wait > 0 && !stopped {
				b.mu.Unlock()
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-b.wake: // enough ops queued (or a stale wake-up: the loop looks again)
					timer.Stop()
				case <-b.stop:
					timer.Stop()
				}
				continue
			}
			last = now
			k := min(n, b.max)
			batch = append(batch[:0], b.queue[:k]...)
			rest := copy(b.queue, b.queue[k:])
			clear(b.queue[rest:])
			b.queue = b.queue[:rest]
			b.mu.Unlock()
			if b.publish != nil {
				b.publish(batch)
				b.batches.Add(1)
				b.written.Add(uint64(k))
				clear(batch)
				continue
			}
			began := writepath.Now()
			b.commit(batch)
			b.s.noteCommit()
			done := b.s.wp.Commit(began, k)
			b.batches.Add(1)
			b.written.Add(uint64(k))
			if int64(k) > b.largest.Load() {
				b.largest.Store(int64(k))
			}
			for i, o := range batch {
				b.s.wp.Queued(o.arrived, done)
				o.finish()
				batch[i] = nil
			}
		}
	}
}

// commit runs batch in one transaction and sets each op's result.
func (b *batcher) commit(batch []*op) {
	s := b.s
	fail := func(err error) {
		for _, o := range batch {
			o.err = err
		}
	}
	if s.shared {
		// The write connection is also the only reader: hold it as a reader too.
		r, err := s.getReader()
		if err != nil {
			fail(err)
			return
		}
		defer s.putReader(r)
	}
	if b.lock != nil {
		unlock, err := b.lock()
		if err != nil {
			fail(err)
			return
		}
		defer unlock()
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	w := s.writer
	if w == nil {
		fail(errClosed)
		return
	}
	// A write into a file that the path no longer names would be acknowledged and then be
	// missing for every process that opens the path: refuse it, as SQLite itself refuses
	// writes in rollback-journal mode (SQLITE_READONLY_DBMOVED; in WAL mode it does not
	// check). One stat of the path per batch, ~1-5 µs.
	if err := checkNotMoved(w.Conn); err != nil {
		fail(err)
		return
	}
	c := w.Conn
	rc := s.first(c, w.begin) // takes the write lock, retrying while another process holds it
	if rc != sqlite3.SQLITE_DONE {
		err := c.ErrorFor(rc)
		c.Reset(w.begin)
		fail(fmt.Errorf("begin write transaction: %w", err))
		return
	}
	c.Reset(w.begin)
	for _, o := range batch {
		var err error
		switch o.kind {
		case opLike:
			err = s.insertLike(w, o)
		case opPost:
			err = s.insertPost(w, o)
		default:
			o.err = fmt.Errorf("unknown write %q", o.kind)
		}
		if err != nil {
			b.abort(w, batch, err)
			return
		}
	}
	rc = c.Step(w.commit)
	if rc != sqlite3.SQLITE_DONE {
		err := c.ErrorFor(rc)
		c.Reset(w.commit)
		b.abort(w, batch, fmt.Errorf("commit: %w", err))
		return
	}
	c.Reset(w.commit)
}

// rollbackOn rolls w's transaction back, unless SQLite already did (or none is open), and
// returns err with the rollback's own failure joined.
func (w *writer) rollbackOn(err error) error {
	if !w.Autocommit() {
		if rc := w.Step(w.rollback); rc != sqlite3.SQLITE_DONE {
			err = errors.Join(err, fmt.Errorf("roll back: %w", w.ErrorFor(rc)))
		}
		w.Reset(w.rollback)
	}
	return err
}

// abort rolls the transaction back (unless SQLite already did) and fails every op of batch.
func (b *batcher) abort(w *writer, batch []*op, err error) {
	err = w.rollbackOn(err)
	b.s.log.Error("write batch failed: none of its writes was saved", zap.Int("writes", len(batch)), zap.Error(err))
	for _, o := range batch {
		o.err = err
		o.created, o.id, o.nCreated = false, 0, 0
	}
}

// insertLike runs one like inside the batch's transaction. It sets o's result; it returns
// an error only for a failure that ends the whole batch.
func (s *Store) insertLike(w *writer, o *op) error {
	c, st := w.Conn, w.insertLike
	c.BindInt64(st, 1, o.userID)
	c.BindInt64(st, 2, o.postID)
	var err error
	o.created, o.err, err = s.stepLike(w, st, o.postID)
	return err
}

// stepLike steps st, a like's insert with its values bound, inside the transaction:
// created says whether it inserted the like (not already there); own is the like's own
// failure (its post or its user missing, another constraint), fatal one that ends the
// whole transaction. The batch's insertLike and the fleet's apply (applyIntent) share it,
// so that they judge alike.
func (s *Store) stepLike(w *writer, st sqlitec.Stmt, postID int64) (created bool, own, fatal error) {
	c := w.Conn
	rc := c.Step(st)
	if rc == sqlite3.SQLITE_DONE {
		created = c.Changes() == 1
		c.Reset(st)
		return created, nil, nil
	}
	err := c.ErrorFor(rc)
	c.Reset(st)
	switch {
	case rc == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		// The post, or the user, does not exist: which one decides 404 or 500.
		exists, xerr := s.writerPostExists(w, postID)
		switch {
		case xerr != nil:
			return false, nil, xerr
		case !exists:
			return false, ErrPostNotFound, nil
		}
		return false, err, nil
	case rc&0xff == sqlite3.SQLITE_CONSTRAINT:
		return false, err, nil
	}
	return false, nil, err
}

// insertPost runs one new post inside the batch's transaction, as insertLike.
func (s *Store) insertPost(w *writer, o *op) error {
	c, st := w.Conn, w.insertPost
	c.BindInt64(st, 1, o.userID)
	c.BindTextStatic(st, 2, o.body)
	var err error
	o.id, o.nCreated, o.err, err = stepPost(c, st, o.createdAt[:])
	return err
}

// stepPost steps st, a post's insert with its values bound (RETURNING id, then created_at
// when createdAt is not nil), inside the transaction: id is the new post's, and createdAt
// gets its created_at, n bytes long. own is the post's own failure (a constraint: a user
// without a users row), fatal one that ends the whole transaction. Shared by insertPost
// and the fleet's apply (applyIntent), as stepLike.
func stepPost(c *sqlitec.Conn, st sqlitec.Stmt, createdAt []byte) (id int64, n int, own, fatal error) {
	rc := c.Step(st)
	if rc == sqlite3.SQLITE_ROW {
		id = c.ColumnInt64(st, 0)
		if createdAt != nil {
			n = copy(createdAt, c.ColumnText(st, 1))
		}
		rc = c.Step(st)
	}
	if rc == sqlite3.SQLITE_DONE {
		c.Reset(st)
		return id, n, nil, nil
	}
	err := c.ErrorFor(rc)
	c.Reset(st)
	if rc&0xff == sqlite3.SQLITE_CONSTRAINT { // a user without a users row
		return 0, 0, err, nil
	}
	return 0, 0, nil, err
}

// writerPostExists reports whether post id exists, read inside the write transaction.
func (s *Store) writerPostExists(w *writer, id int64) (bool, error) {
	c, st := w.Conn, w.postExists
	c.BindInt64(st, 1, id)
	rc := c.Step(st)
	defer c.Reset(st)
	switch rc {
	case sqlite3.SQLITE_ROW:
		return true, nil
	case sqlite3.SQLITE_DONE:
		return false, nil
	}
	return false, fmt.Errorf("look up post %d: %w", id, c.ErrorFor(rc))
}

// flockFile returns design 2's lock: an exclusive flock on path (created if missing), held
// around each transaction, so that the processes' batches take turns in the kernel's queue
// instead of polling SQLite's lock. A process that stops while holding it stops every
// writer: the lock has no timeout (one reason the write owner is the default).
func flockFile(path string) (lock func() (func(), error), closeFile func() error, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("open write lock file: %w", err)
	}
	fd := int(f.Fd())
	unlock := func() { unix.Flock(fd, unix.LOCK_UN) }
	lock = func() (func(), error) {
		for {
			err := unix.Flock(fd, unix.LOCK_EX)
			if err == nil {
				return unlock, nil
			}
			if err != unix.EINTR {
				return nil, fmt.Errorf("lock %s: %w", path, err)
			}
		}
	}
	return lock, f.Close, nil
}

// prepare prepares the writer connection's statements.
func (w *writer) prepare() error {
	return prepareAll(w.Conn, []prepared{
		{&w.insertPost, sqlInsertPost}, {&w.insertLike, sqlInsertLike}, {&w.postExists, sqlPostExists},
		{&w.begin, `BEGIN IMMEDIATE`}, {&w.commit, `COMMIT`}, {&w.rollback, `ROLLBACK`},
	})
}

// prepared is a statement to prepare and where its handle goes.
type prepared struct {
	stmt *sqlitec.Stmt
	sql  string
}

// prepareAll prepares each statement on c.
func prepareAll(c *sqlitec.Conn, stmts []prepared) error {
	for _, p := range stmts {
		var err error
		if *p.stmt, err = c.Prepare(p.sql); err != nil {
			return err
		}
	}
	return nil
}
