// Package applog is the supervisor's log plumbing, PM2's way: the apps' output as lines of
// their own (`ID|APP | line`, print.go), the ring of the last lines `supervisor logs`
// reads (ring.go), and the log files with their rotation and the per-worker files of
// -log-dir (file.go). Both the daemon (which writes) and the CLI (which prints what GET
// /logs streams) use it.
package applog

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/onehost/onehost/internal/safepath"
	"go.uber.org/zap"
)

// File is a log file (the merged log, or one slot's), rotated when it outgrows its
// Rotation's size (PATH.1 the newest of the old ones, up to PATH.KEEP), and reopened on
// USR1 so that logrotate can move it away instead: after the rename, writes go on to the
// old inode until the reopen creates a fresh file at the path.
type File struct {
	path string
	rot  Rotation
	mu   sync.Mutex
	f    *os.File
	size int64
}

// Rotation is when and how far a log file rotates: past MaxSize bytes (0: never), keeping
// Keep old files. pm2-logrotate's defaults are 10 MB and 30: disks filled by logs are among
// PM2 users' most filed complaints.
type Rotation struct {
	MaxSize int64
	Keep    int
}

// FileMode is a new log file's mode: the supervisor's user's alone. The workers' lines
// are the application's output (request paths, errors with their data), and the log's
// group is whatever the directory's is; whoever should read them gets them through
// `supervisor logs` (same user), the journal, or a mode the administrator chose for a file
// made beforehand (an existing file keeps its own).
const FileMode = 0o600

func OpenFile(path string, rot Rotation) (*File, error) {
	// Opened again by path on USR1 and at Rotation: a directory others could change would
	// let them swap the file for a link to another the supervisor's user may write.
	if err := safepath.CheckDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("log file %s: %w", path, err)
	}
	l := &File{path: path, rot: rot}
	if err := l.Reopen(); err != nil {
		return nil, err
	}
	return l, nil
}

// Write appends p; zap writes one whole entry per call, so an entry is never split across
// two files.
func (l *File) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rot.MaxSize > 0 && l.size > 0 && l.size+int64(len(p)) > l.rot.MaxSize {
		if err := l.rotate(); err != nil {
			// Keep logging into the file we have: a full log beats a lost one.
			fmt.Fprintln(os.Stderr, "supervisor: rotate log:", err)
			l.rot.MaxSize = 0
		}
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	return n, err
}

// rotate shifts PATH.i to PATH.i+1 (dropping what would pass Keep), PATH to PATH.1, and
// starts a fresh PATH (mu held).
func (l *File) rotate() error {
	if l.rot.Keep <= 0 {
		if err := l.f.Truncate(0); err != nil {
			return err
		}
		_, err := l.f.Seek(0, io.SeekStart)
		l.size = 0
		return err
	}
	os.Remove(l.path + "." + strconv.Itoa(l.rot.Keep))
	for i := l.rot.Keep - 1; i >= 1; i-- {
		old := l.path + "." + strconv.Itoa(i)
		if _, err := os.Stat(old); err == nil {
			if err := os.Rename(old, l.path+"."+strconv.Itoa(i+1)); err != nil {
				return err
			}
		}
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return err
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, FileMode)
	if err != nil {
		return err
	}
	l.f.Close()
	l.f, l.size = f, 0
	return nil
}

// Sync flushes the file to disk.
func (l *File) Sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Sync()
}

// Reopen opens the path again (creating it, FileMode) and closes the previous file.
func (l *File) Reopen() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, FileMode)
	if err != nil {
		return fmt.Errorf("open log file: %w", err)
	}
	var size int64
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	l.mu.Lock()
	old := l.f
	l.f, l.size = f, size
	l.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// Close closes the file.
func (l *File) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

