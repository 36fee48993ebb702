package feed

// The data layer: Store reads and writes the challenge database and appends the JSON
// response bodies, byte for byte those of the reference, to a caller's buffer.
//
// SQLite is used through its C API as modernc.org/sqlite/lib exposes it (the same SQLite
// the "sqlite" database/sql driver runs), through internal/sqlitec's connections, below
// database/sql: a call then costs no Go allocation, text columns are escaped straight from
// SQLite's memory into the response buffer (internal/jsonstr), and every lock wait is this
// package's to schedule. The database/sql route costs ~20–40 % more time and 19–163
// allocations per call (BenchmarkDatabaseSQL).
//
// Connections. Each connection has its own prepared statements (prepared once, with
// SQLITE_PREPARE_PERSISTENT) and is used by one goroutine at a time:
//   - a pool of ReadConns read connections (query_only) serves every read: WAL lets them
//     run together with each other and with a writer in any process;
//   - one writer connection per Store, behind a mutex, serves every write;
//   - one more connection belongs to the checkpointer.
//
// All of them run with journal_mode=WAL, synchronous=NORMAL or FULL (Options.Synchronous:
// NORMAL, the default, makes a commit durable against a process crash before the call
// returns and syncs the WAL only at checkpoints, so a power cut or a kernel panic loses the
// commits since the last one; FULL syncs the WAL at every commit), foreign_keys=ON,
// a page cache of CacheSize and an mmap of MmapSize, and wal_autocheckpoint=0.
//
// Writes. Every write is an op queued to the Store's batcher, which commits ops in group
// commits on the writer connection (BEGIN IMMEDIATE, one statement per op, COMMIT) and
// answers each only after its COMMIT returned (batch.go). The processes that serve one file
// elect one write owner (internal/owner): the others forward their writes to it, so the
// file sees one committer and few commits, and the readers of every process keep their page
// caches (SQLite drops a connection's whole cache whenever another connection committed).
// Between owners, and under WritesFlock, a process commits its own writes (forward.go).
//
// BEGIN IMMEDIATE takes the write lock before the transaction reads anything, so the WAL
// trap of a deferred transaction (a read snapshot that turns out stale at the first write:
// SQLITE_BUSY_SNAPSHOT that no busy handler can cure) cannot arise, and a BEGIN that fails
// with SQLITE_BUSY has changed nothing and may simply run again. Another process may hold
// the lock (a checkpoint's RESTART, a process between owners), where no Go mutex helps.
// SQLite's own busy handler sleeps 1, 2, 5, 10 ms and more while the holder needs ~0.1 ms,
// and Go's timers round sub-millisecond sleeps up to ~1 ms in an idle process; so
// busy_timeout stays 0, and on SQLITE_BUSY or SQLITE_LOCKED the Store resets the statement
// and retries it itself, sleeping (nanosleep) 30 µs, then 60, 120, 240 and at most 480 µs,
// each ±50 % at random, until BusyTimeout (default 5 s) has passed since the first try; only
// then does the lock error reach the caller. Reads go through the same loop (in WAL a reader
// meets SQLITE_BUSY only while another connection recovers the WAL index).
//
// Checkpoints. wal_autocheckpoint=0 keeps checkpoints off the request path: otherwise the
// commit that crosses 1000 WAL frames copies them back into the database before it
// returns. The Store's checkpointer goroutine, started by Open and stopped by Close, runs a
// PASSIVE checkpoint every CheckpointInterval (default 250 ms), or ten times as often while
// the WAL holds more than CheckpointFrames frames (default 1000). PASSIVE takes no lock
// that writers or readers wait for; when another process is checkpointing it fails at once
// with SQLITE_BUSY and tries again at the next tick, so every worker process may run one.
// When it has copied every frame, readers stop using the WAL and the next writer starts it
// again from the beginning, so the file stays about as large as what one interval writes.
//
// Under a sustained write load that last step never came: measured, one worker taking
// 5,700 likes/s ended a 5 s run with a WAL of 100,000 frames (400 MB), because writes kept
// appending while the checkpoint copied, so it never caught up (checkpoint starvation).
// So when a PASSIVE checkpoint leaves more than 4×CheckpointFrames frames uncopied (writers
// outran it), or the WAL has passed 16×CheckpointFrames (64 MB) without restarting, it escalates
// to RESTART, which waits (up to RestartWait, on the checkpointer's connection only) for
// every writer in every process to finish, copies everything and makes the next writer
// start the WAL from the beginning. Writers wait for that copy: a pause traded for a
// bounded file. (Holding the writer mutex during every PASSIVE checkpoint bounded the WAL
// too, but made every write wait for every copy: p99 of likes went from 35 to 144 ms.)
//
// No results are cached: every call runs its statement (challenge rule 1).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
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

