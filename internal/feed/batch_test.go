package feed

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestBatchKeepsEachResult: writes that share one group commit each get their own result,
// and a failing one fails alone.
func TestBatchKeepsEachResult(t *testing.T) {
	s := openTestStore(t, newTestDB(t), Options{CommitWindow: 200 * time.Millisecond})
	// A commit now, so that the next writes wait out the window together.
	if _, _, err := s.Like(nil, 1, 30); err != nil {
		t.Fatal(err)
	}
	before := s.Stats().Batches
	type result struct {
		status int
		body   string
		err    error
	}
	tests := []struct {
		name string
		do   func() result
		want func(r result) bool
	}{
		{"new like", func() result {
			b, created, err := s.Like(nil, 2, 28) // post 28 has no like in the test database
			return result{map[bool]int{true: 201, false: 200}[created], string(b), err}
		}, func(r result) bool { return r.err == nil && r.status == 201 }},
		{"existing like", func() result {
			b, created, err := s.Like(nil, 1, 30)
			return result{map[bool]int{true: 201, false: 200}[created], string(b), err}
		}, func(r result) bool {
			return r.err == nil && r.status == 200 && strings.Contains(r.body, `"already_liked":true`)
		}},
		{"like of a missing post", func() result {
			_, _, err := s.Like(nil, 2, 999999)
			return result{err: err}
		}, func(r result) bool { return errors.Is(r.err, ErrPostNotFound) }},
		{"like by a missing user", func() result {
			_, _, err := s.Like(nil, 99, 32)
			return result{err: err}
		}, func(r result) bool { return r.err != nil && !errors.Is(r.err, ErrPostNotFound) }},
		{"new post", func() result {
			b, err := s.CreatePost(nil, 3, []byte("user_3"), "in a batch")
			return result{201, string(b), err}
		}, func(r result) bool { return r.err == nil && strings.Contains(r.body, `"body":"in a batch"`) }},
		{"post by a missing user", func() result {
			_, err := s.CreatePost(nil, 99, []byte("nobody"), "lost")
			return result{err: err}
		}, func(r result) bool { return r.err != nil }},
	}
	results := make([]result, len(tests))
	var wg sync.WaitGroup
	for i, tt := range tests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = tt.do()
		}()
	}
	wg.Wait()
	for i, tt := range tests {
		if !tt.want(results[i]) {
			t.Errorf("%s: %+v", tt.name, results[i])
		}
	}
	if got := s.Stats().Batches - before; got != 1 {
		t.Errorf("%d commits for the %d writes, want them in one", got, len(tests))
	}
	if got := likeCount(t, s, 28); got != 1 {
		t.Errorf("post 28 has %d likes after the batch, want the new one", got)
	}
}

// TestGroupCommitUnderLoad: concurrent writers share commits, and every write lands.
func TestGroupCommitUnderLoad(t *testing.T) {
	s := openTestStore(t, newTestDB(t), Options{})
	const writers, each = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := s.CreatePost(nil, int64(1+w%5), []byte("x"), "load"); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := s.Stats()
	t.Logf("%d writes in %d commits (largest %d)", st.Batched, st.Batches, st.LargestBatch)
	if st.Batched != writers*each || st.Batches >= st.Batched {
		t.Errorf("stats %+v: want %d writes sharing fewer commits", st, writers*each)
	}
}

