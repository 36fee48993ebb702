package feed

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	_ "modernc.org/sqlite" // the database/sql driver, for the comparison benchmarks
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/onehost/onehost/internal/schema"
	"github.com/onehost/onehost/internal/seedtest"
	"github.com/onehost/onehost/internal/sqlitec"
)

// trickyBodies are post bodies that exercise JSON escaping.
var trickyBodies = []string{
	`test: <b>&amp;</b> "quoted" / café ✓`,
	"tab\there\nnewline\r\\ back\\slash \x01\x08\x0b\x0c\x1f\x7f end",
	"\u2028\u2029 \U0001F600 ünïcødé",
	"NUL \x00 inside (SQLite's length() stops at it)",
	strings.Repeat("b", 500),
}

// newTestDB writes a small database with the challenge schema in WAL mode and returns its
// path: users 1..5; posts 1..len(trickyBodies)+30 (created one minute apart, two sharing a
// timestamp so that id breaks the tie); likes such that post i has i%7 likes.
func newTestDB(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "feed.db")
	c, err := sqlitec.Open(path, sqlite3.SQLITE_OPEN_READWRITE|sqlite3.SQLITE_OPEN_CREATE)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Exec(schema.SQL))
	must(c.Exec("BEGIN"))
	for u := 1; u <= 5; u++ {
		must(c.Exec(fmt.Sprintf(`INSERT INTO users(id, username, created_at) VALUES(%d, 'user_%d', '2024-01-01T00:00:00.000Z')`, u, u)))
	}
	ins, err := c.Prepare(`INSERT INTO posts(id, user_id, body, created_at)
VALUES(?1, ?2, ?3, printf('2025-06-01T%02d:%02d:00.000Z', ?4 / 60, ?4 % 60))`)
	must(err)
	n := len(trickyBodies) + 30
	for i := 1; i <= n; i++ {
		body := fmt.Sprintf("Post number %d.", i)
		if i <= len(trickyBodies) {
			body = trickyBodies[i-1]
		}
		minute := i
		if i == n {
			minute = n - 1 // ties with post n-1: id decides
		}
		c.BindInt64(ins, 1, int64(i))
		c.BindInt64(ins, 2, int64(1+i%5))
		c.BindText(ins, 3, body)
		c.BindInt64(ins, 4, int64(minute))
		must(stepDone(c, ins))
		for u := 1; u <= i%7 && u <= 5; u++ {
			must(c.Exec(fmt.Sprintf(`INSERT INTO likes(user_id, post_id) VALUES(%d, %d)`, u, i)))
		}
	}
	must(c.Exec("COMMIT"))
	if mode, err := c.QueryText("PRAGMA journal_mode=WAL"); err != nil || mode != "wal" {
		t.Fatalf("journal_mode: %q, %v", mode, err)
	}
	return path
}

// stepDone runs st to completion and resets it.
func stepDone(c *sqlitec.Conn, st sqlitec.Stmt) error {
	defer c.Reset(st)
	for {
		switch rc := c.Step(st); rc {
		case sqlite3.SQLITE_ROW:
		case sqlite3.SQLITE_DONE:
			return nil
		default:
			return c.ErrorFor(rc)
		}
	}
}

func openTestStore(t testing.TB, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// sqliteJSON runs q (one row, one text column) on a fresh connection to path.
func sqliteJSON(t testing.TB, path, q string) []byte {
	t.Helper()
	c, err := sqlitec.Open(path, sqlite3.SQLITE_OPEN_READWRITE)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.QueryText(q)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(s)
}

// The reference's way of building the bodies, in SQLite (as the Node peer does).
const (
	sqlPostObject = `json_object('id',p.id,'body',p.body,'created_at',p.created_at,'author',u.username,
  'like_count',(SELECT count(*) FROM likes l WHERE l.post_id=p.id))`
	sqlFeedJSON = `SELECT '{"posts":' || json_group_array(json(j)) || '}' FROM (SELECT ` + sqlPostObject + ` AS j
FROM posts p JOIN users u ON u.id=p.user_id ORDER BY p.created_at DESC, p.id DESC LIMIT 20)`
	sqlPostJSON = `SELECT '{"post":' || ` + sqlPostObject + ` || '}' FROM posts p JOIN users u ON u.id=p.user_id WHERE p.id=?1`
)

func TestAppendPostMatchesSQLiteJSON(t *testing.T) {
	path := newTestDB(t)
	s := openTestStore(t, path, Options{})
	for id := int64(1); id <= int64(len(trickyBodies)+30); id++ {
		got, err := s.AppendPost(nil, id)
		if err != nil {
			t.Fatalf("AppendPost(%d): %v", id, err)
		}
		want := sqliteJSON(t, path, strings.ReplaceAll(sqlPostJSON, "?1", fmt.Sprint(id)))
		if !bytes.Equal(got, want) {
			t.Errorf("AppendPost(%d) =\n%s\nwant (SQLite's JSON)\n%s", id, got, want)
		}
	}
}

func TestAppendFeedMatchesSQLiteJSON(t *testing.T) {
	path := newTestDB(t)
	s := openTestStore(t, path, Options{})
	got, err := s.AppendFeed([]byte("prefix"))
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte("prefix"), sqliteJSON(t, path, sqlFeedJSON)...)
	if !bytes.Equal(got, want) {
		t.Errorf("AppendFeed =\n%s\nwant (SQLite's JSON)\n%s", got, want)
	}
	var feed struct{ Posts []struct{ ID int64 } }
	if err := json.Unmarshal(got[len("prefix"):], &feed); err != nil {
		t.Fatal(err)
	}
	n := int64(len(trickyBodies) + 30)
	if len(feed.Posts) != FeedSize || feed.Posts[0].ID != n || feed.Posts[1].ID != n-1 {
		t.Errorf("feed has %d posts starting %+v, want %d starting with ids %d, %d (tie broken by id)",
			len(feed.Posts), feed.Posts[:min(2, len(feed.Posts))], FeedSize, n, n-1)
	}
}

