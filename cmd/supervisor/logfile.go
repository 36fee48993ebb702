package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"go.uber.org/zap"
)

// logFile is the merged log file (the supervisor's lines and every worker's), reopened on
// USR1 so that logrotate can move it away: after the rename, writes go on to the old
// inode until the reopen creates a fresh file at the path.
type logFile struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

func openLogFile(path string) (*logFile, error) {
	l := &logFile{path: path}
	if err := l.Reopen(); err != nil {
		return nil, err
	}
	return l, nil
}

// Write appends p; zap writes one whole entry per call.
func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Write(p)
}

// Sync flushes the file to disk.
func (l *logFile) Sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Sync()
}

// Reopen opens the path again (creating it, mode 0640) and closes the previous file.
func (l *logFile) Reopen() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("open log file: %w", err)
	}
	l.mu.Lock()
	old := l.f
	l.f = f
	l.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// Close closes the file.
func (l *logFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

// workerLogs are the per-slot files of -log-dir, DIR/worker-SLOT.log, opened on a slot's
// first worker start and kept across its restarts, so one file tells a slot's story.
type workerLogs struct {
	dir   string
	log   *zap.Logger
	mu    sync.Mutex
	files map[int]*logFile
}

// For returns slot's file, opening it on first use. A file that cannot be opened is
// reported once and the slot's lines go only to the merged log.
func (w *workerLogs) For(slot int) io.Writer {
	w.mu.Lock()
	defer w.mu.Unlock()
	if f, ok := w.files[slot]; ok {
		return f
	}
	f, err := openLogFile(filepath.Join(w.dir, "worker-"+strconv.Itoa(slot)+".log"))
	if err != nil {
		w.log.Error("open worker log", zap.Int("slot", slot), zap.Error(err))
		return io.Discard
	}
	if w.files == nil {
		w.files = make(map[int]*logFile)
	}
	w.files[slot] = f
	return f
}

// Reopen reopens every file (USR1, after logrotate moved them).
func (w *workerLogs) Reopen() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for slot, f := range w.files {
		if err := f.Reopen(); err != nil {
			w.log.Error("reopen worker log", zap.Int("slot", slot), zap.Error(err))
		}
	}
	w.log.Info("USR1: worker log files reopened", zap.String("dir", w.dir), zap.Int("files", len(w.files)))
}

// Close closes every file.
func (w *workerLogs) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.files {
		f.Close()
	}
}
