package srcaddr

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/onehost/onehost/internal/procstat"
)

func TestPerAddr(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		want          int
	}{
		{"linux default", "32768\t60999\n", 5646},
		{"widened", "1024 65535\n", 12902},
		{"garbage", "x y\n", DefaultPerAddr},
		{"reversed", "60999 32768\n", DefaultPerAddr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "range")
			os.WriteFile(p, []byte(tc.content), 0o644)
			if got := PerAddr(p); got != tc.want {
				t.Errorf("PerAddr = %d, want %d", got, tc.want)
			}
		})
	}
	if got := PerAddr(filepath.Join(t.TempDir(), "missing")); got != DefaultPerAddr {
		t.Errorf("missing file: %d, want %d", got, DefaultPerAddr)
	}
}

func TestPlan(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	given := []netip.Addr{netip.MustParseAddr("10.0.0.5")}
	for _, tc := range []struct {
		name    string
		dst     netip.Addr
		conns   int
		given   []netip.Addr
		addrs   []string
		perPair int
		auto    bool
	}{
		{"few on loopback: kernel's choice", lo, 5000, nil, nil, 5000, false},
		{"16,000 on loopback", lo, 16000, nil, []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}, 4000, true},
		{"50,000 on loopback", lo, 50000, nil, []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8", "127.0.0.9", "127.0.0.10", "127.0.0.11"}, 5000, true},
		{"mapped loopback", netip.MustParseAddr("::ffff:127.0.0.1"), 6000, nil, []string{"127.0.0.2", "127.0.0.3"}, 3000, true},
		{"not loopback", netip.MustParseAddr("10.1.2.3"), 50000, nil, nil, 50000, false},
		{"unknown destination", netip.Addr{}, 50000, nil, nil, 50000, false},
		{"given wins", lo, 50000, given, []string{"10.0.0.5"}, 50000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Plan(tc.dst, tc.conns, 5000, tc.given)
			var got []string
			for _, a := range s.Addrs {
				got = append(got, a.String())
			}
			if !slices.Equal(got, tc.addrs) || s.MaxPerPair() != tc.perPair || s.Auto != tc.auto {
				t.Errorf("Plan = %v, %d per pair, auto %v; want %v, %d, %v", got, s.MaxPerPair(), s.Auto, tc.addrs, tc.perPair, tc.auto)
			}
		})
	}
}

func TestParseList(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{"", "[]", false},
		{"127.0.0.2-127.0.0.4", "[127.0.0.2 127.0.0.3 127.0.0.4]", false},
		{"127.0.0.2 - 127.0.0.2", "[127.0.0.2]", false},
		{"127.0.0.255-127.0.1.1", "[127.0.0.255 127.0.1.0 127.0.1.1]", false},
		{"127.0.0.2,127.0.0.7", "[127.0.0.2 127.0.0.7]", false},
		{"127.0.0.4-127.0.0.2", "", true},
		{"127.0.0.1-::1", "", true},
		{"10.0.0.0-10.1.0.0", "", true},
		{"localhost", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseList(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseList error = %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && fmt.Sprint(got) != tc.want {
				t.Errorf("ParseList = %v, want %v", got, tc.want)
			}
		})
	}
}

// FuzzParseList: any input gives addresses or an error, never a panic, and never more
// than the 65,536 addresses a range may name.
func FuzzParseList(f *testing.F) {
	for _, s := range []string{"", "127.0.0.2-127.0.0.9", "127.0.0.2,127.0.0.7", "::1-::3", "10.0.0.0-10.1.0.0", "a-b-c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		addrs, err := ParseList(s)
		if err == nil && len(addrs) > 1<<16 && !strings.Contains(s, ",") {
			t.Errorf("ParseList(%q): %d addresses", s, len(addrs))
		}
	})
}

func TestCheckPorts(t *testing.T) {
	veth := netip.MustParseAddrPort("10.232.0.1:38200")
	lo := netip.MustParseAddrPort("127.0.0.1:38200")
	a2, a3 := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")
	host := netip.MustParseAddr("10.232.0.2")
	for _, tc := range []struct {
		name    string
		s       Spread
		dst     netip.AddrPort
		held    map[netip.Addr]procstat.PairCount
		twReuse int
		want    []string // the crowded pairs: "src planned+timewait+inuse"
	}{
		// The two-host search of docs/bench.md: 6,000 users after a trial of 8,000 and
		// one of 4,000 within the minute, over a veth, one source address.
		{"remote, after two trials", Spread{Conns: 6000}, veth,
			map[netip.Addr]procstat.PairCount{host: {TimeWait: 12001}}, 2, []string{"invalid IP 6000+12001+0"}},
		{"remote, the same with tcp_tw_reuse=1", Spread{Conns: 6000}, veth,
			map[netip.Addr]procstat.PairCount{host: {TimeWait: 12001}}, 1, nil},
		{"remote, a first trial", Spread{Conns: 14000}, veth, nil, 2, nil},
		{"remote, one trial too many", Spread{Conns: 14117}, veth, nil, 2, []string{"invalid IP 14117+0+0"}},
		{"loopback reuses TIME_WAIT by default", Spread{Conns: 10000}, lo,
			map[netip.Addr]procstat.PairCount{netip.MustParseAddr("127.0.0.1"): {TimeWait: 20000}}, 2, nil},
		{"loopback, established connections count", Spread{Conns: 10000}, lo,
			map[netip.Addr]procstat.PairCount{netip.MustParseAddr("127.0.0.1"): {Other: 5000}}, 2, []string{"invalid IP 10000+0+5000"}},
		{"spread: only the crowded address", Spread{Conns: 10001, Addrs: []netip.Addr{a2, a3}}, lo,
			map[netip.Addr]procstat.PairCount{a3: {Other: 9200}}, 0, []string{"127.0.0.3 5000+0+9200"}},
		{"spread: TIME_WAIT counts with tcp_tw_reuse=0", Spread{Conns: 10001, Addrs: []netip.Addr{a2, a3}}, lo,
			map[netip.Addr]procstat.PairCount{a2: {TimeWait: 9200}}, 0, []string{"127.0.0.2 5001+9200+0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range CheckPorts(tc.s, tc.dst, tc.held, 32768, 60999, tc.twReuse) {
				got = append(got, fmt.Sprintf("%v %d+%d+%d", c.Src, c.Planned, c.TimeWait, c.InUse))
				if c.EvenPorts() != 14116 || !strings.Contains(c.String(), "tcp_tw_reuse=1") {
					t.Errorf("%+v: even ports %d, text %q", c, c.EvenPorts(), c)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("crowded %v, want %v", got, tc.want)
			}
		})
	}
}