// ErrPostNotFound reports that the post of a read or a like does not exist.
var ErrPostNotFound = errors.New("post not found")

// walSizeLimit is what a restarted WAL is truncated back to (journal_size_limit): a burst
// of writes grows the file, and without a limit it keeps its high-water size for good.
const walSizeLimit = 16 << 20

// errClosed reports a call on a closed Store.
var errClosed = errors.New("store is closed")

// ErrFileMoved reports that the database path no longer names the file the Store opened:
// it was deleted, renamed, or replaced by another file. The Store keeps reading the file it
// has open, but refuses writes (see Store.write) and fails Ping.
var ErrFileMoved = errors.New("database file was deleted, renamed or replaced while open")

// FeedSize is the number of posts GET /feed returns.
const FeedSize = 20

// The statements. Posts come out in the key order of the contract; the JSON is appended
// in Go (see appendPostHead), which measured faster than building it in SQLite.
const (
	// sqlPost reads one post: body, created_at, author, like_count.
	sqlPost = `SELECT p.body, p.created_at, u.username,
  (SELECT count(*) FROM likes l WHERE l.post_id = p.id)
FROM posts p JOIN users u ON u.id = p.user_id
WHERE p.id = ?1`

	// sqlFeedTop reads the newest posts without their like counts: id, body, created_at,
	// author.
	sqlFeedTop = `SELECT p.id, p.body, p.created_at, u.username
FROM posts p JOIN users u ON u.id = p.user_id
ORDER BY p.created_at DESC, p.id DESC
LIMIT 20`

	// sqlFeedLikes counts the likes of the posts whose ids lie in [?1, ?2] in one range
	// scan of likes_post_id_idx: post_id, count.
	sqlFeedLikes = `SELECT post_id, count(*) FROM likes WHERE post_id BETWEEN ?1 AND ?2 GROUP BY post_id`

	// sqlLikeCount counts the likes of one post.
	sqlLikeCount = `SELECT count(*) FROM likes WHERE post_id = ?1`

	sqlPostExists = `SELECT 1 FROM posts WHERE id = ?1`
	sqlPing       = `SELECT 1`
	sqlInsertPost = `INSERT INTO posts(user_id, body) VALUES(?1, ?2) RETURNING id, created_at`
	sqlInsertLike = `INSERT INTO likes(user_id, post_id) VALUES(?1, ?2) ON CONFLICT DO NOTHING`
)

// Store is the feed database of one process. Its methods are safe for concurrent use.
type Store struct {
	log         *zap.Logger
	busyTimeout time.Duration
	path        string // the database file, as given to Open

	readers chan *reader // the idle read connections; closed by Close

	readerCount int // how many read connections Open opened

	shared bool // the only reader is the write connection: writes take it from readers

	wmu    sync.Mutex
	writer *writer // nil once closed

	batch     *batcher    // commits this process's writes (and, as owner, its followers')
	flog      *logWriter  // Options.Log: the fleet's write log (logwrite.go), or nil
	ls        *logStmts   // the apply's statements (logapply.go), once prepared
	node      *owner.Node // the write-owner election (WritesOwner), or nil
	closeLock func() error

	mmapSize  int64         // Options.MmapSize: what connections are opened with
	readMmap  atomic.Int64  // what the read connections should use now (see MmapSize)
	mmapMu    sync.Mutex    // serializes chooseMmap
	role      atomic.Int32  // the write role chooseMmap maps for: roleOther, roleOwner, roleFollower
	quiet     atomic.Bool   // no commit to the file for readsQuietAfter (see MmapSize)
	mmapKick  chan struct{} // wakes tuneReaders
	holdAll   sync.Mutex    // serializes withAllReaders (see there)
	tunerDone chan struct{} // closed when tuneReaders has returned; nil if it never started

	lockWaits, lockTimeouts      atomic.Uint64
	checkpoints, checkpointsBusy atomic.Uint64
	restarts                     atomic.Uint64
	walFrames                    atomic.Int64
	wp                           writepath.Recorder // the write path's counters (WritePath)

	ownerProcsN, procsBefore int // Options.OwnerProcs; GOMAXPROCS before it was raised (0: not raised)

	stop      chan struct{}
	done      chan struct{} // closed when the checkpointer has returned
	closeOnce sync.Once
	closeErr  error
}

