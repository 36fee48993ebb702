package control

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// DefaultSocket is $XDG_RUNTIME_DIR/onehost/supervisor.sock; without XDG_RUNTIME_DIR (sudo,
// su, cron, CI, docker exec) it is /run/onehost/supervisor.sock for root and
// /tmp/onehost-UID/supervisor.sock for other users: a per-user directory, so one user's
// supervisor is not another's. The /tmp one is a name anybody could take first, which is
// why the directory is checked before use (internal/daemon).
func DefaultSocket(getenv func(string) string) string {
	if d := getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "onehost", "supervisor.sock")
	}
	if os.Geteuid() == 0 {
		return filepath.Join("/run", "onehost", "supervisor.sock")
	}
	return filepath.Join(os.TempDir(), "onehost-"+strconv.Itoa(os.Geteuid()), "supervisor.sock")
}

// MaxSocketPath is the longest path a unix socket address holds (sun_path is 108 bytes,
// NUL included).
const MaxSocketPath = 107

// CheckSocketPath refuses a control socket path the kernel cannot take, before connect or
// bind fail with a bare "invalid argument".
func CheckSocketPath(path string) error {
	if len(path) > MaxSocketPath {
		return fmt.Errorf("control socket path %q is %d bytes, and a unix socket path holds at most %d: choose a shorter -socket (or a shorter XDG_RUNTIME_DIR)", path, len(path), MaxSocketPath)
	}
	return nil
}

// UnitSockets lists run/NAME/supervisor.sock that pass the rules the supervisor applies
// to a runtime directory named by -socket, from the caller's side: run itself is root's or
// this user's and writable by no one else; NAME is a real directory (not a symbolic link)
// of this user (root: of any user, as systemd makes it for the unit's User=), writable by
// no one else; the socket is a socket (not a link) of the directory's owner, writable by
// no one else. Anything else might be a stranger's listener waiting for our commands.
func UnitSockets(run string) []string {
	me := uint32(os.Geteuid())
	if st, ok := lstat(run); !ok || !st.IsDir() || (st.uid != 0 && st.uid != me) || st.Mode().Perm()&0o022 != 0 {
		return nil
	}
	entries, err := os.ReadDir(run)
	if err != nil {
		return nil
	}
	var found []string
	for _, e := range entries {
		dir := filepath.Join(run, e.Name())
		d, ok := lstat(dir)
		if !ok || !d.IsDir() || d.Mode()&fs.ModeSymlink != 0 || (me != 0 && d.uid != me) || d.Mode().Perm()&0o022 != 0 {
			continue
		}
		sock := filepath.Join(dir, "supervisor.sock")
		s, ok := lstat(sock)
		if !ok || s.Mode()&fs.ModeSocket == 0 || s.uid != d.uid || s.Mode().Perm()&0o022 != 0 {
			continue
		}
		found = append(found, sock)
	}
	return found
}

type ownedInfo struct {
	fs.FileInfo
	uid uint32
}

func lstat(p string) (ownedInfo, bool) {
	fi, err := os.Lstat(p)
	if err != nil {
		return ownedInfo{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ownedInfo{}, false
	}
	return ownedInfo{fi, st.Uid}, true
}
