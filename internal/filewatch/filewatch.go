// Package filewatch tells when a file under some paths changes, as PM2's watch does for
// an app: directories are watched recursively (inotify, through fsnotify: a directory
// created later is watched too), a path that names a file is watched through its
// directory (an editor that saves by rename keeps being seen), and paths matching the
// ignore patterns, dotfiles and node_modules are left out.
package filewatch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// Config says what to watch. The zero value watches nothing.
type Config struct {
	// Dir is where relative Paths start, and what ignore patterns are matched relative to.
	// Default: the process's working directory.
	Dir string
	// Paths are the files and directories to watch.
	Paths []string
	// Ignore are path.Match patterns: a change is ignored when one matches its path
	// relative to Dir (slash-separated), one of that path's parent directories, or its base
	// name. Dotfiles and node_modules are always ignored (PM2's default).
	Ignore []string
	// OnError gets what the watcher reports (an overflowed queue, a directory it could
	// not add) from its goroutine. Default: dropped.
	OnError func(error)
}

// Watcher watches. Create it with New; Close stops it.
type Watcher struct {
	cfg     Config
	fsw     *fsnotify.Watcher
	files   map[string]map[string]bool // a directory watched for some files only: their names
	changes chan string
	done    sync.WaitGroup
}

// New starts watching. Every path must exist.
func New(cfg Config) (*Watcher, error) {
	if cfg.Dir == "" {
		d, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("watch: %w", err)
		}
		cfg.Dir = d
	}
	for _, p := range cfg.Ignore {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("watch: ignore pattern %q: %w", p, err)
		}
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	w := &Watcher{cfg: cfg, fsw: fsw, files: map[string]map[string]bool{}, changes: make(chan string)}
	for _, p := range cfg.Paths {
		if !filepath.IsAbs(p) {
			p = filepath.Join(cfg.Dir, p)
		}
		fi, err := os.Stat(p)
		if err != nil {
			fsw.Close()
			return nil, fmt.Errorf("watch: %w", err)
		}
		if !fi.IsDir() {
			dir := filepath.Dir(p)
			if w.files[dir] == nil {
				w.files[dir] = map[string]bool{}
				if err := fsw.Add(dir); err != nil {
					fsw.Close()
					return nil, fmt.Errorf("watch %s: %w", dir, err)
				}
			}
			w.files[dir][filepath.Base(p)] = true
			continue
		}
		if err := w.addTree(p); err != nil {
			fsw.Close()
			return nil, err
		}
	}
	w.done.Add(1)
	go w.run()
	return w, nil
}

// Changes delivers the path (relative to Dir where it is under it) of each change, in
// order; a change of the path delivered last and still waiting is merged into it, and past
// maxPending waiting changes more are dropped (the reader has enough to act on).
func (w *Watcher) Changes() <-chan string { return w.changes }

// Close stops watching and waits for the watcher's goroutine.
func (w *Watcher) Close() error {
	err := w.fsw.Close()
	w.done.Wait()
	return err
}

// addTree watches dir and every directory under it that is not ignored.
func (w *Watcher) addTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return fmt.Errorf("watch %s: %w", p, err)
			}
			return nil // gone meanwhile, or unreadable: not ours to watch
		}
		if !d.IsDir() {
			return nil
		}
		if p != dir && w.ignored(p) {
			return filepath.SkipDir
		}
		if err := w.fsw.Add(p); err != nil {
			return fmt.Errorf("watch %s: %w (the inotify limit is fs.inotify.max_user_watches; ignore_watch what need not be watched)", p, err)
		}
		return nil
	})
}

// rel is p relative to Dir, slash-separated; p itself when it is elsewhere.
func (w *Watcher) rel(p string) string {
	r, err := filepath.Rel(w.cfg.Dir, p)
	if err != nil || r == ".." || strings.HasPrefix(r, "../") {
		return filepath.ToSlash(p)
	}
	return filepath.ToSlash(r)
}

// ignored reports whether a change at p does not count.
func (w *Watcher) ignored(p string) bool {
	r := w.rel(p)
	for _, el := range strings.Split(r, "/") {
		if el == "node_modules" || (strings.HasPrefix(el, ".") && el != "." && el != "..") {
			return true
		}
	}
	for _, pat := range w.cfg.Ignore {
		if ok, _ := path.Match(pat, path.Base(r)); ok {
			return true
		}
		for q := r; q != "." && q != "/" && q != ""; q = path.Dir(q) {
			if ok, _ := path.Match(pat, q); ok {
				return true
			}
		}
	}
	return false
}

// maxPending bounds the changes waiting to be read.
const maxPending = 64

func (w *Watcher) run() {
	defer w.done.Done()
	report := func(err error) {
		if w.cfg.OnError != nil {
			w.cfg.OnError(err)
		}
	}
	var pending []string
	add := func(p string) {
		if n := len(pending); (n > 0 && pending[n-1] == p) || n >= maxPending {
			return
		}
		pending = append(pending, p)
	}
	for {
		var out chan string
		var head string
		if len(pending) > 0 {
			out, head = w.changes, pending[0]
		}
		select {
		case out <- head:
			pending = pending[1:]
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if names := w.files[filepath.Dir(ev.Name)]; names != nil && !names[filepath.Base(ev.Name)] {
				continue // a directory watched for some of its files only
			}
			if ev.Op == fsnotify.Chmod || w.ignored(ev.Name) {
				continue // touch, chmod: no content changed
			}
			if ev.Has(fsnotify.Create) && w.files[filepath.Dir(ev.Name)] == nil {
				if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
					if err := w.addTree(ev.Name); err != nil {
						report(err)
					}
				}
			}
			add(w.rel(ev.Name))
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				add(".") // changes were lost: say there was one, so that a reload still follows
			}
			report(err)
		}
	}
}