// reader is a read connection, its statements, and a buffer AppendFeed reuses.
type reader struct {
	*sqlitec.Conn
	post, feedTop, feedLikes, likeCount, ping sqlitec.Stmt
	scratch                                   []byte
}

// writer is the write connection and its statements.
type writer struct {
	*sqlitec.Conn
	insertPost, insertLike, postExists sqlitec.Stmt
	begin, commit, rollback            sqlitec.Stmt
}

// Open opens the feed database at path, which must exist, be a SQLite database, and carry
// exactly the challenge schema (schema.SQL); it creates nothing. It switches the file to
// WAL if it is not already, prepares every statement, and starts the checkpointer.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	opts.setDefaults()
	if opts.Synchronous != SyncNormal && opts.Synchronous != SyncFull {
		return nil, fmt.Errorf("open feed database: synchronous %q: want %q or %q", opts.Synchronous, SyncNormal, SyncFull)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open feed database: %w", err)
	}
	// SQLite would report a missing file as "unable to open database file"; say it.
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open feed database: %w", err)
	}
	s := &Store{
		log:         opts.Logger,
		busyTimeout: opts.BusyTimeout,
		path:        path,
		readers:     make(chan *reader, opts.ReadConns),
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
		mmapSize:    opts.MmapSize,
		mmapKick:    make(chan struct{}, 1),
		ownerProcsN: opts.OwnerProcs,
	}
	s.readMmap.Store(opts.MmapSize)
	s.quiet.Store(true) // no commit seen yet: the connections open mapped
	var ckpt *sqlitec.Conn
	err := func() error {
		w, err := s.openConn(path, opts, false)
		if err != nil {
			return err
		}
		s.writer = &writer{Conn: w}
		if err := s.checkSchema(w); err != nil {
			return err
		}
		if err := s.useWAL(w); err != nil {
			return err
		}
		if err := s.writer.prepare(); err != nil {
			return err
		}
		s.shared = opts.shared
		for range opts.ReadConns {
			c := w
			if !s.shared {
				if c, err = s.openConn(path, opts, true); err != nil {
					return err
				}
			}
			r := &reader{Conn: c, scratch: make([]byte, 0, 16<<10)}
			s.readers <- r
			s.readerCount++
			if err := prepareAll(c, []prepared{
				{&r.post, sqlPost}, {&r.feedTop, sqlFeedTop}, {&r.feedLikes, sqlFeedLikes},
				{&r.likeCount, sqlLikeCount}, {&r.ping, sqlPing},
			}); err != nil {
				return err
			}
		}
		if opts.CheckpointInterval > 0 {
			if ckpt, err = s.openConn(path, opts, false); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		if ckpt != nil {
			ckpt.Close()
		}
		close(s.done)
		s.Close()
		return nil, fmt.Errorf("open feed database %s: %w", path, err)
	}
	if ckpt == nil {
		close(s.done)
	} else {
		go s.checkpointLoop(ckpt, opts.CheckpointInterval, opts.CheckpointFrames, opts.RestartWait)
	}
	s.batch = newBatcher(s, opts.CommitWindow, opts.CommitMax)
	if opts.Log != nil {
		if opts.Writes != WritesOwner {
			s.Close()
			return nil, fmt.Errorf("open feed database %s: a fleet's write log needs writes %q, not %q", path, WritesOwner, opts.Writes)
		}
		s.flog = newLogWriter(s, opts)
		s.batch.publish = s.flog.publish
	}
	s.tunerDone = make(chan struct{})
	go s.tuneReaders()
	if err := s.shareWrites(path, opts); err != nil {
		s.Close()
		return nil, fmt.Errorf("open feed database %s: %w", path, err)
	}
	return s, nil
}

// shareWrites sets up how this process shares the file's writes with the others
// (Options.Writes).
func (s *Store) shareWrites(path string, opts Options) error {
	switch opts.Writes {
	case WritesOwner:
		// The key is the file's identity, not its path: two paths to one file (a
		// symlink, a relative and an absolute path) elect one owner.
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			return fmt.Errorf("identify database file: %w", err)
		}
		node, err := owner.Join(owner.Config{
			Key:         fmt.Sprintf("onehost-writes/%d:%d", st.Dev, st.Ino),
			Serve:       s.serveForwarded,
			Logger:      s.log,
			CallTimeout: opts.WriteTimeout,
			OnRole:      s.onRole,
		})
		if err != nil {
			return err
		}
		s.node = node
	case WritesFlock:
		lock, closeFile, err := flockFile(path + ".writelock")
		if err != nil {
			return err
		}
		s.batch.lock, s.closeLock = lock, closeFile
	default:
		return fmt.Errorf("writes %q: want %q or %q", opts.Writes, WritesOwner, WritesFlock)
	}
	return nil
}

