// Package sqlitec is a thin connection over SQLite's C API, as modernc.org/sqlite/lib
// exposes it (the same SQLite the "sqlite" database/sql driver runs), without
// database/sql: for hot paths that must not allocate. Binding an integer, stepping a
// statement and reading its columns cost no Go allocation, and ColumnText returns text in
// SQLite's own memory, so a caller can escape it straight into a response buffer.
//
// A Conn is one connection, used by one goroutine at a time (it is opened with
// SQLITE_OPEN_NOMUTEX). Statements are prepared once, for repeated use, and stay valid
// until Close, which finalizes them all.
//
// Non-goals: connection pools, transactions, retries on SQLITE_BUSY, type conversions,
// anything database/sql offers. Callers configure connections with Exec (PRAGMA ...) and
// compare result codes with the constants of modernc.org/sqlite/lib themselves.
package sqlitec

import (
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// Conn is one SQLite connection. It is not safe for concurrent use.
type Conn struct {
	tls     *libc.TLS
	db      uintptr
	text    uintptr // C memory that BindText and BindTextStatic copy text parameters into
	textCap int
}

// Stmt is a prepared statement of a Conn (a sqlite3_stmt pointer).
type Stmt uintptr

// Error is a failed SQLite call: its extended result code and SQLite's message.
type Error struct {
	// Code is the extended result code (SQLITE_BUSY_SNAPSHOT, SQLITE_CONSTRAINT_FOREIGNKEY,
	// ...); Code&0xff is the primary one.
	Code int32
	Msg  string
}

func (e *Error) Error() string {
	return "sqlite: " + e.Msg + " (" + strconv.Itoa(int(e.Code)) + ")"
}

// Open opens a connection to path with flags (SQLITE_OPEN_READONLY, _READWRITE, _CREATE,
// ...); it creates no file unless flags include SQLITE_OPEN_CREATE. It adds
// SQLITE_OPEN_NOMUTEX (a Conn is used by one goroutine at a time, so SQLite's connection
// mutex would only cost time) and SQLITE_OPEN_EXRESCODE: Step and the errors return
// extended result codes.
func Open(path string, flags int32) (*Conn, error) {
	c := &Conn{tls: libc.NewTLS()}
	cpath, err := libc.CString(path)
	if err != nil {
		c.tls.Close()
		return nil, err
	}
	defer libc.Xfree(c.tls, cpath)
	pdb := c.tls.Alloc(int(unsafe.Sizeof(uintptr(0))))
	defer c.tls.Free(int(unsafe.Sizeof(uintptr(0))))
	rc := sqlite3.Xsqlite3_open_v2(c.tls, cpath, pdb,
		flags|sqlite3.SQLITE_OPEN_NOMUTEX|sqlite3.SQLITE_OPEN_EXRESCODE, 0)
	c.db = *(*uintptr)(cptr(pdb))
	if rc != sqlite3.SQLITE_OK {
		err := c.ErrorFor(rc)
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close finalizes every statement of c and closes it.
func (c *Conn) Close() error {
	var err error
	if c.db != 0 {
		// close_v2 finalizes nothing itself; finalize every statement first so the
		// connection really closes.
		for st := sqlite3.Xsqlite3_next_stmt(c.tls, c.db, 0); st != 0; st = sqlite3.Xsqlite3_next_stmt(c.tls, c.db, 0) {
			sqlite3.Xsqlite3_finalize(c.tls, st)
		}
		if rc := sqlite3.Xsqlite3_close_v2(c.tls, c.db); rc != sqlite3.SQLITE_OK {
			err = c.ErrorFor(rc)
		}
		c.db = 0
	}
	if c.text != 0 {
		libc.Xfree(c.tls, c.text)
		c.text = 0
	}
	c.tls.Close()
	return err
}

// Exec runs the statements in q, which return no rows.
func (c *Conn) Exec(q string) error {
	cq, err := libc.CString(q)
	if err != nil {
		return err
	}
	defer libc.Xfree(c.tls, cq)
	if rc := sqlite3.Xsqlite3_exec(c.tls, c.db, cq, 0, 0, 0); rc != sqlite3.SQLITE_OK {
		return c.ErrorFor(rc)
	}
	return nil
}

// Prepare compiles the single statement q for repeated use (SQLITE_PREPARE_PERSISTENT).
func (c *Conn) Prepare(q string) (Stmt, error) {
	cq, err := libc.CString(q)
	if err != nil {
		return 0, err
	}
	defer libc.Xfree(c.tls, cq)
	pst := c.tls.Alloc(int(unsafe.Sizeof(uintptr(0))))
	defer c.tls.Free(int(unsafe.Sizeof(uintptr(0))))
	rc := sqlite3.Xsqlite3_prepare_v3(c.tls, c.db, cq, -1, sqlite3.SQLITE_PREPARE_PERSISTENT, pst, 0)
	if rc != sqlite3.SQLITE_OK {
		return 0, fmt.Errorf("prepare %q: %w", q, c.ErrorFor(rc))
	}
	return Stmt(*(*uintptr)(cptr(pst))), nil
}

// Finalize frees st before Close, which would free it anyway.
func (c *Conn) Finalize(st Stmt) { sqlite3.Xsqlite3_finalize(c.tls, uintptr(st)) }

// QueryText runs q and returns the first column of its first row as text; "" when q
// returns no row.
func (c *Conn) QueryText(q string) (string, error) {
	st, err := c.Prepare(q)
	if err != nil {
		return "", err
	}
	defer c.Finalize(st)
	switch rc := c.Step(st); rc {
	case sqlite3.SQLITE_ROW:
		return string(c.ColumnText(st, 0)), nil
	case sqlite3.SQLITE_DONE:
		return "", nil
	default:
		return "", c.ErrorFor(rc)
	}
}

// Step runs st to its next row (SQLITE_ROW), to its end (SQLITE_DONE), or to a failure,
// and returns that result code; ErrorFor turns a failure into an error.
func (c *Conn) Step(st Stmt) int32 { return sqlite3.Xsqlite3_step(c.tls, uintptr(st)) }

// Reset makes st ready to run again; its parameters keep their values.
func (c *Conn) Reset(st Stmt) { sqlite3.Xsqlite3_reset(c.tls, uintptr(st)) }

// BindInt64 binds v to parameter i (from 1) of st.
func (c *Conn) BindInt64(st Stmt, i int32, v int64) {
	sqlite3.Xsqlite3_bind_int64(c.tls, uintptr(st), i, v)
}

// BindText binds v to parameter i (from 1) of st. SQLite copies it (SQLITE_TRANSIENT), so
// the binding stays valid whatever is bound next: several text parameters are fine.
func (c *Conn) BindText(st Stmt, i int32, v string) {
	sqlite3.Xsqlite3_bind_text(c.tls, uintptr(st), i, c.textC(v), int32(len(v)), sqlite3.SQLITE_TRANSIENT)
}

// BindTextStatic binds v to parameter i (from 1) of st without SQLite's copy
// (SQLITE_STATIC): SQLite reads the connection's text buffer in place, so the binding is
// valid only until the next BindText or BindTextStatic on c. For one text parameter on a
// hot path.
func (c *Conn) BindTextStatic(st Stmt, i int32, v string) {
	sqlite3.Xsqlite3_bind_text(c.tls, uintptr(st), i, c.textC(v), int32(len(v)), sqlite3.SQLITE_STATIC)
}

// textC copies v into the connection's C text buffer, growing it as needed, and returns
// the buffer's address.
func (c *Conn) textC(v string) uintptr {
	if len(v) >= c.textCap {
		n := max(2*c.textCap, len(v)+1, 4096)
		p := libc.Xrealloc(c.tls, c.text, libc.Tsize_t(n))
		if p == 0 {
			panic("sqlitec: out of C memory") // as SQLite's own allocations would fail
		}
		c.text, c.textCap = p, n
	}
	copy(unsafe.Slice((*byte)(cptr(c.text)), len(v)), v)
	return c.text
}

// ColumnInt64 returns column i (from 0) of st's current row as an integer.
func (c *Conn) ColumnInt64(st Stmt, i int32) int64 {
	return sqlite3.Xsqlite3_column_int64(c.tls, uintptr(st), i)
}

// ColumnText returns column i (from 0) of st's current row as text in SQLite's memory:
// valid until the next Step or Reset of st. NULL and "" are nil.
func (c *Conn) ColumnText(st Stmt, i int32) []byte {
	p := sqlite3.Xsqlite3_column_text(c.tls, uintptr(st), i)
	n := sqlite3.Xsqlite3_column_bytes(c.tls, uintptr(st), i)
	if p == 0 || n <= 0 {
		return nil
	}
	return unsafe.Slice((*byte)(cptr(p)), n)
}

// Changes returns how many rows the last INSERT, UPDATE or DELETE on c changed.
func (c *Conn) Changes() int32 { return sqlite3.Xsqlite3_changes(c.tls, c.db) }

// Autocommit reports whether c is outside a transaction (sqlite3_get_autocommit). After a
// failed statement inside BEGIN ... COMMIT it tells whether SQLite rolled the whole
// transaction back itself (as it may on SQLITE_FULL, IOERR or NOMEM) or only the statement.
func (c *Conn) Autocommit() bool { return sqlite3.Xsqlite3_get_autocommit(c.tls, c.db) != 0 }

// SetBusyTimeout sets SQLite's own busy handler: a call that meets a lock sleeps and
// retries for up to d (rounded down to milliseconds) before it fails with SQLITE_BUSY.
// 0 (SQLite's default) removes the handler: such a call fails at once.
func (c *Conn) SetBusyTimeout(d time.Duration) {
	sqlite3.Xsqlite3_busy_timeout(c.tls, c.db, int32(d/time.Millisecond))
}

// Checkpoint runs a WAL checkpoint of the main database in mode
// (SQLITE_CHECKPOINT_PASSIVE, _FULL, _RESTART or _TRUNCATE) and returns the WAL's size in
// frames and how many of them are now in the database.
func (c *Conn) Checkpoint(mode int32) (nLog, nCkpt int, err error) {
	p := c.tls.Alloc(8)
	defer c.tls.Free(8)
	rc := sqlite3.Xsqlite3_wal_checkpoint_v2(c.tls, c.db, 0, mode, p, p+4)
	if rc != sqlite3.SQLITE_OK {
		return 0, 0, c.ErrorFor(rc)
	}
	return int(*(*int32)(cptr(p))), int(*(*int32)(cptr(p + 4))), nil
}

// HasMoved reports whether the path c was opened with no longer names the file c has open
// (deleted, renamed or replaced): SQLITE_FCNTL_HAS_MOVED, one stat of the path. Costs no
// Go allocation.
func (c *Conn) HasMoved() (bool, error) {
	p := c.tls.Alloc(4)
	defer c.tls.Free(4)
	*(*int32)(cptr(p)) = 0
	// A nil database name is "main".
	if rc := sqlite3.Xsqlite3_file_control(c.tls, c.db, 0, sqlite3.SQLITE_FCNTL_HAS_MOVED, p); rc != sqlite3.SQLITE_OK {
		return false, c.ErrorFor(rc)
	}
	return *(*int32)(cptr(p)) != 0, nil
}

// ErrorFor returns the *Error for the result code rc of c's last call, with SQLite's
// message for it. Call it right after the call that failed: the next call on c (Reset
// included) replaces the message.
func (c *Conn) ErrorFor(rc int32) error {
	msg := libc.GoString(sqlite3.Xsqlite3_errstr(c.tls, rc))
	if c.db != 0 {
		if m := libc.GoString(sqlite3.Xsqlite3_errmsg(c.tls, c.db)); m != "" && m != "not an error" {
			msg = m
		}
	}
	return &Error{Code: rc, Msg: msg}
}

// cptr turns an address in C memory (allocated by modernc.org/libc, outside the Go heap)
// into a pointer; written this way so that vet's unsafeptr check, meant for Go memory,
// stays quiet.
func cptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }
