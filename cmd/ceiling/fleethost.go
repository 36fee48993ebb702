package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/onehost/onehost/internal/balancer"
	"github.com/onehost/onehost/internal/fleetspec"
)

// fleetHost is one -host of `ceiling fleet-config`.
type fleetHost struct {
	name, host string // host: an IP address, or a DNS name for HAProxy
	port       int
	flag       string // the flag's value as given, for errors
}

// parseFleetHosts reads every -host NAME=HOST:PORT (NAME= may be left out: hI, I the
// host's place from 0, as internal/balancer names them). The addresses are where the
// balancer finds each host: an IP address (IPv4 only for nft, whose table is `ip`) or,
// for HAProxy, a DNS name it resolves when it starts. Each error names the flag as given
// and the fix.
func parseFleetHosts(flags []string, ipv4Only bool) ([]fleetHost, error) {
	if len(flags) == 0 {
		return nil, fmt.Errorf("fleet-config: no -host: name each host behind the balancer, e.g. -host h1=10.0.0.1:3000 -host h2=10.0.0.2:3000")
	}
	hosts := make([]fleetHost, 0, len(flags))
	names, addrs := map[string]string{}, map[string]string{}
	for i, v := range flags {
		h, err := parseFleetHost(v, i, ipv4Only)
		if err != nil {
			return nil, fmt.Errorf("fleet-config: -host %s: %w", v, err)
		}
		if prev, ok := names[h.name]; ok {
			return nil, fmt.Errorf("fleet-config: -host %s: the name %s is taken already (-host %s): give each host a name of its own", v, h.name, prev)
		}
		addr := net.JoinHostPort(strings.ToLower(h.host), strconv.Itoa(h.port))
		if prev, ok := addrs[addr]; ok {
			return nil, fmt.Errorf("fleet-config: -host %s: %s is given already (-host %s): each host once, its own address", v, addr, prev)
		}
		names[h.name], addrs[addr] = v, v
		hosts = append(hosts, h)
	}
	return hosts, nil
}

// parseFleetHost reads one -host value, the i-th.
func parseFleetHost(v string, i int, ipv4Only bool) (fleetHost, error) {
	h := fleetHost{flag: v, name: "h" + strconv.Itoa(i)}
	addr := v
	if name, rest, ok := strings.Cut(v, "="); ok {
		if !balancer.ValidName(name) {
			return h, fmt.Errorf("name %q: use letters, digits, '-', '_' and '.' (NAME=HOST:PORT, e.g. h1=10.0.0.1:3000)", name)
		}
		h.name, addr = name, rest
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		switch {
		case strings.Count(addr, ":") > 1 && !strings.HasPrefix(addr, "["):
			return h, fmt.Errorf("an IPv6 address goes in brackets, the port after them: %s=[IPV6]:PORT, e.g. %s=[fd00::1]:3000", h.name, h.name)
		case strings.Contains(err.Error(), "missing port"):
			return h, fmt.Errorf("no port: write %s=%s:3000, the port of that host's `supervisor run -listen`", h.name, addr)
		}
		return h, fmt.Errorf("want NAME=HOST:PORT, e.g. %s=10.0.0.1:3000", h.name)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return h, fmt.Errorf("port %q: want 1-65535, the port of that host's `supervisor run -listen`", port)
	}
	h.port = p
	if host == "" {
		return h, fmt.Errorf("no address: write %s=ADDRESS:%d with the host's own address", h.name, p)
	}
	ip := net.ParseIP(host)
	switch {
	case ip != nil && ip.IsUnspecified():
		return h, fmt.Errorf("%s is where a host listens, not where the balancer finds it: give the host's own address", host)
	case ip != nil && ipv4Only && ip.To4() == nil:
		return h, fmt.Errorf("%s: the nftables balancer (table ip) takes IPv4 addresses only", host)
	case ip == nil && ipv4Only:
		return h, fmt.Errorf("%q is not an IPv4 address: the nftables balancer takes the host's IPv4 address, not a name", host)
	case ip == nil && !validDNSName(host):
		return h, fmt.Errorf("%q is neither an IP address nor a DNS name", host)
	}
	h.host = host
	if ip != nil {
		h.host = ip.String() // one spelling, so that a duplicate is seen
	}
	return h, nil
}

// validDNSName: a host name as fleetspec.ValidHostname takes it (one trailing '.'
// allowed), the last label not all digits (10.0.0.300 is a mistyped address, not a name).
func validDNSName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if !fleetspec.ValidHostname(s) {
		return false
	}
	last := s[strings.LastIndexByte(s, '.')+1:]
	return strings.Trim(last, "0123456789") != ""
}
