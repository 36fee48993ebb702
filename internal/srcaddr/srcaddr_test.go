package srcaddr

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
