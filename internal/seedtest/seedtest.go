// Package seedtest hands tests the challenge seed database without paying for it in every
// test. The seed (about 250 MB, tens of seconds to build) is generated at most once per
// machine and seed.Version into a shared cache directory; Path gives each caller a private
// copy it may modify.
//
// The cache directory is $ONEHOST_SEED_CACHE when that variable is set (the only
// environment this package reads: point it at a roomy or persistent disk, e.g. in CI),
// else os.UserCacheDir()/onehost, else os.TempDir()/onehost. Delete the directory to
// force a rebuild. Test binaries of several packages build and read it concurrently: an
// exclusive flock on a lock file beside the seed serializes the build, and the seed
// appears under its final name only when it is complete.
package seedtest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/seed"
)

// CacheEnv names the environment variable that overrides the cache directory.
const CacheEnv = "ONEHOST_SEED_CACHE"

// built remembers the cached seed this process already checked, so that later calls skip
// the lock file.
var built struct {
	sync.Mutex
	path string
}

// Path returns the path of a fresh copy of the seed database in tb.TempDir(), which the
// caller may open read-write. The copy is only the main file: the cached seed was
// checkpointed with TRUNCATE, so it holds the whole database.
func Path(tb testing.TB) string {
	tb.Helper()
	src := Build(tb)
	dst := filepath.Join(tb.TempDir(), "feed.db")
	if err := copyFile(dst, src); err != nil {
		tb.Fatalf("seedtest: %v", err)
	}
	return dst
}

// Build returns the path of the cached seed database, building it first if this machine
// has none for the current seed.Version. Treat the file as read-only (hashing it is
// fine): every test on the machine shares it. Use Path for a copy to modify.
func Build(tb testing.TB) string {
	tb.Helper()
	built.Lock()
	defer built.Unlock()
	if built.path != "" {
		return built.path
	}
	dir, err := cacheDir()
	if err != nil {
		tb.Fatalf("seedtest: %v", err)
	}
	path, err := ensure(context.Background(), dir, tb.Logf)
	if err != nil {
		tb.Fatalf("seedtest: %v", err)
	}
	built.path = path
	return path
}

// cacheDir picks the cache directory as the package documentation describes.
func cacheDir() (string, error) {
	dir := os.Getenv(CacheEnv)
	if dir == "" {
		if d, err := os.UserCacheDir(); err == nil {
			dir = filepath.Join(d, "onehost")
		} else {
			dir = filepath.Join(os.TempDir(), "onehost")
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create seed cache: %w", err)
	}
	return dir, nil
}

// ensure returns the seed in dir, generating it under the directory's lock when missing.
func ensure(ctx context.Context, dir string, logf func(string, ...any)) (string, error) {
	name := "seed-v" + strconv.Itoa(seed.Version) + ".db"
	path := filepath.Join(dir, name)
	if ok, err := usable(path); ok || err != nil {
		return path, err
	}

	lock, err := os.OpenFile(filepath.Join(dir, name+".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return "", fmt.Errorf("open seed lock: %w", err)
	}
	defer lock.Close() // closing the file releases the lock
	if err := flock(lock); err != nil {
		return "", fmt.Errorf("lock seed cache: %w", err)
	}
	// Another process may have built it while we waited.
	if ok, err := usable(path); ok || err != nil {
		return path, err
	}

	// Holding the lock, any temporary file of this version is a crashed build's leftover.
	if stale, err := filepath.Glob(filepath.Join(dir, "."+name+".*")); err == nil {
		for _, f := range stale {
			_ = os.Remove(f)
		}
	}
	logf("seedtest: building the seed database at %s (once per machine and seed.Version)", path)
	start := time.Now()
	goCmd, lookErr := exec.LookPath("go")
	if raceEnabled && lookErr == nil {
		err = generateOutside(ctx, goCmd, path, logf)
	} else {
		err = generate(ctx, path)
	}
	if err != nil {
		return "", err
	}
	logf("seedtest: built the seed in %v", time.Since(start).Round(time.Millisecond))
	return path, nil
}

// generate builds the seed at path in this process and checks its content hash.
func generate(ctx context.Context, path string) error {
	if _, err := seed.Generate(ctx, path, seed.Options{}); err != nil {
		return err
	}
	if err := seed.Check(ctx, path); err != nil {
		// A seed with other rows would poison every test that uses the cache.
		_ = os.Remove(path)
		return err
	}
	return nil
}

// generateOutside builds the seed at path with the seedgen command, compiled without the
// race detector. go test puts its own go command first on PATH, and a test's working
// directory is inside this module, so go run resolves the package.
func generateOutside(ctx context.Context, goCmd, path string, logf func(string, ...any)) error {
	cmd := exec.CommandContext(ctx, goCmd, "run", "github.com/onehost/onehost/internal/seedtest/seedgen", path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("run seedgen: %w\n%s", err, out)
	}
	logf("seedtest: %s", strings.TrimSpace(string(out)))
	return nil
}

// flock takes an exclusive lock on f, waiting as long as it takes.
func flock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// usable reports whether the seed at path exists. A non-empty WAL beside it means
// something wrote to the shared seed, which is an error rather than a reason to rebuild:
// other processes may be reading it.
func usable(path string) (bool, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("check cached seed: %w", err)
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		return false, fmt.Errorf("cached seed %s has a non-empty WAL (%d bytes): something wrote to it; delete it to rebuild", path, fi.Size())
	}
	return true, nil
}

// copyFile copies src to the new file dst. os.File.ReadFrom uses copy_file_range on
// Linux, which copies in the kernel (or shares extents on filesystems that can).
func copyFile(dst, src string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy seed: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("copy seed: %w", err)
	}
	defer func() {
		if cerr := out.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("copy seed: %w", cerr)
		}
	}()
	if _, err := out.ReadFrom(in); err != nil {
		return fmt.Errorf("copy seed: %w", err)
	}
	return nil
}
