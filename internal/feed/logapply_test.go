package feed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/onehost/onehost/internal/sqlitec"
)

// memStream is an ordered log in memory: the same contract as the fleet's stream (one
// order, a message id stored once), without a network, so that the apply is tested alone.
type memStream struct {
	mu   sync.Mutex
	msgs []LogMsg
	ids  map[string]uint64
	more chan struct{} // closed and replaced at every append
}

func newMemStream() *memStream {
	return &memStream{ids: map[string]uint64{}, more: make(chan struct{})}
}

// memLog is one host's view of a memStream.
type memLog struct {
	st   *memStream
	self string
}

func (l memLog) Self() string { return l.self }

func (l memLog) Publish(ctx context.Context, id string, data []byte) (uint64, error) {
	s := l.st
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq, ok := s.ids[id]; ok {
		return seq, nil
	}
	seq := uint64(len(s.msgs) + 1)
	s.msgs = append(s.msgs, LogMsg{Seq: seq, ID: id, Data: append([]byte(nil), data...)})
	s.ids[id] = seq
	close(s.more)
	s.more = make(chan struct{})
	return seq, nil
}

func (l memLog) Follow(ctx context.Context, after uint64, apply func([]LogMsg) error) error {
	s := l.st
	for {
		s.mu.Lock()
		batch := append([]LogMsg(nil), s.msgs[min(after, uint64(len(s.msgs))):]...)
		more := s.more
		s.mu.Unlock()
		if len(batch) > 0 {
			if err := apply(batch); err != nil {
				return err
			}
			after = batch[len(batch)-1].Seq
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-more:
		}
	}
}

func (l memLog) last() uint64 {
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	return uint64(len(l.st.msgs))
}

func (memLog) WaitApplied(context.Context, uint64) error            { return nil }
func (memLog) Serving() string                                      { return "" }
func (memLog) Leads() bool                                          { return false }
func (memLog) SnapshotSeq(context.Context) (uint64, error)          { return 0, errors.New("none") }
func (memLog) PutSnapshot(context.Context, uint64, io.Reader) error { return nil }
func (memLog) MinLiveApplied() (uint64, bool)                       { return 0, false }
func (memLog) Purge(context.Context, uint64) error                  { return nil }

// copyDB copies the database at src to a new file and returns its path.
func copyDB(t testing.TB, src string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "feed.db")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// digest is a digest of every row of posts and likes, and the sequence the file holds.
func digest(t testing.TB, path string) string {
	t.Helper()
	c, err := sqlitec.Open(path, sqlite3.SQLITE_OPEN_READONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := sha256.New()
	for _, q := range []string{
		`SELECT group_concat(id||'|'||user_id||'|'||body||'|'||created_at, char(10)) FROM (SELECT * FROM posts ORDER BY id)`,
		`SELECT group_concat(user_id||'|'||post_id||'|'||created_at, char(10)) FROM (SELECT * FROM likes ORDER BY user_id, post_id)`,
	} {
		v, err := c.QueryText(q)
		if err != nil {
			t.Fatal(err)
		}
		h.Write([]byte(v))
	}
	pos, err := positionOf(c)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s@%d", hex.EncodeToString(h.Sum(nil))[:16], pos)
}

// waitPosition waits until the Store's file holds seq.
func waitPosition(t testing.TB, s *Store, seq uint64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		pos, err := s.logPosition()
		if err == nil && pos >= seq {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the file holds %d after 10 s, want %d (%v)", pos, seq, err)
		}
	}
}

