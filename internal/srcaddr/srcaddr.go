// Package srcaddr chooses the source addresses a load generator's connections are spread
// over, so that no (source, destination) pair holds enough connections to reach Linux's
// connect() cliff.
//
// Why: since Linux 4.2 connect() picks even ephemeral ports first and scans the used half
// of the range before it falls back to odd ones (__inet_hash_connect). With the default
// range (32768–60999) and one source address, once ~14,000 connections to one server
// ip:port exist, each new connect() costs 1.3–1.6 ms of kernel CPU instead of 25–60 µs
// (docs/bench.md, "The connect() cliff"). Each source address has its own port space, and
// the whole of 127.0.0.0/8 is loopback, so a loopback target gets as many 127.0.0.x
// sources as keep every pair under PerAddr connections. Elsewhere the caller gives the
// addresses (-local-addrs). Sockets are bound with IP_BIND_ADDRESS_NO_PORT so that bind()
// reserves no port: the port is chosen at connect() time, per destination.
//
// Non-goals: changing the machine's sysctls (ip_local_port_range), IPv6 loopback (::1 is
// one address).
package srcaddr

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/procstat"
)

// Spread is how a run's connections are spread over source addresses.
type Spread struct {
	// Addrs are the source addresses, used round-robin by connection number. Empty: the
	// kernel's choice (one address per destination).
	Addrs []netip.Addr
	// Conns is the number of connections planned.
	Conns int
	// Auto is true when the addresses were chosen here, not given.
	Auto bool
}

// For returns the source address of connection i, or the zero Addr for the kernel's choice.
func (s Spread) For(i int) netip.Addr {
	if len(s.Addrs) == 0 {
		return netip.Addr{}
	}
	return s.Addrs[i%len(s.Addrs)]
}

// MaxPerPair is the most connections one (source, destination) pair holds.
func (s Spread) MaxPerPair() int {
	n := max(len(s.Addrs), 1)
	return (s.Conns + n - 1) / n
}

// Report is Spread's JSON form.
type Report struct {
	Addrs      []string `json:"addrs"`
	Auto       bool     `json:"auto"`
	Conns      int      `json:"connections"`
	MaxPerPair int      `json:"max_per_pair"`
}

// Report returns the JSON form.
func (s Spread) Report() Report {
	r := Report{Addrs: []string{}, Auto: s.Auto, Conns: s.Conns, MaxPerPair: s.MaxPerPair()}
	for _, a := range s.Addrs {
		r.Addrs = append(r.Addrs, a.String())
	}
	return r
}

// DefaultPerAddr is PerAddr's answer when the port range cannot be read: 40 % of the even
// half of Linux's default range 32768–60999.
const DefaultPerAddr = 5_000

// PerAddr is how many connections one pair may hold and stay well under the cliff: 40 %
// of the even half of the ephemeral range in rangeFile ("" reads
// /proc/sys/net/ipv4/ip_local_port_range).
func PerAddr(rangeFile string) int {
	lo, hi, ok := portRange(rangeFile)
	if !ok {
		return DefaultPerAddr
	}
	return max((hi-lo+1)/2*4/10, 1)
}

// portRange reads the ephemeral port range ("" reads /proc/sys/net/ipv4/ip_local_port_range).
func portRange(rangeFile string) (lo, hi int, ok bool) {
	if rangeFile == "" {
		rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"
	}
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || hi <= lo {
		return 0, 0, false
	}
	return lo, hi, true
}

// Crowded is a (source, destination) pair that a run would push past the connect() cliff:
// its planned connections and the ports the pair holds already come to more than the even
// half of the ephemeral range, so each connect() scans the used ports.
type Crowded struct {
	Src      netip.Addr     // the zero Addr: the kernel's choice
	Dst      netip.AddrPort //
	Planned  int            // connections the run opens from Src
	TimeWait int            // the pair's ports in TIME_WAIT that connect() may not take again
	InUse    int            // the pair's sockets in other states
	Lo, Hi   int            // the ephemeral port range
}

// EvenPorts is the even half of the range, where connect() looks first.
func (c Crowded) EvenPorts() int { return evenPorts(c.Lo, c.Hi) }

func evenPorts(lo, hi int) int { return (hi - lo + 2) / 2 }

// twReusable says whether connect() may take a TIME_WAIT port to dst again: with
// net.ipv4.tcp_tw_reuse 1, or 2 (Linux's default) on loopback.
func twReusable(twReuse int, dst netip.AddrPort) bool {
	return twReuse == 1 || twReuse == 2 && dst.Addr().Unmap().IsLoopback()
}

func (c Crowded) String() string {
	src := "the kernel's source address"
	if c.Src.IsValid() {
		src = c.Src.String()
	}
	return fmt.Sprintf("%d connections from %s to %s on top of %d of that pair's ports in TIME_WAIT and %d in use: "+
		"%d, more than the %d even ports of the ephemeral range %d-%d, so each connect() scans the used ports "+
		"(the connect() cliff, docs/bench.md); set net.ipv4.tcp_tw_reuse=1, widen net.ipv4.ip_local_port_range, "+
		"spread over -local-addrs, or wait out TIME_WAIT (60 s)",
		c.Planned, src, c.Dst, c.TimeWait, c.InUse, c.Planned+c.TimeWait+c.InUse, c.EvenPorts(), c.Lo, c.Hi)
}

