// Package linkshape emulates a NIC on a loopback interface: it brings a network
// namespace's lo up and puts a token-bucket filter (tbf) qdisc on it through rtnetlink,
// as `ip link set lo up` and `tc qdisc replace dev lo root tbf rate R burst B latency L`
// would, so the host needs no iproute2.
//
// It changes the network namespace of the calling process: call it only inside a private
// one (a child started with CLONE_NEWNET), never in the host's, whose loopback other
// programs use. Needs CAP_NET_ADMIN there (root, or the owner of the namespace).
//
// A qdisc on lo shapes every packet that leaves through lo, and on loopback every packet
// does: requests, responses and ACKs share the one token bucket, unlike a full-duplex NIC
// whose transmit side carries only the responses. Callers account for it by counting
// lo's bytes (both directions) against the rate.
package linkshape

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// TBF is a token-bucket filter's parameters. Zero fields take the defaults documented.
type TBF struct {
	// BitsPerS is the rate (required): 100e6 for 100 Mbit/s.
	BitsPerS float64
	// Burst is the bucket in bytes; default max(256 KiB, 4 ms at the rate). It must hold
	// one of lo's GSO packets (up to 64 KiB), or tbf drops them.
	Burst int
	// Latency bounds the queue: limit = rate × Latency + Burst bytes. Default 50 ms.
	Latency time.Duration
}

func (t TBF) withDefaults() TBF {
	if t.Burst <= 0 {
		t.Burst = max(256<<10, int(t.BitsPerS/8*0.004))
	}
	if t.Latency <= 0 {
		t.Latency = 50 * time.Millisecond
	}
	return t
}

// Limit is the queue's byte limit.
func (t TBF) Limit() int {
	t = t.withDefaults()
	return int(t.BitsPerS/8*t.Latency.Seconds()) + t.Burst
}

// TC is the equivalent tc command for device dev.
func (t TBF) TC(dev string) string {
	t = t.withDefaults()
	return fmt.Sprintf("tc qdisc replace dev %s root tbf rate %.0fbit burst %d limit %d", dev, t.BitsPerS, t.Burst, t.Limit())
}

// Netlink and tc constants (linux/rtnetlink.h, linux/pkt_sched.h).
const (
	tcaKind       = 1
	tcaOptions    = 2
	tcaTBFParms   = 1
	tcaTBFRate64  = 4
	tcaTBFBurst   = 6
	tcHRoot       = 0xFFFFFFFF
	linkEthernet  = 1
	sizeofTcMsg   = 20
	sizeofTBFQopt = 36
	pschedShift   = 6 // psched ticks are 64 ns
)

// LoopbackUp sets lo up in the calling process's network namespace.
func LoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: read flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

// Replace puts t on dev as its root qdisc, replacing whatever was there.
func Replace(dev string, t TBF) error {
	t = t.withDefaults()
	if !(t.BitsPerS >= 8) || math.IsInf(t.BitsPerS, 0) {
		return fmt.Errorf("shape %s: rate %v bit/s: want at least 8", dev, t.BitsPerS)
	}
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return fmt.Errorf("shape %s: %w", dev, err)
	}
	msg := encodeTBF(ifi.Index, t)
	if _, err := request(unix.RTM_NEWQDISC, unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_REPLACE, msg); err != nil {
		return fmt.Errorf("shape %s: %s: %w", dev, t.TC(dev), err)
	}
	return nil
}

// encodeTBF is the RTM_NEWQDISC payload: a tcmsg and its attributes.
func encodeTBF(ifindex int, t TBF) []byte {
	bytesPerS := t.BitsPerS / 8
	rate32 := uint32(math.MaxUint32)
	if bytesPerS < math.MaxUint32 {
		rate32 = uint32(bytesPerS)
	}
	burstNS := float64(t.Burst) / bytesPerS * 1e9
	qopt := make([]byte, sizeofTBFQopt)
	ne := binary.NativeEndian
	// struct tc_ratespec rate: cell_log u8, linklayer u8, overhead u16, cell_align s16,
	// mpu u16, rate u32. With a link layer given the kernel needs no rate table.
	qopt[1] = linkEthernet
	ne.PutUint32(qopt[8:], rate32)
	// peakrate (12 bytes) stays zero: no peak rate.
	ne.PutUint32(qopt[24:], uint32(t.Limit()))
	ne.PutUint32(qopt[28:], uint32(min(burstNS/(1<<pschedShift), math.MaxUint32))) // buffer, psched ticks
	var opts []byte
	opts = appendAttr(opts, tcaTBFParms, qopt)
	if rate32 == math.MaxUint32 {
		v := make([]byte, 8)
		ne.PutUint64(v, uint64(bytesPerS))
		opts = appendAttr(opts, tcaTBFRate64, v)
	}
	b := make([]byte, 4)
	ne.PutUint32(b, uint32(t.Burst))
	opts = appendAttr(opts, tcaTBFBurst, b)

	msg := make([]byte, sizeofTcMsg)
	msg[0] = unix.AF_UNSPEC
	ne.PutUint32(msg[4:], uint32(int32(ifindex)))
	ne.PutUint32(msg[8:], 1<<16) // handle 1:
	ne.PutUint32(msg[12:], tcHRoot)
	msg = appendAttr(msg, tcaKind, []byte("tbf\x00"))
	msg = appendAttr(msg, tcaOptions, opts)
	return msg
}

