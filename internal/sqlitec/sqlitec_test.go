package sqlitec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sqlite3 "modernc.org/sqlite/lib"
)

const memFlags = sqlite3.SQLITE_OPEN_READWRITE | sqlite3.SQLITE_OPEN_CREATE | sqlite3.SQLITE_OPEN_MEMORY

func openTest(t testing.TB, path string, flags int32) *Conn {
	t.Helper()
	c, err := Open(path, flags)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func mustPrepare(t testing.TB, c *Conn, q string) Stmt {
	t.Helper()
	st, err := c.Prepare(q)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestBindText: BindText survives later bindings (SQLite copied it); BindTextStatic reads
// the connection's buffer in place, so it is good for one text parameter at a time.
func TestBindText(t *testing.T) {
	c := openTest(t, ":memory:", memFlags)
	long := strings.Repeat("x", 10000) // grows the buffer past its first 4 KB
	tests := []struct {
		name   string
		bind   func(st Stmt)
		params string
		want   string
	}{
		{"transient, two parameters", func(st Stmt) { c.BindText(st, 1, "a"); c.BindText(st, 2, "bc") }, "?1 || '|' || ?2", "a|bc"},
		{"static, one parameter", func(st Stmt) { c.BindTextStatic(st, 1, "hello") }, "?1", "hello"},
		{"static, after growing", func(st Stmt) { c.BindTextStatic(st, 1, long) }, "?1", long},
		{"empty", func(st Stmt) { c.BindText(st, 1, "") }, "?1", ""},
		{"integer", func(st Stmt) { c.BindInt64(st, 1, -42) }, "?1", "-42"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := mustPrepare(t, c, "SELECT "+tt.params)
			defer c.Finalize(st)
			tt.bind(st)
			if rc := c.Step(st); rc != sqlite3.SQLITE_ROW {
				t.Fatal(c.ErrorFor(rc))
			}
			if got := string(c.ColumnText(st, 0)); got != tt.want {
				t.Errorf("got %.40q, want %.40q", got, tt.want)
			}
		})
	}
}

func TestQueryAndChanges(t *testing.T) {
	c := openTest(t, ":memory:", memFlags)
	if err := c.Exec(`CREATE TABLE t(x INTEGER); INSERT INTO t VALUES(1),(2),(3);`); err != nil {
		t.Fatal(err)
	}
	if got := c.Changes(); got != 3 {
		t.Errorf("Changes() = %d, want 3", got)
	}
	st := mustPrepare(t, c, `SELECT x FROM t ORDER BY x`)
	var got []int64
	rc := c.Step(st)
	for ; rc == sqlite3.SQLITE_ROW; rc = c.Step(st) {
		got = append(got, c.ColumnInt64(st, 0))
	}
	if rc != sqlite3.SQLITE_DONE || len(got) != 3 || got[2] != 3 {
		t.Errorf("rows %v, rc %d; want [1 2 3], SQLITE_DONE", got, rc)
	}
	c.Reset(st)
	if rc := c.Step(st); rc != sqlite3.SQLITE_ROW || c.ColumnInt64(st, 0) != 1 {
		t.Errorf("after Reset: rc %d, x %d; want the first row again", rc, c.ColumnInt64(st, 0))
	}
	for q, want := range map[string]string{`SELECT sum(x) FROM t`: "6", `SELECT x FROM t WHERE x > 9`: ""} {
		if got, err := c.QueryText(q); err != nil || got != want {
			t.Errorf("QueryText(%q) = %q, %v; want %q", q, got, err, want)
		}
	}
}

func TestErrors(t *testing.T) {
	c := openTest(t, ":memory:", memFlags)
	if err := c.Exec(`PRAGMA foreign_keys=ON; CREATE TABLE p(id INTEGER PRIMARY KEY);
CREATE TABLE ch(p INTEGER REFERENCES p(id));`); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		err      func() error
		wantCode int32 // 0: any *Error
		wantText string
	}{
		{"extended code", func() error { return c.Exec(`INSERT INTO ch VALUES(7)`) },
			sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY, "FOREIGN KEY constraint failed"},
		{"prepare", func() error { _, err := c.Prepare(`SELEKT 1`); return err }, 0, `prepare "SELEKT 1"`},
		{"missing file", func() error {
			_, err := Open(filepath.Join(t.TempDir(), "none.db"), sqlite3.SQLITE_OPEN_READWRITE)
			return err
		}, sqlite3.SQLITE_CANTOPEN, "unable to open"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.err()
			var se *Error
			if !errors.As(err, &se) || (tt.wantCode != 0 && se.Code != tt.wantCode) || !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("got %v, want an *Error with code %d mentioning %q", err, tt.wantCode, tt.wantText)
			}
		})
	}
}

func TestCheckpoint(t *testing.T) {
	c := openTest(t, filepath.Join(t.TempDir(), "wal.db"), sqlite3.SQLITE_OPEN_READWRITE|sqlite3.SQLITE_OPEN_CREATE)
	if mode, err := c.QueryText(`PRAGMA journal_mode=WAL`); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v", mode, err)
	}
	if err := c.Exec(`PRAGMA wal_autocheckpoint=0; CREATE TABLE t(x); INSERT INTO t VALUES(randomblob(10000));`); err != nil {
		t.Fatal(err)
	}
	c.SetBusyTimeout(0)
	nLog, nCkpt, err := c.Checkpoint(sqlite3.SQLITE_CHECKPOINT_PASSIVE)
	if err != nil || nLog == 0 || nCkpt != nLog {
		t.Errorf("Checkpoint = %d, %d, %v; want every frame (>0) copied", nLog, nCkpt, err)
	}
}

func TestHasMoved(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	c := openTest(t, path, sqlite3.SQLITE_OPEN_READWRITE|sqlite3.SQLITE_OPEN_CREATE)
	if err := c.Exec(`CREATE TABLE t(x)`); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		do   func() error
		want bool
	}{
		{"in place", func() error { return nil }, false},
		{"renamed", func() error { return os.Rename(path, path+".moved") }, true},
		{"back", func() error { return os.Rename(path+".moved", path) }, false},
		{"deleted", func() error { return os.Remove(path) }, true},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatal(err)
		}
		if got, err := c.HasMoved(); err != nil || got != s.want {
			t.Errorf("%s: HasMoved() = %v, %v; want %v", s.name, got, err, s.want)
		}
	}
}

// TestAllocs: the hot-path calls cost no Go allocation.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	c := openTest(t, filepath.Join(t.TempDir(), "db"), sqlite3.SQLITE_OPEN_READWRITE|sqlite3.SQLITE_OPEN_CREATE)
	st := mustPrepare(t, c, `SELECT ?1, ?2 || 'x'`)
	var sink int
	f := func() {
		c.BindInt64(st, 1, 5)
		c.BindTextStatic(st, 2, "text")
		if c.Step(st) == sqlite3.SQLITE_ROW {
			sink += int(c.ColumnInt64(st, 0)) + len(c.ColumnText(st, 1))
		}
		c.Reset(st)
		if moved, err := c.HasMoved(); moved || err != nil {
			t.Fatalf("HasMoved() = %v, %v", moved, err)
		}
	}
	if got := testing.AllocsPerRun(100, f); got != 0 {
		t.Errorf("%v allocations per bind, step, column and reset; want 0", got)
	}
}
