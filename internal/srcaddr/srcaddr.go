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
	if rangeFile == "" {
		rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"
	}
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return DefaultPerAddr
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return DefaultPerAddr
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || hi <= lo {
		return DefaultPerAddr
	}
	return max((hi-lo+1)/2*4/10, 1)
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