func TestAppendFeedShapes(t *testing.T) {
	tests := []struct{ name, alter string }{
		{"sparse ids: counted one by one", `INSERT INTO posts(id, user_id, body, created_at) VALUES(100000, 1, 'far', '2030-01-01T00:00:00.000Z');
INSERT INTO likes(user_id, post_id) VALUES(1, 100000), (2, 100000)`},
		{"ids at the span limit", `INSERT INTO posts(id, user_id, body, created_at) VALUES(
  (SELECT min(id) FROM (SELECT id FROM posts ORDER BY created_at DESC, id DESC LIMIT 19)) + 63, 1, 'edge', '2030-01-01T00:00:00.000Z');
INSERT INTO likes(user_id, post_id) SELECT 3, max(id) FROM posts`},
		{"fewer posts than a feed", `DELETE FROM likes WHERE post_id > 5; DELETE FROM posts WHERE id > 5`},
		{"no posts", `DELETE FROM likes; DELETE FROM posts`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := newTestDB(t)
			c, err := sqlitec.Open(path, sqlite3.SQLITE_OPEN_READWRITE)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Exec(tt.alter)
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
			s := openTestStore(t, path, Options{})
			got, err := s.AppendFeed(nil)
			if want := sqliteJSON(t, path, sqlFeedJSON); err != nil || !bytes.Equal(got, want) {
				t.Errorf("AppendFeed = %s, %v\nwant (SQLite's JSON)\n%s", got, err, want)
			}
		})
	}
}

// TestFeedCountsShareTheSnapshot checks what AppendFeed relies on: a statement run while
// another one on the same connection is open reads that one's snapshot, not a commit made
// in between.
func TestFeedCountsShareTheSnapshot(t *testing.T) {
	path := newTestDB(t)
	s := openTestStore(t, path, Options{ReadConns: 1})
	r, _ := s.getReader()
	defer s.putReader(r)
	c := r.Conn
	if rc := c.Step(r.feedTop); rc != sqlite3.SQLITE_ROW {
		t.Fatal(c.ErrorFor(rc))
	}
	defer c.Reset(r.feedTop)
	newest := c.ColumnInt64(r.feedTop, 0)
	if _, created, err := s.Like(nil, 5, newest); err != nil || !created {
		t.Fatalf("Like: %v, %v", created, err)
	}
	var counts [1]int64
	if err := s.countLikes(r, []int64{newest}, counts[:]); err != nil {
		t.Fatal(err)
	}
	c.Reset(r.feedTop)
	var after [1]int64
	if err := s.countLikes(r, []int64{newest}, after[:]); err != nil {
		t.Fatal(err)
	}
	if counts[0]+1 != after[0] {
		t.Errorf("likes of post %d: %d while the feed statement was open, %d after; want the like counted only after",
			newest, counts[0], after[0])
	}
}

func TestReadErrors(t *testing.T) {
	s := openTestStore(t, newTestDB(t), Options{})
	for _, id := range []int64{999999999, 0, -1, 1 << 62} {
		got, err := s.AppendPost([]byte("x"), id)
		if !errors.Is(err, ErrPostNotFound) || string(got) != "x" {
			t.Errorf("AppendPost(%d) = %q, %v; want dst unchanged, ErrPostNotFound", id, got, err)
		}
	}
}