// openConn opens one connection to the existing file path and configures it.
func (s *Store) openConn(path string, opts Options, readOnly bool) (*sqlitec.Conn, error) {
	c, err := sqlitec.Open(path, sqlite3.SQLITE_OPEN_READWRITE)
	if err != nil {
		return nil, err
	}
	// Open has checked Synchronous: it is one of two words, never text from elsewhere.
	pragmas := fmt.Sprintf(`PRAGMA foreign_keys=ON; PRAGMA synchronous=%s;
PRAGMA cache_size=-%d; PRAGMA mmap_size=%d; PRAGMA wal_autocheckpoint=0;
PRAGMA journal_size_limit=%d;`,
		strings.ToUpper(opts.Synchronous), (opts.CacheSize+1023)/1024, opts.MmapSize, walSizeLimit)
	if readOnly {
		pragmas += ` PRAGMA query_only=ON;`
	}
	if err := s.retryErr(func() error { return c.Exec(pragmas) }); err != nil {
		c.Close()
		return nil, fmt.Errorf("configure connection: %w", err)
	}
	return c, nil
}

// useWAL switches the database to WAL unless it already is.
func (s *Store) useWAL(c *sqlitec.Conn) error {
	var mode string
	err := s.retryErr(func() (err error) {
		mode, err = c.QueryText(`PRAGMA journal_mode=WAL`)
		return err
	})
	if err != nil {
		return fmt.Errorf("set journal_mode=WAL: %w", err)
	}
	if mode != "wal" {
		return fmt.Errorf("set journal_mode=WAL: the database stays in %q", mode)
	}
	return nil
}

// HandOverWrites leaves the write-owner election: an owner hands ownership to another
// process (after answering what its followers already sent), a follower stops sending to
// it. This process's later writes are committed here, under SQLite's lock. A worker calls
// it when it starts to drain, so that the processes that stay find their new owner while
// this one still answers, not when it exits. Close does it too.
func (s *Store) HandOverWrites() {
	if s.flog != nil {
		// In a fleet the owner publishes and applies: it keeps both until Close, which
		// answers what it was sent and published, then hands over both.
		return
	}
	if s.node != nil {
		s.node.Close()
	}
}

// onRole follows this process's write role: the read connections' mapping (mmap.go) and,
// in a fleet, the applier (logwrite.go).
func (s *Store) onRole(role string) {
	s.onWriteRole(role)
	if s.flog != nil {
		s.flog.onRole(role)
	}
}

// Close stops the checkpointer and closes every connection, waiting for the calls in
// progress to return their connections. Calls after Close fail.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		// Hand the ownership over first (a follower takes it at once), answering what
		// followers already sent, then commit what is queued.
		if s.node != nil {
			errs = append(errs, s.node.Close())
		}
		if s.batch != nil {
			s.batch.close()
		}
		if s.flog != nil {
			s.flog.close()
		}
		if s.closeLock != nil {
			errs = append(errs, s.closeLock())
		}
		close(s.stop)
		<-s.done
		if s.tunerDone != nil { // tuneReaders was started
			<-s.tunerDone
		}
		for range s.readerCount {
			r := <-s.readers
			if !s.shared { // a shared reader's connection is the writer's, closed below
				errs = append(errs, r.Close())
			}
		}
		close(s.readers)
		s.wmu.Lock()
		if s.writer != nil && s.writer.Conn != nil {
			errs = append(errs, s.writer.Close())
		}
		s.writer = nil
		s.wmu.Unlock()
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("close feed database: %w", err)
		}
	})
	return s.closeErr
}