// appendAttr appends one rtattr, padded to 4 bytes.
func appendAttr(b []byte, typ uint16, data []byte) []byte {
	var h [4]byte
	binary.NativeEndian.PutUint16(h[0:], uint16(4+len(data)))
	binary.NativeEndian.PutUint16(h[2:], typ)
	b = append(b, h[:]...)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// Qdisc is one qdisc as the kernel reports it.
type Qdisc struct {
	Ifindex int
	Handle  uint32
	Parent  uint32
	Kind    string
	// For tbf: the rate in bytes per second and the queue limit in bytes.
	RateBytesPerS uint64
	Limit         uint32
}

// Show lists the qdiscs of dev.
func Show(dev string) ([]Qdisc, error) {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return nil, fmt.Errorf("show qdiscs of %s: %w", dev, err)
	}
	msg := make([]byte, sizeofTcMsg)
	binary.NativeEndian.PutUint32(msg[4:], uint32(int32(ifi.Index)))
	replies, err := request(unix.RTM_GETQDISC, unix.NLM_F_DUMP, msg)
	if err != nil {
		return nil, fmt.Errorf("show qdiscs of %s: %w", dev, err)
	}
	var out []Qdisc
	for _, r := range replies {
		q, err := ParseQdisc(r)
		if err != nil {
			return nil, fmt.Errorf("show qdiscs of %s: %w", dev, err)
		}
		if q.Ifindex == ifi.Index {
			out = append(out, q)
		}
	}
	return out, nil
}

// ParseQdisc decodes the payload of one RTM_NEWQDISC message (a tcmsg and attributes).
func ParseQdisc(b []byte) (Qdisc, error) {
	var q Qdisc
	if len(b) < sizeofTcMsg {
		return q, errors.New("parse qdisc: short tcmsg")
	}
	ne := binary.NativeEndian
	q.Ifindex = int(int32(ne.Uint32(b[4:])))
	q.Handle, q.Parent = ne.Uint32(b[8:]), ne.Uint32(b[12:])
	attrs, err := parseAttrs(b[sizeofTcMsg:])
	if err != nil {
		return q, err
	}
	q.Kind = strings.TrimRight(string(attrs[tcaKind]), "\x00")
	if opts, ok := attrs[tcaOptions]; ok && q.Kind == "tbf" {
		o, err := parseAttrs(opts)
		if err != nil {
			return q, err
		}
		if p := o[tcaTBFParms]; len(p) >= sizeofTBFQopt {
			q.RateBytesPerS = uint64(ne.Uint32(p[8:]))
			q.Limit = ne.Uint32(p[24:])
		}
		if r := o[tcaTBFRate64]; len(r) >= 8 {
			q.RateBytesPerS = ne.Uint64(r)
		}
	}
	return q, nil
}

// parseAttrs splits rtattrs by type (the last of a type wins).
func parseAttrs(b []byte) (map[uint16][]byte, error) {
	out := make(map[uint16][]byte)
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if l < 4 || l > len(b) {
			return nil, fmt.Errorf("parse netlink attribute: length %d of %d bytes", l, len(b))
		}
		out[typ] = b[4:l]
		adv := (l + 3) &^ 3
		if adv > len(b) {
			adv = len(b)
		}
		b = b[adv:]
	}
	return out, nil
}

// request sends one rtnetlink request and returns the payloads of the replies (none for
// an acknowledged change).
func request(typ uint16, flags uint16, payload []byte) ([][]byte, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("bind netlink: %w", err)
	}
	tv := unix.NsecToTimeval((5 * time.Second).Nanoseconds())
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	const seq = 1
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(payload))
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(unix.SizeofNlMsghdr+len(payload)))
	ne.PutUint16(msg[4:], typ)
	ne.PutUint16(msg[6:], flags|unix.NLM_F_REQUEST)
	ne.PutUint32(msg[8:], seq)
	msg = append(msg, payload...)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("send netlink request: %w", err)
	}
	var out [][]byte
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("read netlink reply: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("parse netlink reply: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return nil, errors.New("parse netlink reply: short error")
				}
				if e := int32(ne.Uint32(m.Data)); e != 0 {
					return nil, unix.Errno(-e)
				}
				return out, nil // the acknowledgement
			default:
				out = append(out, m.Data)
			}
		}
		if flags&unix.NLM_F_DUMP == 0 && flags&unix.NLM_F_ACK == 0 {
			return out, nil
		}
	}
}