func TestCreatePostRoundTrip(t *testing.T) {
	s := openTestStore(t, newTestDB(t), Options{})
	for _, body := range trickyBodies[:3] {
		before := time.Now().UTC().Add(-time.Second)
		created, err := s.CreatePost(nil, 1, []byte(`golden "ember" 1`), body)
		if err != nil {
			t.Fatalf("CreatePost(%q): %v", body, err)
		}
		var got struct {
			Post struct {
				ID        int64  `json:"id"`
				Body      string `json:"body"`
				CreatedAt string `json:"created_at"`
				Author    string `json:"author"`
				LikeCount int64  `json:"like_count"`
			} `json:"post"`
		}
		if err := json.Unmarshal(created, &got); err != nil {
			t.Fatalf("CreatePost: %s: %v", created, err)
		}
		p := got.Post
		ts, err := time.Parse("2006-01-02T15:04:05.000Z", p.CreatedAt)
		if p.Body != body || p.Author != `golden "ember" 1` || p.LikeCount != 0 || err != nil ||
			ts.Before(before) || ts.After(time.Now().Add(time.Second)) {
			t.Errorf("CreatePost(%q) = %s (created_at parse: %v)", body, created, err)
		}
		// Reading it back gives the same bytes, except that the author is the users row's.
		read, err := s.AppendPost(nil, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := bytes.Replace(created, []byte(`"golden \"ember\" 1"`), []byte(`"user_1"`), 1)
		if !bytes.Equal(read, want) {
			t.Errorf("AppendPost after CreatePost =\n%s\nwant\n%s", read, want)
		}
		feed, err := s.AppendFeed(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(feed, append([]byte(`{"posts":[`), want[len(`{"post":`):len(want)-1]...)) {
			t.Errorf("feed does not start with the new post:\n%s", feed)
		}
	}
}

func TestWriteErrors(t *testing.T) {
	s := openTestStore(t, newTestDB(t), Options{})
	tests := []struct {
		name     string
		call     func() ([]byte, error)
		notFound bool // want ErrPostNotFound; else a plain error
	}{
		{"create by missing user", func() ([]byte, error) { return s.CreatePost([]byte("x"), 77, []byte("ghost"), "hi") }, false},
		{"create empty body", func() ([]byte, error) { return s.CreatePost([]byte("x"), 1, []byte("u"), "") }, false},
		{"create 501 chars", func() ([]byte, error) { return s.CreatePost([]byte("x"), 1, []byte("u"), strings.Repeat("é", 501)) }, false},
		{"like missing post", func() ([]byte, error) {
			b, _, err := s.Like([]byte("x"), 1, 999999999)
			return b, err
		}, true},
		{"like missing post by missing user", func() ([]byte, error) {
			b, _, err := s.Like([]byte("x"), 77, 999999999)
			return b, err
		}, true},
		{"like by missing user", func() ([]byte, error) {
			b, _, err := s.Like([]byte("x"), 77, 1)
			return b, err
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.call()
			switch {
			case err == nil:
				t.Fatalf("got %q, nil; want an error", got)
			case string(got) != "x":
				t.Errorf("got dst %q; want it unchanged", got)
			case errors.Is(err, ErrPostNotFound) != tt.notFound:
				t.Errorf("got %v; want ErrPostNotFound: %v", err, tt.notFound)
			}
		})
	}
}

func TestLike(t *testing.T) {
	s := openTestStore(t, newTestDB(t), Options{})
	got, created, err := s.Like(nil, 5, 2)
	if want := `{"liked":true,"already_liked":false,"post_id":2}`; err != nil || !created || string(got) != want {
		t.Errorf("first Like = %s, %v, %v; want %s, true, nil", got, created, err, want)
	}
	got, created, err = s.Like(nil, 5, 2)
	if want := `{"liked":true,"already_liked":true,"post_id":2}`; err != nil || created || string(got) != want {
		t.Errorf("second Like = %s, %v, %v; want %s, false, nil", got, created, err, want)
	}
	post, err := s.AppendPost(nil, 2)
	if err != nil || !bytes.HasSuffix(post, []byte(`"like_count":3}}`)) {
		t.Errorf("post 2 after a like = %s, %v; want like_count 3", post, err)
	}
}

func TestConcurrentLikes(t *testing.T) {
	s := openTestStore(t, newTestDB(t), Options{})
	const n = 16
	var created atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			_, ok, err := s.Like(nil, 5, 1)
			if err != nil {
				t.Error(err)
			}
			if ok {
				created.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if got := created.Load(); got != 1 {
		t.Errorf("%d of %d identical likes created one; want exactly 1", got, n)
	}
}

// TestSharedFileWriters runs several Stores on one file, as worker processes do: each has
// its own connections, so they contend for the write lock through SQLite's file locks and
// every conflict goes through the retry loop. No write may fail.
func TestSharedFileWriters(t *testing.T) {
	path := newTestDB(t)
	const stores, writes = 4, 100
	var wg sync.WaitGroup
	var all []*Store
	for i := range stores {
		s := openTestStore(t, path, Options{ReadConns: 1, CheckpointInterval: 5 * time.Millisecond})
		all = append(all, s)
		wg.Go(func() {
			for j := range writes {
				if _, err := s.CreatePost(nil, int64(1+j%5), []byte("w"), fmt.Sprintf("store %d post %d", i, j)); err != nil {
					t.Error(err)
					return
				}
				if _, _, err := s.Like(nil, int64(1+i), int64(1+j)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var total Stats
	for _, s := range all {
		st := s.Stats()
		total.LockWaits += st.LockWaits
		total.LockTimeouts += st.LockTimeouts
		total.Checkpoints += st.Checkpoints
	}
	t.Logf("lock waits %d, timeouts %d, checkpoints %d", total.LockWaits, total.LockTimeouts, total.Checkpoints)
	if total.LockTimeouts != 0 || total.Checkpoints == 0 {
		t.Errorf("stats %+v: want no lock timeouts and some checkpoints", total)
	}
	c, err := sqlitec.Open(path, sqlite3.SQLITE_OPEN_READWRITE)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n, err := c.QueryText(`SELECT count(*) FROM posts WHERE body LIKE 'store %'`)
	if want := fmt.Sprint(stores * writes); err != nil || n != want {
		t.Errorf("posts written: %s, %v; want %s", n, err, want)
	}
}

// holdLock runs q on a new connection to path, keeps it open for hold, then rolls back.
// It returns once q has run.
func holdLock(t *testing.T, path, q string, hold time.Duration) (released <-chan struct{}) {
	t.Helper()
	c, err := sqlitec.Open(path, sqlite3.SQLITE_OPEN_READWRITE)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(q); err != nil {
		c.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(hold)
		c.Exec("ROLLBACK")
		c.Close()
	}()
	t.Cleanup(func() { <-done })
	return done
}

func TestLockWaits(t *testing.T) {
	// Another connection (another worker process, as far as SQLite can tell) holds the
	// write lock for 30 ms.
	const writeLock = "BEGIN IMMEDIATE"
	tests := []struct {
		name, lock  string
		busyTimeout time.Duration
		call        func(s *Store) error
		wantBusy    bool // want the lock error after BusyTimeout; else success after a wait
	}{
		{"like waits for the write lock", writeLock, 0, func(s *Store) error { _, _, err := s.Like(nil, 5, 3); return err }, false},
		{"create waits for the write lock", writeLock, 0, func(s *Store) error { _, err := s.CreatePost(nil, 5, nil, "x"); return err }, false},
		{"like gives up after BusyTimeout", writeLock, 5 * time.Millisecond, func(s *Store) error { _, _, err := s.Like(nil, 5, 3); return err }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := newTestDB(t)
			s := openTestStore(t, path, Options{BusyTimeout: tt.busyTimeout, CheckpointInterval: -1})
			released := holdLock(t, path, tt.lock, 30*time.Millisecond)
			err := tt.call(s)
			st := s.Stats()
			var se *sqlitec.Error
			switch {
			case tt.wantBusy && (!errors.As(err, &se) || !isBusy(se.Code) || st.LockTimeouts != 1):
				t.Errorf("got %v, stats %+v; want SQLITE_BUSY and one lock timeout", err, st)
			case !tt.wantBusy && (err != nil || st.LockWaits == 0):
				t.Errorf("got %v, stats %+v; want success after some lock waits", err, st)
			}
			<-released
		})
	}
}

// TestReadLockWaits checks the reads' retry loop (Store.first). In WAL a reader meets a
// lock only in rare moments (another connection recovering the WAL index), so the test
// uses a rollback-journal database, where a writer's EXCLUSIVE lock blocks readers.
func TestReadLockWaits(t *testing.T) {
	tests := []struct {
		name        string
		busyTimeout time.Duration
		wantBusy    bool
	}{
		{"waits for the lock", time.Second, false},
		{"gives up after BusyTimeout", 5 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.db")
			c, err := sqlitec.Open(path, sqlite3.SQLITE_OPEN_READWRITE|sqlite3.SQLITE_OPEN_CREATE)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.Exec("CREATE TABLE t(x); INSERT INTO t VALUES(1)"); err != nil {
				t.Fatal(err)
			}
			st, err := c.Prepare("SELECT count(*) FROM t")
			if err != nil {
				t.Fatal(err)
			}
			s := &Store{log: zap.NewNop(), busyTimeout: tt.busyTimeout}
			released := holdLock(t, path, "BEGIN EXCLUSIVE; DELETE FROM t", 30*time.Millisecond)
			rc := s.first(c, st)
			c.Reset(st)
			st2 := s.Stats()
			switch {
			case tt.wantBusy && (!isBusy(rc) || st2.LockTimeouts != 1):
				t.Errorf("got rc %d, stats %+v; want SQLITE_BUSY and one lock timeout", rc, st2)
			case !tt.wantBusy && (rc != sqlite3.SQLITE_ROW || st2.LockWaits == 0):
				t.Errorf("got rc %d, stats %+v; want a row after some lock waits", rc, st2)
			}
			<-released
		})
	}
}

// childEnv marks a test binary re-executed as a writer process by TestWriterProcesses; it
// holds the database path.
const childEnv = "FEED_TEST_WRITER_CHILD"

// TestWriterProcesses runs Stores in separate processes writing one file, as prefork
// workers do: every write must succeed, whatever the lock contention.
func TestWriterProcesses(t *testing.T) {
	const procs, writes = 3, 150
	if path := os.Getenv(childEnv); path != "" {
		s := openTestStore(t, path, Options{ReadConns: 1, CheckpointInterval: 10 * time.Millisecond})
		for j := range writes {
			if _, err := s.CreatePost(nil, int64(1+j%5), []byte("w"), fmt.Sprintf("process %d post %d", os.Getpid(), j)); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Like(nil, int64(1+j%5), int64(1+j%30)); err != nil {
				t.Fatal(err)
			}
		}
		fmt.Printf("stats %+v\n", s.Stats())
		return
	}
	if testing.Short() {
		t.Skip("starts processes")
	}
	path := newTestDB(t)
	var wg sync.WaitGroup
	for range procs {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^TestWriterProcesses$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), childEnv+"="+path)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("writer process: %v\n%s", err, out)
				return
			}
			for _, l := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(l, "stats ") {
					t.Log(l)
				}
			}
		})
	}
	wg.Wait()
	c, err := sqlitec.Open(path, sqlite3.SQLITE_OPEN_READWRITE)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n, err := c.QueryText(`SELECT count(*) FROM posts WHERE body LIKE 'process %'`)
	if want := fmt.Sprint(procs * writes); err != nil || n != want {
		t.Errorf("posts written: %s, %v; want %s", n, err, want)
	}
}

