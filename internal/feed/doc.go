// Package feed is the "$12 Server Challenge" feed API: its HTTP handler (routing, the
// contract's exact errors, mapped to statuses in one place) and its data layer over one
// shared WAL SQLite file.
//
// The contract binds every response byte for byte, and its rules bind the implementation:
// no caching across requests (every request reads SQLite while it is served), every JWT
// signature verified on every request, writes committed before the response (WAL with
// synchronous=NORMAL: durable against a process crash, not a power cut between checkpoints;
// Options.Synchronous FULL for that), the schema fixed. Several worker processes may open the same file;
// they elect one write owner that commits every process's writes in group commits (store.go,
// batch.go, forward.go), so that writes never fail with "database is locked" and the
// readers of every process keep their caches warm.
//
// Files: store.go opens and closes the Store (connections, statements, Stats, Ping);
// options.go holds Options and its defaults; schemacheck.go refuses a file whose schema is
// not the contract's; read.go is the read path (AppendPost, AppendFeed); write.go the
// writes (CreatePost, Like); retry.go waits out SQLITE_BUSY; mmap.go switches the read
// connections between mmap and pread with the process's write role; checkpoint.go is the
// checkpointer; batch.go and forward.go are the group commit and its forwarding; handler.go
// and body.go the HTTP side. With Options.Log the file is one host's copy of a fleet's
// database: logwrite.go publishes the owner's batches to the fleet's write log and answers
// them once applied, logapply.go applies the log in its order (the intents' format, the
// sequence in the header), logsnap.go takes the snapshots and restores a new host's file.
//
// Non-goals: anything beyond the five endpoints of the contract.
package feed