// CheckDir refuses a -log-dir that another user could write: there they could put a
// link at DIR/worker-0.log before the supervisor opens it, and the workers' output (text an
// attacker may choose, through requests) would be appended to whatever file the link names
// that the supervisor's user may write. Also one owned by another user, who could loosen it.
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("log-dir: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("log-dir: %s is not a directory", dir)
	case !ok || st.Uid != uint32(os.Geteuid()):
		return fmt.Errorf("log-dir: %s is not owned by this user (uid %d): another could replace the files in it; give it a directory of this user's (chown %d %s, or another path)",
			dir, os.Geteuid(), os.Geteuid(), dir)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("log-dir: %s is writable by its group or by others (mode %v): they could put links there that the logs would follow; chmod go-w %s",
			dir, fi.Mode().Perm(), dir)
	}
	if err := safepath.CheckDir(dir); err != nil { // the directories above it too
		return fmt.Errorf("log-dir %s: %w", dir, err)
	}
	return nil
}

// WorkerLogs are the per-slot files of -log-dir, DIR/APP-SLOT.log (APP the app's name, or
// its program's for an app without one: worker-0.log for our worker), opened on a slot's
// first worker start and kept across its restarts, so one file tells a slot's story.
type WorkerLogs struct {
	dir   string
	rot   Rotation
	log   *zap.Logger
	mu    sync.Mutex
	files map[string]*File // by file name
}

// ForApp returns the function that gives app's slot its file, DIR/APP-SLOT.log (as PM2
// names its per-instance files), opening it on first use.
func (w *WorkerLogs) ForApp(app string) func(slot int) io.Writer {
	return func(slot int) io.Writer { return w.file(app, slot) }
}

// file returns DIR/PREFIX-SLOT.log, opening it on first use. A file that cannot be opened
// is reported once and the slot's lines go only to the merged log.
func (w *WorkerLogs) file(prefix string, slot int) io.Writer {
	name := prefix + "-" + strconv.Itoa(slot) + ".log"
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.files == nil {
		w.files = make(map[string]*File)
	}
	if f, ok := w.files[name]; ok {
		if f == nil {
			return io.Discard
		}
		return f
	}
	f, err := OpenFile(filepath.Join(w.dir, name), w.rot)
	if err != nil {
		w.log.Error("open worker log", zap.String("file", name), zap.Error(err))
		w.files[name] = nil
		return io.Discard
	}
	w.files[name] = f
	return f
}

// Reopen reopens every file (USR1, after logrotate moved them).
func (w *WorkerLogs) Reopen() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, f := range w.files {
		if f == nil {
			continue
		}
		if err := f.Reopen(); err != nil {
			w.log.Error("reopen worker log", zap.String("file", name), zap.Error(err))
		}
	}
	w.log.Info("USR1: worker log files reopened", zap.String("dir", w.dir), zap.Int("files", len(w.files)))
}

// Close closes every file.
func (w *WorkerLogs) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.files {
		if f != nil {
			f.Close()
		}
	}
}

// Truncate empties the file; opened O_APPEND, the next line goes at its new start.
func (l *File) Truncate() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	l.size = 0
	return nil
}

// NewWorkerLogs keeps the per-slot files of dir, rotated by rot; log hears of files that
// cannot be opened.
func NewWorkerLogs(dir string, rot Rotation, log *zap.Logger) *WorkerLogs {
	return &WorkerLogs{dir: dir, rot: rot, log: log}
}

// Slots returns the files open now named PREFIX-SLOT.log (api-0.log, not api-v2-0.log).
func (w *WorkerLogs) Slots(prefix string) []*File {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*File
	for name, f := range w.files {
		if f == nil {
			continue
		}
		slot, ok := strings.CutPrefix(strings.TrimSuffix(name, ".log"), prefix+"-")
		if _, err := strconv.Atoi(slot); ok && err == nil && !strings.HasPrefix(slot, "-") && !strings.HasPrefix(slot, "+") {
			out = append(out, f)
		}
	}
	return out
}

// Path is the file's path.
func (l *File) Path() string { return l.path }
