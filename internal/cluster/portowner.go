package cluster

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrPortServed is Start's error when another process listens on the cluster's address
// already and Options.SharePort is off: with SO_REUSEPORT the new cluster would join that
// process's group silently and take a share of its connections (two supervisors on one
// port each get half of the other's clients).
var ErrPortServed = fmt.Errorf("the port is served by another process")

// PortOwner is a process that holds a listening TCP socket on a port: found by the
// socket's inode (/proc/net/tcp, tcp6) among the process's descriptors (/proc/PID/fd).
type PortOwner struct {
	PID  int
	Comm string // /proc/PID/comm
	// Control is the listening unix socket the process holds whose path is not a
	// rendezvous (.adopt): a supervisor's control socket; "" for other programs.
	Control string
}

// PortOwners are the processes that hold a socket listening on port, in
// pid order. Processes of other users whose descriptors cannot be read are not found; an
// error is returned only when /proc/net cannot be read at all.
func PortOwners(port int) ([]PortOwner, error) {
	inodes := map[string]bool{}
	read := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		ins, err := readListeningInodes(f, port)
		if err != nil {
			continue // no IPv6 in this kernel, say
		}
		read++
		for _, in := range ins {
			inodes[in] = true
		}
	}
	if read == 0 {
		return nil, fmt.Errorf("read /proc/net/tcp: not available")
	}
	if len(inodes) == 0 {
		return nil, nil
	}
	unixPaths := listeningUnixPaths()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var out []PortOwner
	for _, dir := range procs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(filepath.Join(dir, "fd"))
		if err != nil {
			continue
		}
		found := false
		var control string
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
			if err != nil || !strings.HasPrefix(l, "socket:[") {
				continue
			}
			in := strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")
			if inodes[in] {
				found = true
			}
			if p := unixPaths[in]; p != "" && control == "" && !strings.HasSuffix(p, ".adopt") {
				control = p
			}
		}
		if !found {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
		out = append(out, PortOwner{PID: pid, Comm: strings.TrimSpace(string(comm)), Control: control})
	}
	slices.SortFunc(out, func(a, b PortOwner) int { return a.PID - b.PID })
	return out, nil
}

func readListeningInodes(path string, port int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return listeningInodes(f, port)
}

// listeningInodes reads a /proc/net/tcp-format table and returns the inodes of the
// sockets in state LISTEN (0A) on port, whatever their address.
func listeningInodes(r io.Reader, port int) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "0A" {
			continue
		}
		i := strings.LastIndexByte(fields[1], ':')
		if i < 0 {
			continue
		}
		p, err := strconv.ParseUint(fields[1][i+1:], 16, 16)
		if err != nil || int(p) != port {
			continue
		}
		out = append(out, fields[9])
	}
	return out, sc.Err()
}

// listeningUnixPaths maps the inodes of the listening unix sockets with a path
// (/proc/net/unix: flags 00010000, __SO_ACCEPTCON) to their paths.
func listeningUnixPaths() map[string]string {
	out := map[string]string{}
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan()
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || fields[3] != "00010000" {
			continue
		}
		out[fields[6]] = fields[7]
	}
	return out
}

// checkPortFree refuses the address when another process listens on it (see
// ErrPortServed), naming who and how to free the port.
func (s *Supervisor) checkPortFree() error {
	ln, err := net.Listen("tcp", s.addr)
	if err == nil {
		ln.Close()
		return nil
	}
	_, portStr, _ := net.SplitHostPort(s.addr)
	port, _ := strconv.Atoi(portStr)
	owners, _ := PortOwners(port)
	who, fix := portAdvice(owners)
	return fmt.Errorf("listen: %s: %w: %s, with which this cluster would share the connections (SO_REUSEPORT); choose another port, %s, or start with -share-port if sharing is meant",
		s.addr, ErrPortServed, who, fix)
}

// portAdvice names the holder of a port and the way to free it that works for it: PM2's
// daemon (its God process holds a cluster's port; `pm2 delete`/`pm2 kill` free it, not our
// kill, which its control sockets would not answer), a supervisor of ours (kill by its
// control socket), any other program (by its pid).
func portAdvice(owners []PortOwner) (who, fix string) {
	if len(owners) == 0 {
		return "another process (one whose descriptors this user cannot read)", "stop it"
	}
	o := owners[0]
	if j := slices.IndexFunc(owners, func(o PortOwner) bool { return o.Control != "" }); j >= 0 {
		o = owners[j]
	}
	who = fmt.Sprintf("pid %d (%s)", o.PID, o.Comm)
	switch {
	case strings.HasPrefix(o.Comm, "PM2") || strings.Contains(o.Control, "/.pm2/"):
		return "PM2's daemon, " + who, "free it with `pm2 delete APP` (its app on this port) or `pm2 kill` (every PM2 app)"
	case o.Control != "" && strings.HasPrefix(o.Comm, "supervisor"):
		return who + ", control socket " + o.Control, "stop it (supervisor kill -socket " + o.Control + ")"
	}
	return who, fmt.Sprintf("stop it (kill %d, or the way it was started)", o.PID)
}