func likeCount(t *testing.T, s *Store, post int64) int {
	t.Helper()
	b, err := s.AppendPost(nil, post)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte(`"like_count":`))
	n := 0
	for _, c := range b[i+len(`"like_count":`):] {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func TestWireMessages(t *testing.T) {
	tests := []struct {
		name string
		in   op
	}{
		{"like", op{kind: opLike, userID: 7, postID: 1 << 40}},
		{"post", op{kind: opPost, userID: -1, body: "héllo \"world\""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got op
			if err := decodeRequest(appendRequest(nil, &tt.in), &got); err != nil ||
				got.kind != tt.in.kind || got.userID != tt.in.userID || got.postID != tt.in.postID || got.body != tt.in.body {
				t.Errorf("request round trip: %+v, %v", got, err)
			}
		})
	}
	answers := []struct {
		name string
		done op
		ok   func(o *op) bool
	}{
		{"like created", op{kind: opLike, created: true}, func(o *op) bool { return o.err == nil && o.created }},
		{"like existed", op{kind: opLike}, func(o *op) bool { return o.err == nil && !o.created }},
		{"post", op{kind: opPost, id: 42, createdAt: [32]byte{'2', '0'}, nCreated: 2}, func(o *op) bool {
			return o.err == nil && o.id == 42 && string(o.createdAt[:o.nCreated]) == "20"
		}},
		{"not found", op{kind: opLike, err: ErrPostNotFound}, func(o *op) bool { return errors.Is(o.err, ErrPostNotFound) }},
		{"moved", op{kind: opPost, err: ErrFileMoved}, func(o *op) bool { return errors.Is(o.err, ErrFileMoved) }},
		{"failed", op{kind: opPost, err: errors.New("database or disk is full")}, func(o *op) bool {
			return o.err != nil && strings.Contains(o.err.Error(), "write owner: database or disk is full")
		}},
	}
	for _, tt := range answers {
		t.Run("answer "+tt.name, func(t *testing.T) {
			got := op{kind: tt.done.kind}
			if err := decodeAnswer(appendAnswer(nil, &tt.done), &got); err != nil || !tt.ok(&got) {
				t.Errorf("answer round trip: %+v, %v", got, err)
			}
		})
	}
}

func FuzzWireMessages(f *testing.F) {
	f.Add(appendRequest(nil, &op{kind: opLike, userID: 1, postID: 2}))
	f.Add(appendRequest(nil, &op{kind: opPost, userID: 1, body: "hi"}))
	f.Add([]byte{ansOK, 1})
	f.Add([]byte{ansFailed, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		var o op
		if decodeRequest(b, &o) == nil {
			if again := appendRequest(nil, &o); !bytes.Equal(again, b) {
				t.Fatalf("request %q decodes to %+v, which encodes to %q", b, o, again)
			}
		}
		for _, kind := range []byte{opLike, opPost} {
			a := op{kind: kind}
			if decodeAnswer(b, &a) == nil && a.err == nil {
				if again := appendAnswer(nil, &a); !bytes.Equal(again, b) {
					t.Fatalf("answer %q decodes to %+v, which encodes to %q", b, a, again)
				}
			}
		}
	})
}

// TestReadMmapFollowsWriteRole: with one read connection (a prefork worker), reads use the
// memory map only where no other connection's commits reach them: in the write owner whose
// reads run on its write connection. A follower reads with pread, and switches when it
// becomes the owner. With several read connections (one process on several cores) every
// role maps while the file is quiet, to keep the readers off the page caches' one mutex.
func TestReadMmapFollowsWriteRole(t *testing.T) {
	const mapped = "1073741824"
	for _, tc := range []struct {
		name                 string
		procs                int
		opts                 Options
		owner, follower, new string // mmap_size of the owner, the follower, the follower once owner
	}{
		{"one read connection", 1, Options{}, mapped, "0", mapped},
		// No writes yet: the file is quiet (TestReadMmapFollowsWrites).
		{"several read connections", 1, Options{ReadConns: 2}, mapped, mapped, mapped},
		{"GOMAXPROCS 2", 2, Options{}, mapped, mapped, mapped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev := runtime.GOMAXPROCS(tc.procs)
			defer runtime.GOMAXPROCS(prev)
			path := newTestDB(t)
			a := openTestStore(t, path, tc.opts)
			b := openTestStore(t, path, tc.opts)
			mmapOf := func(s *Store) string { return readersMmap(t, s) }
			waitFor := func(what string, ok func() bool) {
				t.Helper()
				for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%s: not within 5 s (owner %s, follower %s)", what, mmapOf(a), mmapOf(b))
					}
				}
			}
			if a.WriteRole() != "owner" || b.WriteRole() != "follower" {
				t.Fatalf("roles %s, %s; want owner, follower", a.WriteRole(), b.WriteRole())
			}
			waitFor("owner "+tc.owner+", follower "+tc.follower, func() bool { return mmapOf(a) == tc.owner && mmapOf(b) == tc.follower })
			a.HandOverWrites()
			waitFor("the new owner "+tc.new, func() bool { return b.WriteRole() == "owner" && mmapOf(b) == tc.new })
			if _, err := b.CreatePost(nil, 1, []byte("user_1"), "after the handover"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// readersMmap is the mmap_size of every read connection of s, or "mixed" when they differ.
// It holds them all for a moment, taking turns with tuneReaders.
func readersMmap(t *testing.T, s *Store) string {
	t.Helper()
	got := ""
	held, err := s.withAllReaders(func(rs []*reader) error {
		for _, r := range rs {
			v, err := r.QueryText("PRAGMA mmap_size")
			if err != nil {
				return err
			}
			if got != "" && v != got {
				got = "mixed"
				return nil
			}
			got = v
		}
		return nil
	})
	if err != nil || !held {
		t.Fatalf("read mmap_size: held %v, %v", held, err)
	}
	return got
}

// TestReadMmapFollowsWrites: several read connections (one process on several cores) read
// through the map while the file sees no commits and with pread while it does: the owner
// leaves the map at its own commit, the follower when its checkpointer sees the owner's
// (PRAGMA data_version), and both go back once the file has been quiet for
// readsQuietAfter. One read connection keeps its role's choice whatever the writes.
func TestReadMmapFollowsWrites(t *testing.T) {
	const mapped = "1073741824"
	for _, tc := range []struct {
		name                  string
		opts                  Options
		busyOwner, busyFollow string // mmap_size while writes come
	}{
		{"several read connections", Options{ReadConns: 2, CheckpointInterval: 10 * time.Millisecond}, "0", "0"},
		{"one read connection", Options{ReadConns: 1, SeparateReaders: true, CheckpointInterval: 10 * time.Millisecond}, "0", "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := newTestDB(t)
			a := openTestStore(t, path, tc.opts)
			b := openTestStore(t, path, tc.opts)
			if a.WriteRole() != "owner" || b.WriteRole() != "follower" {
				t.Fatalf("roles %s, %s; want owner, follower", a.WriteRole(), b.WriteRole())
			}
			waitFor := func(what string, ok func() bool) {
				t.Helper()
				for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%s: not within 5 s (owner %s, follower %s)", what, readersMmap(t, a), readersMmap(t, b))
					}
				}
			}
			quiet := "0"
			if tc.opts.ReadConns > 1 {
				quiet = mapped
			}
			waitFor("before any write: "+quiet, func() bool { return readersMmap(t, a) == quiet && readersMmap(t, b) == quiet })
			// The follower's writes are forwarded to the owner, which commits them; one at
			// each look, so the file is not quiet however slowly the test runs.
			waitFor("while writes come", func() bool {
				if _, err := b.CreatePost(nil, 1, []byte("user_1"), "a write"); err != nil {
					t.Fatal(err)
				}
				return readersMmap(t, a) == tc.busyOwner && readersMmap(t, b) == tc.busyFollow
			})
			waitFor("quiet again: "+quiet, func() bool { return readersMmap(t, a) == quiet && readersMmap(t, b) == quiet })
		})
	}
}
