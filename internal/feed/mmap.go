package feed

import (
	"fmt"
	"runtime"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/owner"
)

// readsQuietAfter is how long the file must see no commit before several read connections
// go back to the memory map (see Options.MmapSize).
const readsQuietAfter = time.Second

// The write roles chooseMmap knows (Store.role): roleOther is WritesFlock, or the time
// before the first election.
const (
	roleOther int32 = iota
	roleOwner
	roleFollower
)

// onWriteRole chooses the read connections' mmap for the write role this process took
// (see Options.MmapSize); tuneReaders applies it.
func (s *Store) onWriteRole(role string) {
	s.ownerProcs(role == owner.RoleOwner)
	switch role {
	case owner.RoleOwner:
		s.role.Store(roleOwner)
	case owner.RoleFollower:
		s.role.Store(roleFollower)
	default:
		return // between owners: keep what is set, the next role decides
	}
	s.chooseMmap()
}

// setQuiet records whether the file has been free of commits for readsQuietAfter, and
// chooses the map again when that changed.
func (s *Store) setQuiet(quiet bool) {
	if s.quiet.Load() != quiet {
		s.quiet.Store(quiet)
		s.chooseMmap()
	}
}

// noteCommit is called after each of this process's commits: the file is not quiet, and
// several read connections leave the map at once rather than at the checkpointer's next
// look.
func (s *Store) noteCommit() {
	if s.quiet.Load() {
		s.setQuiet(false)
	}
}

// chooseMmap sets readMmap from the write role and whether the file is quiet (see
// Options.MmapSize) and wakes tuneReaders when it changed.
func (s *Store) chooseMmap() {
	s.mmapMu.Lock()
	defer s.mmapMu.Unlock()
	role := s.role.Load()
	mapped := false
	switch {
	case s.readerCount > 1:
		mapped = s.quiet.Load()
	case role == roleOther:
		mapped = true // WritesFlock with one read connection, as before any election
	default:
		mapped = s.shared && role == roleOwner
	}
	want := int64(0)
	if mapped {
		want = s.mmapSize
	}
	if s.readMmap.Swap(want) == want {
		return
	}
	select {
	case s.mmapKick <- struct{}{}:
	default:
	}
}

// ownerProcs raises GOMAXPROCS to Options.OwnerProcs while this process owns the writes,
// and puts it back when it stops (see OwnerProcs). Called from the election's goroutine
// alone.
func (s *Store) ownerProcs(owning bool) {
	switch {
	case owning && s.procsBefore == 0 && s.ownerProcsN > runtime.GOMAXPROCS(0):
		s.procsBefore = runtime.GOMAXPROCS(s.ownerProcsN)
		s.log.Info("write owner: GOMAXPROCS raised", zap.Int("gomaxprocs", s.ownerProcsN), zap.Int("was", s.procsBefore))
	case !owning && s.procsBefore != 0:
		runtime.GOMAXPROCS(s.procsBefore)
		s.procsBefore = 0
	}
}

// tuneReaders sets every read connection's mmap_size to readMmap whenever it changes,
// until Close. It takes all read connections out of the pool while it does (a role
// changes rarely; reads wait for a moment).
func (s *Store) tuneReaders() {
	defer close(s.tunerDone)
	cur := s.mmapSize
	for {
		select {
		case <-s.stop:
			return
		case <-s.mmapKick:
		}
		want := s.readMmap.Load()
		if want == cur {
			continue
		}
		held, err := s.withAllReaders(func(rs []*reader) error {
			for _, r := range rs {
				if err := r.Exec(fmt.Sprintf("PRAGMA mmap_size=%d", want)); err != nil {
					return err
				}
			}
			return nil
		})
		if !held {
			return // closing
		}
		if err != nil {
			s.log.Warn("set the read connections' mmap_size", zap.Int64("bytes", want), zap.Error(err))
			continue
		}
		cur = want
		s.log.Debug("read connections' mmap_size set", zap.Int64("bytes", want))
	}
}

// withAllReaders takes every read connection out of the pool, calls f with them and puts
// them back; held is false, and f is not called, when the store closes first. Callers take
// turns: two that each held part of the pool would wait on each other for ever.
func (s *Store) withAllReaders(f func([]*reader) error) (held bool, err error) {
	s.holdAll.Lock()
	defer s.holdAll.Unlock()
	rs := make([]*reader, 0, s.readerCount)
	defer func() {
		for _, r := range rs {
			s.putReader(r)
		}
	}()
	for range s.readerCount {
		select {
		case r := <-s.readers:
			rs = append(rs, r)
		case <-s.stop:
			return false, nil
		}
	}
	return true, f(rs)
}
