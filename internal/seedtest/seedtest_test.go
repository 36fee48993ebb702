package seedtest

import (
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func TestPathGivesPrivateCopies(t *testing.T) {
	start := time.Now()
	a := Path(t)
	t.Logf("first Path took %v", time.Since(start))
	start = time.Now()
	b := Path(t)
	t.Logf("second Path (a copy) took %v", time.Since(start))
	if a == b {
		t.Fatalf("Path returned %s twice, want two copies", a)
	}
	src := Build(t)
	for _, p := range []string{a, b} {
		if filepath.Dir(p) == filepath.Dir(src) {
			t.Errorf("copy %s is in the cache directory", p)
		}
		if !sameContent(t, p, src) {
			t.Errorf("copy %s differs from %s", p, src)
		}
	}
	// Writing to a copy leaves the cache alone.
	if err := os.WriteFile(a, []byte("scribble"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(src); err != nil || fi.Size() < 1<<20 {
		t.Errorf("cached seed after writing a copy: %v, %v", fi, err)
	}
}

func TestFlockExcludes(t *testing.T) {
	// flock locks belong to open files, so two opens of the lock file exclude each other
	// even within one process, which is what lets ensure serialize builds everywhere.
	dir := t.TempDir()
	name := filepath.Join(dir, "seed-v1.db.lock")
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := flock(f); err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{})
	go func() {
		g, err := os.OpenFile(name, os.O_RDWR, 0o644)
		if err == nil {
			_ = flock(g)
			g.Close()
		}
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("a second flock on the same file succeeded while the first was held")
	case <-time.After(100 * time.Millisecond):
	}
	f.Close()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the second flock did not succeed after the first was released")
	}
}

func TestBuildIsStable(t *testing.T) {
	var wg sync.WaitGroup
	paths := make([]string, 4)
	for i := range paths {
		wg.Go(func() { paths[i] = Build(t) })
	}
	wg.Wait()
	for _, p := range paths[1:] {
		if p != paths[0] {
			t.Errorf("Build: got %s, want %s", p, paths[0])
		}
	}
}

func TestCacheDirHonorsEnv(t *testing.T) {
	want := filepath.Join(t.TempDir(), "nested", "cache")
	t.Setenv(CacheEnv, want)
	got, err := cacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("cacheDir: got %s, want %s", got, want)
	}
	if fi, err := os.Stat(got); err != nil || !fi.IsDir() {
		t.Errorf("cacheDir did not create %s: %v", got, err)
	}
}

func sameContent(t *testing.T, a, b string) bool {
	t.Helper()
	return fileHash(t, a) == fileHash(t, b)
}

// fileHash streams the file through SHA-256: reading 250 MB into memory and comparing it
// byte by byte is slow under the race detector, which does not instrument the hash.
func fileHash(t *testing.T, path string) [sha256.Size]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return [sha256.Size]byte(h.Sum(nil))
}
