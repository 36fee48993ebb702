package loadgen

import (
	"context"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/srcaddr"
)

// Connections says how a run's connections were made.
type Connections struct {
	// Spread is how they were spread over source addresses.
	Spread srcaddr.Spread
	// ConnectRate is the pace of their first connects, per second; 0: all at once.
	ConnectRate float64
	// Reconnects counts the connects made after a connection's first: after the server
	// closed it, after a failure or a timeout, and retries of failed connects.
	Reconnects int64
}

// planSpread plans the run's spread over source addresses (srcaddr.Plan) and sets d to
// dial connection 0 from its planned address, so that an address this host cannot use
// is an error at once; it returns " from ADDR" for that error, or "".
func (e *engine) planSpread(ctx context.Context, d *net.Dialer) string {
	s := srcaddr.Plan(e.destination(ctx), e.nconns, e.cfg.PerAddr, e.cfg.LocalAddrs)
	e.made.Spread = s
	if e.nsOpen > 0 {
		e.made.ConnectRate = e.cfg.ConnectRate
	}
	for _, a := range s.Addrs {
		e.bind = append(e.bind, sockaddr(a))
	}
	src := s.For(0)
	if !src.IsValid() {
		return ""
	}
	d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
	d.Control = srcaddr.Control // bind() reserves no port: connect() picks it
	return " from " + src.String()
}

// destination is the address the target's name stands for (the first the resolver
// gives, as the dial tries first), or the zero Addr if it has none: all srcaddr.Plan
// needs to know is whether it is IPv4 loopback.
func (e *engine) destination(ctx context.Context) netip.Addr {
	host, _, _ := net.SplitHostPort(e.tgt.addr)
	if a, err := netip.ParseAddr(host); err == nil {
		return a
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}
	}
	return ips[0]
}

// sockaddr is a as a source address to bind, port 0.
func sockaddr(a netip.Addr) unix.Sockaddr {
	if a.Is4() {
		return &unix.SockaddrInet4{Addr: a.As4()}
	}
	return &unix.SockaddrInet6{Addr: a.As16()}
}

// bindSource binds socket fd of connection c to its planned source address, if it has
// one (connection n: address n mod k), without reserving a port: connect() picks the
// port for this destination only.
func (c *conn) bindSource(fd int) error {
	b := c.l.bind
	if len(b) == 0 {
		return nil
	}
	if err := srcaddr.NoPort(fd); err != nil {
		return err
	}
	return unix.Bind(fd, b[c.id%len(b)])
}

// connections is what the run's Result says of its connections, once the loops have
// ended.
func (e *engine) connections() Connections {
	m := e.made
	for _, l := range e.loops {
		for _, c := range l.conns {
			m.Reconnects += c.reconnects
		}
	}
	return m
}
