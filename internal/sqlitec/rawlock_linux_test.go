package sqlitec

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	sqlite3 "modernc.org/sqlite/lib"
)

const lockHelperEnv = "SQLITEC_LOCK_HELPER"

func TestMain(m *testing.M) {
	if path := os.Getenv(lockHelperEnv); path != "" {
		os.Exit(holdWriteLock(path))
	}
	os.Exit(m.Run())
}

// holdWriteLock is the helper process: it takes SQLite's write lock on path, says so on
// stdout and holds it until its stdin closes.
func holdWriteLock(path string) int {
	c, err := Open(path, sqlite3.SQLITE_OPEN_READWRITE)
	if err != nil {
		return 2
	}
	defer c.Close()
	if err := c.Exec("PRAGMA busy_timeout=0; BEGIN IMMEDIATE; INSERT INTO t VALUES (2)"); err != nil {
		return 3
	}
	os.Stdout.WriteString("locked\n")
	bufio.NewReader(os.Stdin).ReadString('\n')
	if err := c.Exec("COMMIT"); err != nil {
		return 4
	}
	return 0
}

// TestLocksAcrossProcesses: with fcntl's lock commands replaced by raw system calls,
// SQLite's locks still exclude another process: while a helper process holds the write
// lock of a WAL file, this one's writer is refused (SQLITE_BUSY) and its readers still read
// the last commit; once the helper commits, both see its row.
func TestLocksAcrossProcesses(t *testing.T) {
	if libcFcntl == 0 {
		t.Fatal("fcntl was not replaced in the unix VFS")
	}
	path := filepath.Join(t.TempDir(), "lock.db")
	c := openTest(t, path, sqlite3.SQLITE_OPEN_READWRITE|sqlite3.SQLITE_OPEN_CREATE)
	if err := c.Exec("PRAGMA journal_mode=WAL; PRAGMA busy_timeout=0; CREATE TABLE t(x); INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), lockHelperEnv+"="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // on an early failure: every started process is waited for
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "locked\n" {
		t.Fatalf("helper: %q, %v", line, err)
	}

	err = c.Exec("BEGIN IMMEDIATE")
	var se *Error
	if !errors.As(err, &se) || se.Code&0xff != sqlite3.SQLITE_BUSY {
		t.Fatalf("BEGIN IMMEDIATE while another process writes: %v; want SQLITE_BUSY", err)
	}
	if n, err := c.QueryText("SELECT count(*) FROM t"); err != nil || n != "1" {
		t.Fatalf("read during the other's write: %q, %v; want 1", n, err)
	}

	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	if n, err := c.QueryText("SELECT count(*) FROM t"); err != nil || n != "2" {
		t.Fatalf("after the other's commit: %q, %v; want 2", n, err)
	}
	if err := c.Exec("BEGIN IMMEDIATE; INSERT INTO t VALUES (3); COMMIT"); err != nil {
		t.Fatalf("write after the other's commit: %v", err)
	}
}
