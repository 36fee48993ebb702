package main

import (
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// unitRunDir is where systemd puts a unit's RuntimeDirectory=: the unit `startup` prints
// has its control socket at /run/NAME/supervisor.sock. A variable for the tests.
var unitRunDir = "/run"

// findSocket lets a command without -socket reach the supervisor of an installed unit:
// when the default socket is not there, the sockets of units (unitRunDir/NAME/supervisor.sock)
// that this user may trust are the candidates; one is used, and said so on stderr; several
// are refused, listed, since acting on the wrong cluster (a reload, a kill) is worse than
// asking. A -socket given, or a default that exists, is left alone.
func findSocket(flags *flag.FlagSet, socket *string, stderr io.Writer) error {
	given := false
	flags.Visit(func(f *flag.Flag) { given = given || f.Name == "socket" })
	if given {
		return nil
	}
	if _, err := os.Lstat(*socket); err == nil {
		return nil
	}
	found := unitSockets(unitRunDir)
	switch len(found) {
	case 0:
		return nil // the connection's own error says no supervisor runs
	case 1:
		fmt.Fprintf(stderr, "supervisor: no supervisor at %s; using %s, the control socket of the unit %s (-socket chooses another)\n",
			*socket, found[0], filepath.Base(filepath.Dir(found[0])))
		*socket = found[0]
		return nil
	}
	return fmt.Errorf("no supervisor at %s, and %d units' supervisors run: %s: choose one with -socket PATH",
		*socket, len(found), strings.Join(found, ", "))
}

// unitSockets lists run/NAME/supervisor.sock that pass the rules prepareRuntimeDir applies
// to a runtime directory named by -socket, from the caller's side: run itself is root's or
// this user's and writable by no one else; NAME is a real directory (not a symbolic link)
// of this user (root: of any user, as systemd makes it for the unit's User=), writable by
// no one else; the socket is a socket (not a link) of the directory's owner, writable by
// no one else. Anything else might be a stranger's listener waiting for our commands.
func unitSockets(run string) []string {
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
