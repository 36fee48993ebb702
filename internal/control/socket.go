package control

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// StateDir is where a user's supervisors keep what must outlive a reboot (the dump of
// `save`, the logs of `start`): $XDG_STATE_HOME/onehost, else ~/.local/state/onehost, and
// for root without XDG_STATE_HOME /var/lib/onehost. PrepareStateDir makes it.
func StateDir(getenv func(string) string) (string, error) {
	if d := getenv("XDG_STATE_HOME"); d != "" {
		if !filepath.IsAbs(d) {
			return "", fmt.Errorf("XDG_STATE_HOME %q: want an absolute path", d)
		}
		return filepath.Join(d, "onehost"), nil
	}
	if os.Geteuid() == 0 {
		return "/var/lib/onehost", nil
	}
	home := getenv("HOME")
	if home == "" || !filepath.IsAbs(home) {
		return "", fmt.Errorf("no state directory: HOME is %q and XDG_STATE_HOME is not set: set one (or give -file)", home)
	}
	return filepath.Join(home, ".local", "state", "onehost"), nil
}

// PrepareStateDir makes StateDir (0700, its parents too) and checks it as the runtime
// directory is: this user's alone, every directory above it root's or this user's.
func PrepareStateDir(getenv func(string) string) (string, error) {
	dir, err := StateDir(getenv)
	if err != nil {
		return "", err
	}
	if err := PrepareDir(dir, true); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	return dir, nil
}

// Place is where the supervisor at socket keeps its dump and the logs of a background
// start: in the state directory for the default socket (so that they outlive a reboot, as
// PM2's ~/.pm2/dump.pm2 and logs do), beside the socket for one named by -socket (its
// owner chose the place).
func Place(getenv func(string) string, socket string) (dump, logs string, err error) {
	if socket != DefaultSocket(getenv) {
		base := strings.TrimSuffix(socket, ".sock")
		return base + ".dump.json", base + "-logs", nil
	}
	dir, err := StateDir(getenv)
	if err != nil {
		return "", "", err
	}
	return filepath.Join(dir, "dump.json"), filepath.Join(dir, "logs"), nil
}
