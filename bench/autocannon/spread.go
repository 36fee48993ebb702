package main

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/onehost/onehost/internal/srcaddr"
)

// spreadLine is the one line that says how a run's connections were spread over source
// addresses: "connections: 50,000 over 10 source addresses (127.0.0.2–127.0.0.11), ≤ 5,000
// per pair". A plain run adds the pace of its first connects (rate, connects/s; 0: all at
// once) and its reconnects; reconnects nil leaves both out (`autocannon users`).
func spreadLine(s srcaddr.Report, rate float64, reconnects *int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "connections: %s", jsNumber(float64(s.Conns)))
	switch len(s.Addrs) {
	case 0:
		b.WriteString(" from the kernel's choice of source address")
	case 1:
		fmt.Fprintf(&b, " from source address %s", s.Addrs[0])
	default:
		fmt.Fprintf(&b, " over %d source addresses (%s), ≤ %s per pair", len(s.Addrs), addrList(s.Addrs), jsNumber(float64(s.MaxPerPair)))
	}
	if reconnects != nil {
		if rate > 0 {
			fmt.Fprintf(&b, ", opened at %s/s", jsNumber(rate))
		} else {
			b.WriteString(", opened all at once")
		}
		fmt.Fprintf(&b, ", %s reconnects", jsNumber(float64(*reconnects)))
	}
	b.WriteString("\n")
	return b.String()
}

// addrList names addresses briefly: "A–B" when each follows the one before, else the
// first three and a count.
func addrList(addrs []string) string {
	consecutive := true
	var prev netip.Addr
	for i, s := range addrs {
		a, err := netip.ParseAddr(s)
		if err != nil || (i > 0 && a != prev.Next()) {
			consecutive = false
			break
		}
		prev = a
	}
	switch {
	case consecutive:
		return addrs[0] + "–" + addrs[len(addrs)-1]
	case len(addrs) <= 4:
		return strings.Join(addrs, ", ")
	default:
		return fmt.Sprintf("%s, … %d more", strings.Join(addrs[:3], ", "), len(addrs)-3)
	}
}