func TestPingAndClose(t *testing.T) {
	s, err := Open(context.Background(), newTestDB(t), Options{ReadConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := s.Ping(context.Background()); err == nil {
		t.Error("Ping after Close: nil error")
	}
	if _, err := s.AppendFeed(nil); err == nil {
		t.Error("AppendFeed after Close: nil error")
	}
	if _, err := s.CreatePost(nil, 1, nil, "x"); err == nil {
		t.Error("CreatePost after Close: nil error")
	}
}

func TestPingWaitsForContext(t *testing.T) {
	s := openTestStore(t, newTestDB(t), Options{ReadConns: 1})
	r, _ := s.getReader() // hold the only read connection
	defer s.putReader(r)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := s.Ping(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Ping with every connection busy = %v; want context.DeadlineExceeded", err)
	}
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	notSQLite := filepath.Join(dir, "not.db")
	if err := os.WriteFile(notSQLite, bytes.Repeat([]byte("not a database "), 300), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	alter := func(name, q string) string {
		path := newTestDB(t)
		c, err := sqlitec.Open(path, sqlite3.SQLITE_OPEN_READWRITE)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Exec(q); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return path
	}
	tests := []struct {
		name, path, want string
	}{
		{"missing file", filepath.Join(dir, "missing.db"), "no such file or directory"},
		{"not SQLite", notSQLite, "file is not a database"},
		{"empty file", empty, "table likes is missing"},
		{"extra index", alter("extra index", `CREATE INDEX extra ON posts(body)`), "unexpected index extra"},
		{"missing index", alter("missing index", `DROP INDEX likes_post_id_idx`), "index likes_post_id_idx is missing"},
		{"changed table", alter("changed table", `ALTER TABLE users ADD COLUMN bio TEXT`), "table users is"},
		{"extra trigger", alter("extra trigger", `CREATE TRIGGER tr AFTER INSERT ON likes BEGIN SELECT 1; END`), "unexpected trigger tr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(context.Background(), tt.path, Options{})
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded; want an error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open error = %q; want it to contain %q", err, tt.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open created the missing file (stat: %v)", err)
	}
}

func TestOpenAcceptsLayoutDifferences(t *testing.T) {
	// The same schema written on one line each, as another tool might store it.
	path := filepath.Join(t.TempDir(), "flat.db")
	c, err := sqlitec.Open(path, sqlite3.SQLITE_OPEN_READWRITE|sqlite3.SQLITE_OPEN_CREATE)
	if err != nil {
		t.Fatal(err)
	}
	var flat []string
	for _, stmt := range strings.Split(schema.SQL, ";") {
		var lines []string
		for _, l := range strings.Split(stmt, "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "--") {
				lines = append(lines, l)
			}
		}
		flat = append(flat, strings.Join(strings.Fields(strings.Join(lines, " ")), " "))
	}
	if err := c.Exec(strings.Join(flat, ";\n")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	openTestStore(t, path, Options{})
}

func TestNormalizeSQL(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"spaces", "CREATE  TABLE t (\n  a INTEGER ,\n  b TEXT\n)", "CREATE TABLE t(a INTEGER,b TEXT)"},
		{"case kept", "DEFAULT (strftime('%Y'))", "DEFAULT(strftime('%Y'))"},
	}
	for _, tt := range tests {
		if got := normalizeSQL(tt.in); got != tt.want {
			t.Errorf("%s: normalizeSQL(%q) = %q; want %q", tt.name, tt.in, got, tt.want)
		}
	}
}

// TestGolden checks the contract's golden bodies on a fresh copy of the seed, then the
// official checks' write sequence (like post 1: 11 → 12; a new post heads the feed).
func TestGolden(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the seed database")
	}
	s := openTestStore(t, seedtest.Path(t), Options{})
	golden := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "golden", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	got, err := s.AppendFeed(nil)
	if want := golden("feed.json"); err != nil || !bytes.Equal(got, want) {
		t.Errorf("AppendFeed = %s, %v\nwant %s", got, err, want)
	}
	for _, id := range []int64{1, 250000, 500000} {
		got, err := s.AppendPost(nil, id)
		if want := golden(fmt.Sprintf("post-%d.json", id)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("AppendPost(%d) = %s, %v\nwant %s", id, got, err, want)
		}
	}
	if _, created, err := s.Like(nil, 1, 1); err != nil || !created {
		t.Fatalf("Like(1, 1) = %v, %v; want created", created, err)
	}
	got, err = s.AppendPost(nil, 1)
	if want := bytes.Replace(golden("post-1.json"), []byte(`"like_count":11`), []byte(`"like_count":12`), 1); err != nil || !bytes.Equal(got, want) {
		t.Errorf("AppendPost(1) after a like = %s, %v\nwant %s", got, err, want)
	}
	post, err := s.CreatePost(nil, 1, []byte("golden_ember_1"), strings.Repeat("b", 500))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(post, []byte(`{"post":{"id":500001,"body":"bbb`)) {
		t.Errorf("CreatePost = %s; want id 500001", post)
	}
	feed, err := s.AppendFeed(nil)
	if err != nil {
		t.Fatal(err)
	}
	// The feed shows users.username of user 1, the token's username only in the 201.
	read, err := s.AppendPost(nil, 500001)
	if err != nil {
		t.Fatal(err)
	}
	head := read[len(`{"post":`) : len(read)-1]
	if !bytes.HasPrefix(feed, append([]byte(`{"posts":[`), head...)) || bytes.Count(feed, []byte(`{"id":`)) != FeedSize {
		t.Errorf("feed after CreatePost = %s\nwant 20 posts starting with %s", feed, head)
	}
	if want := bytes.Replace(post, []byte(`"golden_ember_1"`), []byte(`"`+username(t, s, 1)+`"`), 1); !bytes.Equal(read, want) {
		t.Errorf("AppendPost(500001) = %s\nwant %s", read, want)
	}
}

