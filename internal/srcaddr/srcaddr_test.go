package srcaddr

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
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