// CheckPorts returns the pairs of s's connections to dst whose planned connections plus
// the sockets the pair holds already (held, per local address: procstat.SocketsTo) exceed
// the even half of the ephemeral range [lo, hi]. TIME_WAIT sockets count unless twReuse
// (net.ipv4.tcp_tw_reuse) lets connect() take their ports: 1, or 2 on a loopback dst.
// They matter between the trials of a search: each trial's closed connections hold their
// ports for 60 s, and a search on a non-loopback path from one source address reaches the
// cliff with half the connections it would hold alone. With no addresses in s (the
// kernel's choice: one source per destination) every socket to dst counts.
func CheckPorts(s Spread, dst netip.AddrPort, held map[netip.Addr]procstat.PairCount, lo, hi, twReuse int) []Crowded {
	if hi <= lo || s.Conns <= 0 {
		return nil
	}
	reuse := twReusable(twReuse, dst)
	c0 := Crowded{Dst: dst, Lo: lo, Hi: hi}
	var out []Crowded
	check := func(c Crowded, pc procstat.PairCount) {
		if !reuse {
			c.TimeWait = pc.TimeWait
		}
		c.InUse = pc.Other
		if c.Planned+c.TimeWait+c.InUse > evenPorts(lo, hi) {
			out = append(out, c)
		}
	}
	if len(s.Addrs) == 0 {
		var sum procstat.PairCount
		for _, pc := range held {
			sum.TimeWait += pc.TimeWait
			sum.Other += pc.Other
		}
		c := c0
		c.Planned = s.Conns
		check(c, sum)
		return out
	}
	n := len(s.Addrs)
	for j, a := range s.Addrs {
		c := c0
		c.Src, c.Planned = a, (s.Conns-j+n-1)/n // connection i goes to Addrs[i%n]
		check(c, held[a])
	}
	return out
}

// CheckMin is the fewest connections per pair Check looks at: below it even the cliff's
// 1.3–1.6 ms per connect() costs a run little, and the check itself (a read of every
// socket of the namespace, slow where tens of thousands are open) would cost more.
const CheckMin = 1000

// Check is CheckPorts on this machine: its port range, its net.ipv4.tcp_tw_reuse and the
// sockets to dst in this network namespace. It may read every socket of the namespace, so
// it is for once per run; it does so only where /proc/net/sockstat's counts leave room for
// a crowded pair, and only for CheckMin or more connections per pair. Where /proc cannot be
// read it says nothing.
func Check(s Spread, dst netip.AddrPort) []Crowded {
	if s.MaxPerPair() < CheckMin {
		return nil
	}
	lo, hi, ok := portRange("")
	if !ok {
		return nil
	}
	twReuse := 2 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_tw_reuse"); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			twReuse = v
		}
	}
	if inUse, tw, err := procstat.TCPCounts(""); err == nil {
		held := inUse
		if !twReusable(twReuse, dst) {
			held += tw
		}
		if s.MaxPerPair()+held <= evenPorts(lo, hi) {
			return nil // the whole namespace holds too few sockets for any pair to be crowded
		}
	}
	held, err := procstat.SocketsTo("", dst)
	if err != nil {
		return nil
	}
	return CheckPorts(s, dst, held, lo, hi, twReuse)
}

// Plan spreads conns connections to dst. Given addresses are used as they are; with none,
// a loopback IPv4 dst whose conns exceed perAddr gets 127.0.0.2, 127.0.0.3, … (as many as
// keep each pair at or under perAddr; perAddr <= 0 means PerAddr("")); any other dst gets
// the kernel's choice.
func Plan(dst netip.Addr, conns, perAddr int, given []netip.Addr) Spread {
	s := Spread{Conns: conns}
	if len(given) > 0 {
		s.Addrs = given
		return s
	}
	if perAddr <= 0 {
		perAddr = PerAddr("")
	}
	dst = dst.Unmap()
	if !dst.Is4() || !dst.IsLoopback() || conns <= perAddr {
		return s
	}
	n := min((conns+perAddr-1)/perAddr, 250)
	a := netip.AddrFrom4([4]byte{127, 0, 0, 2})
	for range n {
		s.Addrs = append(s.Addrs, a)
		a = a.Next()
	}
	s.Auto = true
	return s
}

// NoPort sets IP_BIND_ADDRESS_NO_PORT on fd: a later bind() to a source address with port
// 0 then reserves no port, and connect() chooses one for the destination (Linux 4.2).
func NoPort(fd int) error {
	return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
}

// Control is a net.Dialer.Control that sets IP_BIND_ADDRESS_NO_PORT.
func Control(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) { serr = NoPort(int(fd)) }); err != nil {
		return err
	}
	return serr
}

// ParseList reads a -local-addrs value: "A-B" (every address from A to B), "A,B,…" or ""
// (none).
func ParseList(s string) ([]netip.Addr, error) {
	if s == "" {
		return nil, nil
	}
	if from, to, ok := strings.Cut(s, "-"); ok {
		a, err := netip.ParseAddr(strings.TrimSpace(from))
		if err != nil {
			return nil, err
		}
		b, err := netip.ParseAddr(strings.TrimSpace(to))
		if err != nil {
			return nil, err
		}
		if a.BitLen() != b.BitLen() || b.Less(a) {
			return nil, fmt.Errorf("%q: want a range from a lower to a higher address of one family", s)
		}
		var out []netip.Addr
		for x := a; ; x = x.Next() {
			out = append(out, x)
			if x == b {
				return out, nil
			}
			if len(out) >= 1<<16 {
				return nil, fmt.Errorf("%q: more than 65,536 addresses", s)
			}
		}
	}
	var out []netip.Addr
	for _, f := range strings.Split(s, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}