// username reads users.username of id.
func username(t *testing.T, s *Store, id int64) string {
	r, err := s.getReader()
	if err != nil {
		t.Fatal(err)
	}
	defer s.putReader(r)
	name, err := r.QueryText(fmt.Sprintf("SELECT username FROM users WHERE id = %d", id))
	if err != nil {
		t.Fatal(err)
	}
	return name
}

func TestAllocationBudgets(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	// No checkpointer: ReadMemStats counts every goroutine's allocations.
	s := openTestStore(t, newTestDB(t), Options{ReadConns: 1, CheckpointInterval: -1})
	buf := make([]byte, 0, 64<<10)
	var like int64
	tests := []struct {
		name   string
		budget float64
		f      func()
	}{
		// Measured: 0 for each (SQLite's memory is C memory; dst has room).
		{"AppendPost", 0, func() { s.AppendPost(buf[:0], 3) }},
		{"AppendFeed", 0, func() { s.AppendFeed(buf[:0]) }},
		{"Like", 0, func() { like++; s.Like(buf[:0], 1+like%5, 1+like%30) }},
		{"CreatePost", 0, func() { s.CreatePost(buf[:0], 1, []byte("user_1"), "hello") }},
	}
	for _, tt := range tests {
		if got := testing.AllocsPerRun(200, tt.f); got > tt.budget {
			t.Errorf("%s: %v allocations per call; budget %v", tt.name, got, tt.budget)
		}
	}
}

