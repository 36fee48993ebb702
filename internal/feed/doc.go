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
// Non-goals: anything beyond the five endpoints of the contract.
package feed