// Stats counts what the Store did since Open, for monitoring and tests.
type Stats struct {
	// LockWaits is how many times a call slept because another connection held a lock;
	// LockTimeouts, how many calls gave up after BusyTimeout.
	LockWaits, LockTimeouts uint64
	// Checkpoints is how many checkpoints ran; CheckpointsBusy, how many found another
	// connection checkpointing and left the work to it.
	Checkpoints, CheckpointsBusy uint64
	// Restarts is how many checkpoints escalated to RESTART because the WAL kept growing.
	Restarts uint64
	// WALFrames is the WAL's size in frames after the last checkpoint.
	WALFrames int64

	// Writes is this process's part in the file's writes: "owner" (it commits everyone's),
	// "follower" (it forwards its writes to WriteOwnerPID), "none" (between owners: it
	// commits its own), or "flock" (WritesFlock).
	Writes        string
	WriteOwnerPID int
	// Batches and Batched count the group commits this process ran and the writes in them;
	// LargestBatch is the most writes one commit held.
	Batches, Batched uint64
	LargestBatch     int64
	// Forwarded counts writes sent to the owner; Served, followers' writes committed here;
	// Undecided, forwarded writes whose owner went away or did not answer in time.
	Forwarded, Served, Undecided uint64
}

// Stats returns the Store's counters.
func (s *Store) Stats() Stats {
	st := Stats{
		LockWaits:       s.lockWaits.Load(),
		LockTimeouts:    s.lockTimeouts.Load(),
		Checkpoints:     s.checkpoints.Load(),
		CheckpointsBusy: s.checkpointsBusy.Load(),
		Restarts:        s.restarts.Load(),
		WALFrames:       s.walFrames.Load(),
		Writes:          s.WriteRole(),
	}
	if s.batch != nil {
		st.Batches, st.Batched, st.LargestBatch = s.batch.batches.Load(), s.batch.written.Load(), s.batch.largest.Load()
	}
	if s.node != nil {
		ns := s.node.Stats()
		st.WriteOwnerPID = ns.OwnerPID
		st.Forwarded, st.Served, st.Undecided = ns.Forwarded, ns.Served, ns.Timeouts+ns.Lost
	}
	return st
}

// WritePath returns the write path's counters since Open (package writepath): what the
// worker reports to its supervisor for the ceiling sweep's "writes" verdict.
func (s *Store) WritePath() writepath.Counters { return s.wp.Snapshot() }

// WriteRole is Stats().Writes, cheaply: "owner", "follower", "none" or "flock".
func (s *Store) WriteRole() string {
	if s.node == nil {
		return WritesFlock
	}
	return s.node.Role()
}

// Ping checks that the database works and will keep working (GET /health, and the
// health a worker reports to its supervisor). It waits for a free read connection no longer
// than ctx allows, runs SELECT 1 on it, then checks the file behind the path:
//
//   - SELECT 1 alone proves little: a connection reads through its open descriptor, so it
//     still succeeds after the file was deleted or renamed, while every write acknowledged
//     from then on is lost to the next process that opens the path. So Ping also asks
//     SQLite whether the path still names the file the connection opened
//     (SQLITE_FCNTL_HAS_MOVED: stat the path, compare the inode), and fails with
//     ErrFileMoved when it does not.
//   - A file that exists but that this process may no longer read and write (chmod 000, a
//     read-only remount) would fail the next start; faccessat with the effective ids says
//     so without opening it. (Opening and closing the database file here is not an option:
//     closing any descriptor of a file drops every POSIX lock this process holds on it,
//     SQLite's included.) For root, permission bits deny nothing, so chmod 000 is no fault.
func (s *Store) Ping(ctx context.Context) error {
	var r *reader
	select {
	case <-ctx.Done():
		return fmt.Errorf("ping feed database: %w", ctx.Err())
	case rr, ok := <-s.readers:
		if !ok {
			return fmt.Errorf("ping feed database: %w", errClosed)
		}
		r = rr
	}
	defer s.putReader(r)
	c, st := r.Conn, r.ping
	rc := s.first(c, st)
	defer c.Reset(st)
	if rc != sqlite3.SQLITE_ROW {
		return fmt.Errorf("ping feed database: %w", c.ErrorFor(rc))
	}
	if err := checkNotMoved(c); err != nil {
		return fmt.Errorf("ping feed database: %w", err)
	}
	if err := unix.Faccessat(unix.AT_FDCWD, s.path, unix.R_OK|unix.W_OK, unix.AT_EACCESS); err != nil {
		return fmt.Errorf("ping feed database: database file is not readable and writable: %w", err)
	}
	return nil
}

// checkNotMoved returns ErrFileMoved when the path c was opened with no longer names the
// file it has open (SQLITE_FCNTL_HAS_MOVED).
func checkNotMoved(c *sqlitec.Conn) error {
	moved, err := c.HasMoved()
	if err != nil {
		return fmt.Errorf("check database file: %w", err)
	}
	if moved {
		return ErrFileMoved
	}
	return nil
}
