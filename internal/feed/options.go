package feed

import (
	"runtime"
	"time"

	"go.uber.org/zap"
)

// Options configures a Store. The zero value works.
type Options struct {
	// Logger receives what the Store does in the background: checkpoints that fail,
	// and the WAL size when it is large. Default: zap.NewNop().
	Logger *zap.Logger

	// ReadConns is the number of read connections, so the number of reads that run at
	// once; more callers wait for one. Default: runtime.GOMAXPROCS(0), and when that is 1
	// (a prefork worker) no separate read connection at all: reads and writes share the
	// write connection. SQLite drops a connection's whole page cache whenever another
	// connection has committed, so a reader beside an in-process writer re-reads and
	// re-parses every page it touches after each write; on one core that cost the mix
	// (8 % writes) half its throughput. Sharing also keeps the writer's cache warm.
	ReadConns int

	// SeparateReaders keeps read connections apart from the write connection even when
	// ReadConns defaults to 1. Default false.
	SeparateReaders bool

	shared bool // set by setDefaults: reads use the write connection

	// BusyTimeout is how long a call keeps retrying while another connection or process
	// holds a lock it needs, before it fails with SQLite's lock error. Default: 5 s.
	BusyTimeout time.Duration

	// CacheSize is the size of each connection's page cache in bytes. Default: 16 MiB.
	CacheSize int64

	// MmapSize is how many bytes of the database file a connection reads through a shared
	// memory map (PRAGMA mmap_size): address space, not memory; pages past it are read with
	// pread. Default: 1 GiB (the seed is 250 MB); negative: no mmap anywhere.
	//
	// The map pays only where a connection sees no other connection's commits: each
	// foreign commit unmaps and remaps the whole file at the reader's next transaction.
	// With WritesOwner, a Store with one read connection (a prefork worker) therefore
	// uses the map in the write owner when its reads run on its write connection, and
	// pread where they do not (followers, and a separate read connection, which sees the
	// writer's commits); the Store switches its read connections when its role changes.
	// Measured under the mix: the owner alone 5 % less CPU per request with the map, two
	// workers 6-10 % less without it on the follower (docs/performance.md).
	//
	// Several read connections (one process with GOMAXPROCS > 1), in every role and
	// under WritesFlock, map while the file sees no commits (none for readsQuietAfter,
	// 1 s, as the checkpointer's PRAGMA data_version tells, or this process's first
	// commit ends it) and pread while it does: the SQLite this package links is built
	// with SQLITE_ENABLE_MEMORY_MANAGEMENT, so all page caches of a process share one LRU
	// group behind one mutex, and the readers' pread pages, which go through the cache,
	// serialized them on it (29 % of a 16-core process's CPU in pcache1's lock; /feed at
	// GOMAXPROCS=8 cost 309 µs a request against the cluster's 88); mapped pages bypass
	// the cache. But a commit unmaps the whole file at every reader's next transaction,
	// and in a multi-threaded process the munmap, the new mmap and the page faults behind
	// it cost more than the lock: the mix at GOMAXPROCS=2 with its readers mapped took
	// 318 µs of CPU a request against 87 with pread (2-core machine, 2026-12-05).
	MmapSize int64

	// CheckpointInterval is how often the checkpointer runs a PASSIVE checkpoint.
	// Default: 250 ms; negative: no checkpointer (then something else must checkpoint, or
	// the WAL grows without bound).
	CheckpointInterval time.Duration

	// CheckpointFrames is the WAL size, in frames (pages), above which the checkpointer
	// runs ten times as often. Default: 1000, SQLite's own autocheckpoint threshold.
	CheckpointFrames int

	// RestartWait bounds how long an escalated RESTART checkpoint waits for the writers
	// and readers of other processes. Default 200 ms.
	RestartWait time.Duration

	// Writes chooses how the processes that serve one file share its writes:
	//   - WritesOwner (the default, ""): they elect one write owner (internal/owner); the
	//     others forward their writes to it, and it commits them all in group commits
	//     (batch.go, forward.go);
	//   - WritesFlock: each process commits its own writes in group commits, taking turns
	//     through an exclusive flock on the side file PATH.writelock (the design the owner
	//     was measured against; docs/performance.md).
	Writes string

	// CommitWindow is the least time from the start of one group commit to the start of
	// the next: the file sees at most one commit per window, and writes that arrive
	// meanwhile share the next one; a write that finds no commit in the last window
	// commits at once; a batch of 8 or more writes commits without waiting. Default
	// DefaultCommitWindow; negative: none (commit whatever has queued as soon as the previous commit ends).
	// Why 4 and not 1: every commit drops every reader's page cache, in every process;
	// once the event loop yielded to the committer on time (internal/http1's loopYield),
	// 1 ms meant ~490 commits/s of 1.9 writes under the 2-worker mix and 104 µs of CPU a
	// request against 86 before; 4 ms gives ~220 commits/s of 4.6 writes and the CPU a
	// request of before, at half the write latency (docs/scaling.md).
	CommitWindow time.Duration

	// CommitMax caps the writes of one batch; a full batch commits at once. Default 128.
	CommitMax int

	// OwnerProcs, when above the process's GOMAXPROCS, is the GOMAXPROCS it runs with
	// while it is the write owner (back to what it was when it stops owning). Why: a
	// prefork worker has one P, and its event loop (internal/http1's loop transport) keeps
	// it while connections have data, so the owner's committer and the goroutines that
	// read its followers' writes wait for the loop to yield, or for the runtime's 10 ms
	// preemption; a second P serves them while the loop serves HTTP. 0: unchanged.
	OwnerProcs int

	// WriteTimeout bounds how long a write forwarded to the owner waits for its answer;
	// past it the request fails as undecided (503), and from a second of silence on the
	// process writes itself until the owner answers again. Default 5 s.
	WriteTimeout time.Duration

	// Synchronous is SQLite's synchronous setting on every connection: SyncNormal (the
	// default, "") or SyncFull. In WAL mode NORMAL syncs the WAL only when a checkpoint
	// copies it back, so an acknowledged write survives the process's crash (kill -9) but
	// not a power cut or a kernel panic before the next checkpoint (the file stays
	// consistent: the commits since then are lost, nothing is torn). FULL syncs the WAL at
	// every commit before it returns, so an acknowledged write survives those too; with
	// group commits that is one fsync per batch, not per write (docs/reliability.md).
	Synchronous string

	// Log, when set, makes the file this host's copy of a fleet's one database
	// (logwrite.go): every write is published to the fleet's write log and applied from
	// it, in the log's order, by this host's write owner; no process writes the file
	// otherwise. It needs WritesOwner. Default nil: the file is this host's alone.
	Log Log

	// SnapshotEvery is, with Log, how many messages the leading host applies between two
	// snapshots of its file into the log (after each, the log is purged). Default 10,000;
	// NoSnapshots: none (the log grows without bound: for measurements only).
	SnapshotEvery uint64
}

