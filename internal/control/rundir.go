package control

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/onehost/onehost/internal/safepath"
)

// PrepareDir makes sure dir, where the control socket, its lock and the rendezvous
// sockets live, is this user's alone before anything is created in it: else another user
// who made it first (in /tmp, anyone can) could plant symlinks there, or replace the
// sockets with listeners of their own. A missing directory is created 0700 (its parents
// too, for a -socket in a new directory). An existing one must be a real directory (not a
// symlink) of this effective user. private (the default directory, which this program
// names and owns) also wants no permission for group or others; a directory named by
// -socket may be readable by them, but not writable. Every directory above it must be
// root's or this user's and writable by no one else (safepath.CheckDir): one that another
// user can write lets them rename this directory away after the check and put theirs in
// its place, where the preload, the notify sockets and the dump are later opened by path.
func PrepareDir(dir string, private bool) error {
	if err := safepath.MkdirAll(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("socket directory %s: %w", dir, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create socket directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	fix := "remove it (someone may have made it to take this supervisor's place) or choose another -socket (or set XDG_RUNTIME_DIR)"
	st, _ := fi.Sys().(*syscall.Stat_t)
	bad := 0o022 // written to by others
	if private {
		bad = 0o077
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("socket directory %s is a symbolic link: %s", dir, fix)
	case !fi.IsDir():
		return fmt.Errorf("socket directory %s is not a directory: %s", dir, fix)
	case st == nil || st.Uid != uint32(os.Geteuid()):
		uid := -1
		if st != nil {
			uid = int(st.Uid)
		}
		return fmt.Errorf("socket directory %s belongs to uid %d, not this user (uid %d): %s", dir, uid, os.Geteuid(), fix)
	case int(fi.Mode().Perm())&bad != 0:
		return fmt.Errorf("socket directory %s has mode %04o: others may use it; want 0700 (chmod 700 %s if it is yours), or %s",
			dir, fi.Mode().Perm(), dir, fix)
	}
	return nil
}
