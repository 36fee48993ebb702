package filewatch

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatch changes one file per case and then a watched marker: the first change seen
// is the case's own when it counts, the marker's when it is ignored (inotify keeps the
// order of one watcher's events, so no wait decides it).
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"src/deep", "node_modules/x", ".git", "logs", "other"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	for _, f := range []string{"app.js", "src/deep/a.js", "node_modules/x/i.js", ".git/HEAD", "logs/out.log", "other/o.js", "src/x.tmp"} {
		os.WriteFile(filepath.Join(dir, f), []byte("0"), 0o644)
	}
	w, err := New(Config{Dir: dir, Paths: []string{".", "/dev/null"}, Ignore: []string{"logs", "*.tmp"}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	tests := []struct {
		name, file string
		counts     bool
	}{
		{"a file at the top", "app.js", true},
		{"a file deep down", "src/deep/a.js", true},
		{"a new file", "src/new.js", true},
		{"a file in a directory made after the start", "later/b.js", true},
		{"node_modules", "node_modules/x/i.js", false},
		{"a dotfile", ".git/HEAD", false},
		{"an ignored directory", "logs/out.log", false},
		{"an ignored name", "src/x.tmp", false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.file)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.file == "later/b.js" {
				// The directory's own creation is a change; let it be read and the watch
				// on it be added before the file in it is written.
				if got := next(t, w); got != "later" {
					t.Fatalf("change %q, want later", got)
				}
			}
			os.WriteFile(p, []byte{byte(i)}, 0o644)
			marker := filepath.Join(dir, "other", "o.js")
			os.WriteFile(marker, []byte{byte(i)}, 0o644)
			want := "other/o.js"
			if tc.counts {
				want = tc.file
			}
			if got := next(t, w); got != want {
				t.Fatalf("first change %q, want %q", got, want)
			}
			drain(w)
		})
	}
}

// next is the next change, but the fence's (drain's) that came late.
func next(t *testing.T, w *Watcher) string {
	t.Helper()
	for {
		select {
		case p := <-w.Changes():
			if p != "other/fence" {
				return p
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no change seen in 10 s")
			return ""
		}
	}
}

// drain reads what a case left (more events of its writes) until a write of a file no case
// uses is seen: every event before it was read or merged into one read. The fence is
// written again until seen, since it may be merged into one waiting already.
func drain(w *Watcher) {
	f := filepath.Join(w.cfg.Dir, "other", "fence")
	for i := 0; ; i++ {
		os.WriteFile(f, []byte{byte(i)}, 0o644)
		select {
		case p := <-w.Changes():
			if p == "other/fence" {
				return
			}
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestWatchFileAndErrors(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "app.js")
	os.WriteFile(f, []byte("0"), 0o644)
	os.WriteFile(filepath.Join(dir, "other.js"), []byte("0"), 0o644)
	w, err := New(Config{Dir: dir, Paths: []string{"app.js"}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	os.WriteFile(filepath.Join(dir, "other.js"), []byte("1"), 0o644) // not watched: only app.js is
	// Saved by rename, as editors do: the file watched is replaced.
	tmp := filepath.Join(dir, ".app.js.swp")
	os.WriteFile(tmp, []byte("1"), 0o644)
	os.Rename(tmp, f)
	if got := next(t, w); got != "app.js" {
		t.Fatalf("change %q, want app.js", got)
	}

	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"missing path", Config{Dir: dir, Paths: []string{"nope"}}},
		{"bad pattern", Config{Dir: dir, Paths: []string{"."}, Ignore: []string{"[a-"}}},
	} {
		if w, err := New(tc.cfg); err == nil {
			w.Close()
			t.Errorf("%s: no error", tc.name)
		}
	}
}