// fleetWrites runs writes of every kind on s, concurrently: posts, new and repeated likes,
// a like of a missing post, a post and a like by a missing user.
func fleetWrites(t *testing.T, s *Store) (posts []int64) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 10 {
				user := int64(1 + (g+i)%5)
				b, err := s.CreatePost(nil, user, []byte("u"), fmt.Sprintf("fleet post %d/%d", g, i))
				if err != nil {
					t.Errorf("post: %v", err)
					return
				}
				var id int64
				fmt.Sscanf(string(b), `{"post":{"id":%d`, &id)
				mu.Lock()
				posts = append(posts, id)
				mu.Unlock()
				if _, _, err := s.Like(nil, user, int64(1+i)); err != nil {
					t.Errorf("like: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if _, _, err := s.Like(nil, 1, 999999); !errors.Is(err, ErrPostNotFound) {
		t.Errorf("like of a missing post: %v, want ErrPostNotFound", err)
	}
	if _, err := s.CreatePost(nil, 99, []byte("nobody"), "lost"); err == nil {
		t.Error("post by a missing user: no error")
	}
	return posts
}

// TestLogApplyDeterministic: the intents one host published, applied to a second fresh
// copy of the same file, give the same rows (ids, created_at, likes) and the same
// sequence; ids are never reused.
func TestLogApplyDeterministic(t *testing.T) {
	base := newTestDB(t)
	pa, pb := copyDB(t, base), copyDB(t, base)
	st := newMemStream()
	a := openTestStore(t, pa, Options{Log: memLog{st, "a"}})
	posts := fleetWrites(t, a)
	seen := map[int64]bool{}
	for _, id := range posts {
		if seen[id] {
			t.Fatalf("post id %d given twice", id)
		}
		seen[id] = true
	}
	last := memLog{st, "b"}.last()
	waitPosition(t, a, last)
	b := openTestStore(t, pb, Options{Log: memLog{st, "b"}})
	waitPosition(t, b, last)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if da, db := digest(t, pa), digest(t, pb); da != db {
		t.Fatalf("the same intents on two fresh files: %s and %s", da, db)
	}
}

// TestLogApplierRestart: an applier that stops and starts again (its Store closed and
// opened) resumes from the sequence the file holds: no message twice, none skipped; and a
// batch that holds messages already applied skips them.
func TestLogApplierRestart(t *testing.T) {
	base := newTestDB(t)
	pa, pref := copyDB(t, base), copyDB(t, base)
	st := newMemStream()
	a := openTestStore(t, pa, Options{Log: memLog{st, "a"}})
	fleetWrites(t, a)
	waitPosition(t, a, memLog{st, "a"}.last())
	a.Close()
	// Meanwhile another host writes on.
	other := openTestStore(t, pref, Options{Log: memLog{st, "o"}})
	fleetWrites(t, other)
	last := memLog{st, "o"}.last()
	waitPosition(t, other, last)
	a = openTestStore(t, pa, Options{Log: memLog{st, "a"}})
	waitPosition(t, a, last)
	// Every message again, in one batch: all skipped, nothing changes.
	st.mu.Lock()
	all := append([]LogMsg(nil), st.msgs...)
	st.mu.Unlock()
	before := digest(t, pa)
	_, bounds, pos, err := a.applyMsgs(all, nil, nil)
	if err != nil || pos != 0 {
		t.Fatalf("applying what is applied: pos %d, %v; want nothing applied", pos, err)
	}
	for i, b := range bounds {
		if b >= 0 {
			t.Fatalf("message %d applied again", all[i].Seq)
		}
	}
	a.Close()
	other.Close()
	if got := digest(t, pa); got != before {
		t.Fatalf("file changed by a replay: %s, was %s", got, before)
	}
	if da, dr := digest(t, pa), digest(t, pref); da != dr {
		t.Fatalf("restarted applier %s, the other host %s", da, dr)
	}
}

// TestIntentsRoundTrip: what appendIntents writes, nextIntent reads back.
func TestIntentsRoundTrip(t *testing.T) {
	ops := []*op{{kind: opLike, userID: 7, postID: 9}, {kind: opPost, userID: 3, body: "héllo, 世界"}}
	now := time.Date(2026, 12, 7, 15, 4, 5, 678e6, time.UTC)
	msg := appendIntents(nil, ops, now)
	createdAt, rest, err := splitMessage(msg)
	if err != nil || string(createdAt) != "2026-12-07T15:04:05.678Z" {
		t.Fatalf("created_at %q, %v", createdAt, err)
	}
	for i, o := range ops {
		var in intent
		in, rest, err = nextIntent(rest)
		if err != nil || in.kind != o.kind || in.userID != o.userID || in.postID != o.postID || string(in.body) != o.body {
			t.Fatalf("intent %d: %+v, %v; want %+v", i, in, err, o)
		}
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes left", len(rest))
	}
}

// FuzzIntents: any message is applied as intents or refused, never a panic.
func FuzzIntents(f *testing.F) {
	f.Add(appendIntents(nil, []*op{{kind: opLike, userID: 1, postID: 2}, {kind: opPost, userID: 1, body: "x"}}, time.Unix(0, 0)))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, rest, err := splitMessage(b)
		for err == nil && len(rest) > 0 {
			_, rest, err = nextIntent(rest)
		}
	})
}