// Feed variants: the other ways to build GET /feed that were measured (BenchmarkFeed).
// Each one appends the whole body. Store.AppendFeed is variant (c'): two statements in one
// read transaction.
type feedVariant struct {
	name  string
	sql   []string // statements, prepared on the connection in this order
	build func(c *sqlitec.Conn, st []sqlitec.Stmt, dst []byte) ([]byte, error)
}

var feedVariants = []feedVariant{
	{
		// (a) SQLite builds the JSON, as the Node peer does.
		name:  "sqlite-json_group_array",
		sql:   []string{sqlFeedJSON},
		build: buildOneText,
	},
	{
		// (a') SQLite builds the JSON by concatenation, no JSON functions but json_quote.
		name: "sqlite-concat",
		sql: []string{`SELECT '{"posts":[' || coalesce(group_concat(j, ','), '') || ']}' FROM (
SELECT '{"id":' || p.id || ',"body":' || json_quote(p.body) || ',"created_at":' || json_quote(p.created_at) ||
  ',"author":' || json_quote(u.username) || ',"like_count":' ||
  (SELECT count(*) FROM likes l WHERE l.post_id = p.id) || '}' AS j
FROM posts p JOIN users u ON u.id = p.user_id ORDER BY p.created_at DESC, p.id DESC LIMIT 20)`},
		build: buildOneText,
	},
	{
		// (b) 20 rows with a correlated count, appended in Go.
		name:  "go-correlated-count",
		sql:   []string{sqlFeedCorrelated},
		build: buildRows,
	},
	{
		// (c) one statement: the 20 newest, then one range scan of likes_post_id_idx
		// between their smallest and largest id, grouped, joined back.
		name: "go-cte-between",
		sql: []string{`WITH top AS MATERIALIZED (
  SELECT id, body, created_at, user_id FROM posts ORDER BY created_at DESC, id DESC LIMIT 20),
n AS (SELECT post_id, count(*) AS n FROM likes
  WHERE post_id BETWEEN (SELECT min(id) FROM top) AND (SELECT max(id) FROM top) GROUP BY post_id)
SELECT t.id, t.body, t.created_at, u.username, coalesce(n.n, 0)
FROM top t JOIN users u ON u.id = t.user_id LEFT JOIN n ON n.post_id = t.id
ORDER BY t.created_at DESC, t.id DESC`},
		build: buildRows,
	},
}

// appendPost appends one whole post object.
func appendPost(dst []byte, id int64, body, createdAt, author []byte, likes int64) []byte {
	dst = appendPostHead(dst, id, body, createdAt, author)
	dst = strconv.AppendInt(dst, likes, 10)
	return append(dst, '}')
}

// sqlFeedCorrelated reads the newest posts with a correlated count per row.
const sqlFeedCorrelated = `SELECT p.id, p.body, p.created_at, u.username,
  (SELECT count(*) FROM likes l WHERE l.post_id = p.id)
FROM posts p JOIN users u ON u.id = p.user_id
ORDER BY p.created_at DESC, p.id DESC LIMIT 20`

func buildOneText(c *sqlitec.Conn, st []sqlitec.Stmt, dst []byte) ([]byte, error) {
	defer c.Reset(st[0])
	if rc := c.Step(st[0]); rc != sqlite3.SQLITE_ROW {
		return dst, c.ErrorFor(rc)
	}
	return append(dst, c.ColumnText(st[0], 0)...), nil
}

func buildRows(c *sqlitec.Conn, st []sqlitec.Stmt, dst []byte) ([]byte, error) {
	defer c.Reset(st[0])
	dst = append(dst, `{"posts":[`...)
	rc := c.Step(st[0])
	for ; rc == sqlite3.SQLITE_ROW; rc = c.Step(st[0]) {
		if dst[len(dst)-1] == '}' {
			dst = append(dst, ',')
		}
		dst = appendPost(dst, c.ColumnInt64(st[0], 0), c.ColumnText(st[0], 1), c.ColumnText(st[0], 2),
			c.ColumnText(st[0], 3), c.ColumnInt64(st[0], 4))
	}
	if rc != sqlite3.SQLITE_DONE {
		return dst, c.ErrorFor(rc)
	}
	return append(dst, ']', '}'), nil
}

