package journey

import (
	"net"
	"net/netip"
	"strconv"

	"github.com/onehost/onehost/internal/srcaddr"
)

// plan spreads the whole run's users (TotalUsers, numbered across processes and hosts)
// over source addresses; c has its defaults.
func (c Config) plan(tgt target) srcaddr.Spread {
	return srcaddr.Plan(tgt.ip(), c.TotalUsers, c.PerAddr, c.LocalAddrs)
}

// CheckPorts says which of the run's (source, server) pairs would pass the connect()
// cliff with the sockets this network namespace holds already to the server (the previous
// trials' TIME_WAIT among them): srcaddr.Check on the spread Run plans, for cfg.Users
// connections from this host. Call it before Run, once: it may read every socket of the
// namespace. Nil when cfg is not one Run takes or the URL's host is not a literal address
// or localhost.
func CheckPorts(cfg Config) []srcaddr.Crowded {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil
	}
	tgt, err := parseTarget(cfg.URL)
	if err != nil || !tgt.ip().IsValid() {
		return nil
	}
	_, p, _ := net.SplitHostPort(tgt.addr)
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return nil
	}
	s := cfg.plan(tgt)
	s.Conns = cfg.Users // this host's share, over the same addresses
	return srcaddr.Check(s, netip.AddrPortFrom(tgt.ip(), uint16(port)))
}
