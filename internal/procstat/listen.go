package procstat

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
)

// Listener is a listening TCP socket a process holds.
type Listener struct {
	Inode uint64         // the socket's inode, as fstat and /proc/PID/fd show it
	Addr  netip.AddrPort // its local address: 0.0.0.0 or :: for every interface
}

// Listeners returns the listening TCP sockets among pid's open descriptors: the socket
// inodes of /proc/PID/fd looked up in its network namespace's /proc/PID/net/tcp and tcp6
// (state 0A, LISTEN). It is how the supervisor sees a worker that bound a port of its own
// instead of serving the socket it was given. root is the proc file system ("" is /proc).
func Listeners(root string, pid int) ([]Listener, error) {
	if root == "" {
		root = "/proc"
	}
	dir := filepath.Join(root, strconv.Itoa(pid))
	inodes := make(map[uint64]struct{})
	if err := addSocketInodes(inodes, filepath.Join(dir, "fd")); err != nil {
		return nil, err
	}
	if len(inodes) == 0 {
		return nil, nil
	}
	var out []Listener
	for _, name := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(filepath.Join(dir, "net", name))
		if err != nil {
			continue // no IPv6
		}
		out = append(out, parseListeners(b, inodes)...)
	}
	return out, nil
}

// addSocketInodes adds the inodes of the sockets among the descriptors in fdDir (a
// /proc/PID/fd) to inodes.
func addSocketInodes(inodes map[uint64]struct{}, fdDir string) error {
	f, err := os.Open(fdDir)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	for _, n := range names {
		if target, err := os.Readlink(filepath.Join(fdDir, n)); err == nil {
			if ino, ok := socketInode(target); ok {
				inodes[ino] = struct{}{}
			}
		}
	}
	return err
}

// parseListeners returns the lines of /proc/net/tcp or tcp6 in state 0A (LISTEN) whose
// inode is in inodes (all of them when inodes is nil).
func parseListeners(b []byte, inodes map[uint64]struct{}) []Listener {
	var out []Listener
	for i, line := range bytes.Split(b, []byte("\n")) {
		if i == 0 { // header
			continue
		}
		// Fields: sl local rem st tx:rx tr:when retrnsmt uid timeout inode …
		f := bytes.Fields(line)
		if len(f) < 10 || string(f[3]) != "0A" {
			continue
		}
		ino, ok := parseUint(f[9])
		if !ok {
			continue
		}
		if _, mine := inodes[ino]; inodes != nil && !mine {
			continue
		}
		addr, ok := parseHexAddr(f[1])
		if !ok {
			continue
		}
		out = append(out, Listener{Inode: ino, Addr: addr})
	}
	return out
}

// parseHexAddr reads a /proc/net/tcp address: the IP's bytes as 32-bit words, each printed
// in hex as the machine reads it (%08X of the word in memory, so reversed on little-endian
// machines), a colon, the port as a number in hex.
func parseHexAddr(b []byte) (netip.AddrPort, bool) {
	h, p, ok := bytes.Cut(b, []byte(":"))
	if !ok || len(p) != 4 {
		return netip.AddrPort{}, false
	}
	port, err := strconv.ParseUint(string(p), 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	raw := make([]byte, hex.DecodedLen(len(h)))
	if _, err := hex.Decode(raw, h); err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, false
	}
	// The hex of each word is the number the machine read from memory: put it back there.
	for w := 0; w < len(raw); w += 4 {
		binary.NativeEndian.PutUint32(raw[w:], binary.BigEndian.Uint32(raw[w:]))
	}
	ip, _ := netip.AddrFromSlice(net.IP(raw))
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), true
}

// PairCount is how many of a network namespace's TCP sockets go from one local address to
// one remote address and port.
type PairCount struct {
	// TimeWait sockets keep their port for 60 s; connect() may take it again only where
	// net.ipv4.tcp_tw_reuse allows (1; 2, the default, on loopback alone).
	TimeWait int
	// Other counts every other state but LISTEN.
	Other int
}

// SocketsTo counts the TCP sockets of this process's network namespace whose remote end is
// dst, per local address (/proc/net/tcp and tcp6 under root, "" for /proc). The kernel
// prints every socket of the namespace for it, so it is for once per run, not per second.
func SocketsTo(root string, dst netip.AddrPort) (map[netip.Addr]PairCount, error) {
	if root == "" {
		root = "/proc"
	}
	b, err := os.ReadFile(filepath.Join(root, "net", "tcp"))
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Addr]PairCount)
	countPairs(b, dst, out)
	if b, err := os.ReadFile(filepath.Join(root, "net", "tcp6")); err == nil { // absent without IPv6
		countPairs(b, dst, out)
	}
	return out, nil
}

// countPairs adds the lines of /proc/net/tcp or tcp6 whose remote address is dst to out,
// by local address and state.
func countPairs(b []byte, dst netip.AddrPort, out map[netip.Addr]PairCount) {
	for i, line := range bytes.Split(b, []byte("\n")) {
		if i == 0 { // header
			continue
		}
		f := bytes.Fields(line) // sl local rem st …
		if len(f) < 4 || string(f[3]) == "0A" {
			continue
		}
		rem, ok := parseHexAddr(f[2])
		if !ok || rem != dst {
			continue
		}
		local, ok := parseHexAddr(f[1])
		if !ok {
			continue
		}
		c := out[local.Addr()]
		if string(f[3]) == "06" { // TCP_TIME_WAIT
			c.TimeWait++
		} else {
			c.Other++
		}
		out[local.Addr()] = c
	}
}

// TCPCounts reads /proc/net/sockstat's TCP line under root ("" for /proc): the network
// namespace's TCP sockets in use (every state but TIME_WAIT, listeners included) and in
// TIME_WAIT. It costs one short read, where SocketsTo reads every socket: a caller can
// tell from it that no pair can be crowded.
func TCPCounts(root string) (inUse, timeWait int, err error) {
	if root == "" {
		root = "/proc"
	}
	b, err := os.ReadFile(filepath.Join(root, "net", "sockstat"))
	if err != nil {
		return 0, 0, err
	}
	inUse, timeWait, ok := parseSockstat(b)
	if !ok {
		return 0, 0, errors.New("parse /proc/net/sockstat: no TCP line")
	}
	return inUse, timeWait, nil
}

// parseSockstat reads "TCP: inuse N orphan N tw N alloc N mem N" from sockstat.
func parseSockstat(b []byte) (inUse, timeWait int, ok bool) {
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) == 0 || string(f[0]) != "TCP:" {
			continue
		}
		var haveUse, haveTW bool
		for i := 1; i+1 < len(f); i += 2 {
			v, err := strconv.Atoi(string(f[i+1]))
			if err != nil || v < 0 {
				return 0, 0, false
			}
			switch string(f[i]) {
			case "inuse":
				inUse, haveUse = v, true
			case "tw":
				timeWait, haveTW = v, true
			}
		}
		return inUse, timeWait, haveUse && haveTW
	}
	return 0, 0, false
}