// prepareVariant opens a connection to path with the Store's settings and prepares v.
func prepareVariant(tb testing.TB, path string, v feedVariant) (*sqlitec.Conn, []sqlitec.Stmt) {
	tb.Helper()
	s := &Store{log: zap.NewNop(), busyTimeout: time.Second}
	opts := Options{}
	opts.setDefaults()
	c, err := s.openConn(path, opts, true)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	var sts []sqlitec.Stmt
	for _, q := range v.sql {
		st, err := c.Prepare(q)
		if err != nil {
			tb.Fatalf("%s: %v", v.name, err)
		}
		sts = append(sts, st)
	}
	return c, sts
}

func TestFeedVariantsAgree(t *testing.T) {
	path := newTestDB(t)
	s := openTestStore(t, path, Options{})
	want, err := s.AppendFeed(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range feedVariants {
		c, st := prepareVariant(t, path, v)
		got, err := v.build(c, st, nil)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s = %s, %v\nwant (AppendFeed) %s", v.name, got, err, want)
		}
	}
}

// benchSeed is a private copy of the seed for benchmarks (built once per machine).
func benchSeed(b *testing.B) string {
	b.Helper()
	return seedtest.Path(b)
}

// BenchmarkFeed measures the feed variants on the seed, each after checking that its bytes
// equal the golden feed.
func BenchmarkFeed(b *testing.B) {
	path := benchSeed(b)
	want, err := os.ReadFile(filepath.Join("..", "..", "testdata", "golden", "feed.json"))
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range feedVariants {
		b.Run(v.name, func(b *testing.B) {
			c, st := prepareVariant(b, path, v)
			got, err := v.build(c, st, nil)
			if err != nil || !bytes.Equal(got, want) {
				b.Fatalf("%s = %s, %v; want the golden feed", v.name, got, err)
			}
			buf := make([]byte, 0, 16<<10)
			b.ReportAllocs()
			for b.Loop() {
				if buf, err = v.build(c, st, buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, o := range []struct {
		name string
		opts Options
	}{
		{"Store.AppendFeed", Options{ReadConns: 1}},
		{"Store.AppendFeed/no-mmap", Options{ReadConns: 1, MmapSize: -1}},
	} {
		b.Run(o.name, func(b *testing.B) {
			s := openTestStore(b, path, o.opts)
			buf := make([]byte, 0, 16<<10)
			b.ReportAllocs()
			for b.Loop() {
				if buf, err = s.AppendFeed(buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// postIDs is a fixed pseudo-random sequence of seed post ids (the load test reads random
// posts); a linear congruential step keeps it allocation-free and the same in every run.
func postID(i int) int64 { return 1 + int64(uint64(i)*2654435761%500000) }

func BenchmarkPost(b *testing.B) {
	path := benchSeed(b)
	for _, o := range []struct {
		name string
		opts Options
	}{
		{"Store.AppendPost", Options{ReadConns: 1}},
		{"Store.AppendPost/no-mmap", Options{ReadConns: 1, MmapSize: -1}},
	} {
		b.Run(o.name, func(b *testing.B) {
			s := openTestStore(b, path, o.opts)
			buf := make([]byte, 0, 4096)
			var err error
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if buf, err = s.AppendPost(buf[:0], postID(i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("sqlite-json_object", func(b *testing.B) {
		c, st := prepareVariant(b, path, feedVariant{name: "post-json", sql: []string{sqlPostJSON}})
		buf := make([]byte, 0, 4096)
		var err error
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			c.BindInt64(st[0], 1, postID(i))
			if buf, err = buildOneText(c, st, buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkLike(b *testing.B) {
	s := openTestStore(b, benchSeed(b), Options{ReadConns: 1})
	buf := make([]byte, 0, 256)
	var err error
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		// New (user, post) pairs: most are first likes, a few repeat seed likes.
		if buf, _, err = s.Like(buf[:0], 1+int64(i%50000), postID(i)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCreatePost(b *testing.B) {
	s := openTestStore(b, benchSeed(b), Options{ReadConns: 1})
	buf := make([]byte, 0, 1024)
	var err error
	body := "Hot take: the cheapest server is the one you measured."
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if buf, err = s.CreatePost(buf[:0], 1+int64(i%50000), []byte("golden_ember_1"), body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDatabaseSQL is the same work through database/sql and the "sqlite" driver
// (prepared statements, one connection), the route the Store does not take.
func BenchmarkDatabaseSQL(b *testing.B) {
	path := benchSeed(b)
	db, err := sql.Open("sqlite", "file:"+path+"?mode=rw&_pragma=foreign_keys(1)&_pragma=synchronous(1)"+
		"&_pragma=mmap_size(268435456)&_pragma=cache_size(-16384)")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	prepare := func(q string) *sql.Stmt {
		st, err := db.Prepare(q)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		return st
	}
	b.Run("post-sqlite-json_object", func(b *testing.B) {
		st := prepare(sqlPostJSON)
		var out []byte
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			if err := st.QueryRow(postID(i)).Scan(&out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("post-rows", func(b *testing.B) {
		st := prepare(sqlPost)
		buf := make([]byte, 0, 4096)
		var body, createdAt, author []byte
		var likes int64
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			id := postID(i)
			if err := st.QueryRow(id).Scan(&body, &createdAt, &author, &likes); err != nil {
				b.Fatal(err)
			}
			buf = appendPost(append(buf[:0], `{"post":`...), id, body, createdAt, author, likes)
		}
	})
	b.Run("feed-sqlite-json_group_array", func(b *testing.B) {
		st := prepare(sqlFeedJSON)
		var out []byte
		b.ReportAllocs()
		for b.Loop() {
			if err := st.QueryRow().Scan(&out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("feed-rows", func(b *testing.B) {
		st := prepare(sqlFeedCorrelated)
		buf := make([]byte, 0, 16<<10)
		var id, likes int64
		var body, createdAt, author sql.RawBytes
		b.ReportAllocs()
		for b.Loop() {
			rows, err := st.Query()
			if err != nil {
				b.Fatal(err)
			}
			buf = append(buf[:0], `{"posts":[`...)
			for rows.Next() {
				if err := rows.Scan(&id, &body, &createdAt, &author, &likes); err != nil {
					b.Fatal(err)
				}
				if buf[len(buf)-1] == '}' {
					buf = append(buf, ',')
				}
				buf = appendPost(buf, id, body, createdAt, author, likes)
			}
			buf = append(buf, ']', '}')
			if err := rows.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestWritePathCounters: two Stores on one file elect a write owner, as two workers do;
// the follower's writes count as forwarded there and as committed at the owner, which
// counts every write's queue wait (package writepath, the ceiling's writes verdict).
func TestWritePathCounters(t *testing.T) {
	path := newTestDB(t)
	a := openTestStore(t, path, Options{ReadConns: 1, CheckpointInterval: 5 * time.Millisecond})
	b := openTestStore(t, path, Options{ReadConns: 1, CheckpointInterval: 5 * time.Millisecond})
	const writes = 20
	for i := range writes {
		for _, s := range []*Store{a, b} {
			if _, _, err := s.Like(nil, int64(1+i%5), int64(1+i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(20 * time.Millisecond) // a checkpoint or two
	own, fol := a, b
	if b.WriteRole() == "owner" {
		own, fol = b, a
	}
	if own.WriteRole() != "owner" || fol.WriteRole() != "follower" {
		t.Fatalf("roles %s and %s, want an owner and a follower", a.WriteRole(), b.WriteRole())
	}
	o, f := own.WritePath(), fol.WritePath()
	if o.Writes != writes || o.Forwards != 0 || f.Writes != writes || f.Forwards != writes {
		t.Errorf("owner %d writes (%d forwarded), follower %d (%d forwarded); want %d each, the follower's all forwarded",
			o.Writes, o.Forwards, f.Writes, f.Forwards, writes)
	}
	if o.Committed != 2*writes || o.Commits == 0 || f.Commits != 0 || o.LargestBatch < 1 {
		t.Errorf("owner committed %d writes in %d commits (largest %d), follower %d commits; want all %d at the owner",
			o.Committed, o.Commits, o.LargestBatch, f.Commits, 2*writes)
	}
	if o.QueueNs == 0 || o.CommitNs == 0 || f.ForwardNs < uint64(f.Forwards) || len(o.QueueHist) == 0 || len(f.WriteHist) == 0 {
		t.Errorf("times: owner queue %d ns, commit %d ns, follower forward %d ns; want all counted", o.QueueNs, o.CommitNs, f.ForwardNs)
	}
	if o.Checkpoints+f.Checkpoints == 0 {
		t.Errorf("no checkpoint counted")
	}
}

// TestOwnerProcs: the write owner runs with Options.OwnerProcs Ps.
func TestOwnerProcs(t *testing.T) {
	cur := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(cur) })
	s := openTestStore(t, newTestDB(t), Options{ReadConns: 1, OwnerProcs: cur + 1})
	if s.WriteRole() != "owner" {
		t.Fatalf("role %s, want owner", s.WriteRole())
	}
	if got := runtime.GOMAXPROCS(0); got != cur+1 {
		t.Errorf("GOMAXPROCS %d while owning, want %d", got, cur+1)
	}
	s.ownerProcs(false) // what losing the role does
	if got := runtime.GOMAXPROCS(0); got != cur {
		t.Errorf("GOMAXPROCS %d after owning, want %d back", got, cur)
	}
}

// TestSynchronousApplied reads PRAGMA synchronous back on the Store's write connection and
// on every read connection, for each setting: the durability the docs promise is the one the
// connections run with. An unknown setting is refused by Open.
func TestSynchronousApplied(t *testing.T) {
	tests := []struct {
		name, setting string
		want          string // PRAGMA synchronous: 1 NORMAL, 2 FULL
	}{
		{"default is normal", "", "1"},
		{"normal", SyncNormal, "1"},
		{"full", SyncFull, "2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := newTestDB(t)
			s := openTestStore(t, path, Options{Synchronous: tc.setting, ReadConns: 2, CheckpointInterval: -1})
			s.wmu.Lock() // the write connection's owner, as the batcher takes it
			got, err := s.writer.QueryText("PRAGMA synchronous")
			s.wmu.Unlock()
			if err != nil || got != tc.want {
				t.Errorf("write connection: synchronous = %q, %v; want %s", got, err, tc.want)
			}
			// All read connections at once: one at a time from the pool could meet one twice.
			if _, err := s.withAllReaders(func(rs []*reader) error {
				for i, r := range rs {
					got, err := r.QueryText("PRAGMA synchronous")
					if err != nil || got != tc.want {
						t.Errorf("read connection %d: synchronous = %q, %v; want %s", i, got, err, tc.want)
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("unknown setting refused", func(t *testing.T) {
		_, err := Open(context.Background(), newTestDB(t), Options{Synchronous: "extra"})
		if err == nil || !strings.Contains(err.Error(), `synchronous "extra"`) {
			t.Fatalf("Open with synchronous extra: %v; want an error naming it", err)
		}
	})
}