// Synchronous settings (Options.Synchronous).
const (
	SyncNormal = "normal"
	SyncFull   = "full"
)

// Write modes (Options.Writes).
const (
	WritesOwner = "owner"
	WritesFlock = "flock"
)

// NoSnapshots is Options.SnapshotEvery's "never".
const NoSnapshots = ^uint64(0)

// DefaultCommitWindow is Options.CommitWindow's default (why 4 ms: there).
const DefaultCommitWindow = 4 * time.Millisecond

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.ReadConns <= 0 {
		o.ReadConns = runtime.GOMAXPROCS(0)
		o.shared = o.ReadConns == 1 && !o.SeparateReaders
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.CacheSize <= 0 {
		o.CacheSize = 16 << 20
	}
	if o.MmapSize == 0 {
		o.MmapSize = 1 << 30
	} else if o.MmapSize < 0 {
		o.MmapSize = 0
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = 250 * time.Millisecond
	}
	if o.RestartWait <= 0 {
		o.RestartWait = 200 * time.Millisecond
	}
	if o.CheckpointFrames <= 0 {
		o.CheckpointFrames = 1000
	}
	if o.Writes == "" {
		o.Writes = WritesOwner
	}
	if o.CommitWindow == 0 {
		o.CommitWindow = DefaultCommitWindow
	} else if o.CommitWindow < 0 {
		o.CommitWindow = 0
	}
	if o.CommitMax <= 0 {
		o.CommitMax = 128
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 5 * time.Second
	}
	if o.SnapshotEvery == 0 {
		o.SnapshotEvery = 10000
	}
	if o.Synchronous == "" {
		o.Synchronous = SyncNormal
	}
}
