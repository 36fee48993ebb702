package procstat

import (
	"net"
	"net/netip"
	"os"
	"testing"
)

func TestParseListeners(t *testing.T) {
	tcp := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 0100007F:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 100 0 0 10 0\n" +
		"   1: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1 0000000000000000 100 0 0 10 0\n" +
		"   2: 0100007F:0BB8 0100007F:D1F2 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0000000000000000 20 4 30 10 -1\n"
	tcp6 := "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 00000000000000000000000001000000:0BB8 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 444 1 0000000000000000 100 0 0 10 0\n" +
		"   1: 0000000000000000FFFF00000100007F:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 555 1 0000000000000000 100 0 0 10 0\n"
	tests := []struct {
		name   string
		table  string
		inodes map[uint64]struct{}
		want   []string
	}{
		{"ipv4 listeners only, every inode", tcp, nil, []string{"127.0.0.1:3000", "0.0.0.0:8080"}},
		{"ipv4, the process's inodes", tcp, map[uint64]struct{}{222: {}, 333: {}}, []string{"0.0.0.0:8080"}},
		{"ipv6 loopback and v4-mapped", tcp6, nil, []string{"[::1]:3000", "127.0.0.1:80"}},
		{"garbage", "header\nnot a line\n 0: zz:zz 0 0A a b c d e 12\n", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, l := range parseListeners([]byte(tc.table), tc.inodes) {
				got = append(got, l.Addr.String())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func FuzzParseListeners(f *testing.F) {
	f.Add([]byte("h\n 0: 0100007F:0BB8 00000000:0000 0A 0:0 0:0 0 0 0 111 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) { parseListeners(b, nil) })
}

// TestListenersOwnProcess: a socket this process listens on is found, with its address.
func TestListenersOwnProcess(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	want := netip.MustParseAddrPort(ln.Addr().String())
	ls, err := Listeners("", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if l.Addr == want && l.Inode != 0 {
			return
		}
	}
	t.Errorf("Listeners(self) = %v, want %v among them", ls, want)
}

func TestCountPairs(t *testing.T) {
	dst := netip.MustParseAddrPort("127.0.0.1:3000")
	tcp := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 0100007F:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n" + // the listener
		"   1: 0200007F:D1F2 0100007F:0BB8 01 00000000:00000000 00:00000000 00000000     0        0 333 1\n" +
		"   2: 0200007F:D1F4 0100007F:0BB8 06 00000000:00000000 03:00001000 00000000     0        0 0 3\n" +
		"   3: 0300007F:D1F4 0100007F:0BB8 06 00000000:00000000 03:00001000 00000000     0        0 0 3\n" +
		"   4: 0200007F:D1F6 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 444 1\n" + // another port
		"   5: 0100007F:0BB8 0200007F:D1F2 01 00000000:00000000 00:00000000 00000000     0        0 555 1\n" // the server's end
	tests := []struct {
		name  string
		table string
		want  map[netip.Addr]PairCount
	}{
		{"by local address and state", tcp, map[netip.Addr]PairCount{
			netip.MustParseAddr("127.0.0.2"): {TimeWait: 1, Other: 1},
			netip.MustParseAddr("127.0.0.3"): {TimeWait: 1},
		}},
		{"garbage", "header\nnot a line\n 0: zz:zz 0100007F:0BB8 01\n", map[netip.Addr]PairCount{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := make(map[netip.Addr]PairCount)
			countPairs([]byte(tc.table), dst, got)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for a, c := range tc.want {
				if got[a] != c {
					t.Errorf("%v: got %+v, want %+v", a, got[a], c)
				}
			}
		})
	}
}

func FuzzCountPairs(f *testing.F) {
	f.Add([]byte("h\n 1: 0200007F:D1F2 0100007F:0BB8 06 0:0 0:0 0 0 0 333 1\n"))
	dst := netip.MustParseAddrPort("127.0.0.1:3000")
	f.Fuzz(func(t *testing.T, b []byte) { countPairs(b, dst, make(map[netip.Addr]PairCount)) })
}

// TestSocketsToOwnConnection: a connection this process holds is counted under its local
// address.
func TestSocketsToOwnConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := SocketsTo("", netip.MustParseAddrPort(ln.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	local := netip.MustParseAddrPort(c.LocalAddr().String()).Addr()
	if got[local].Other < 1 {
		t.Errorf("SocketsTo = %v, want the connection from %v", got, local)
	}
}

func TestParseSockstat(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        string
		inUse, tw int
		ok        bool
	}{
		{"linux", "sockets: used 148\nTCP: inuse 5 orphan 0 tw 12001 alloc 29004 mem 1\nUDP: inuse 1 mem 0\n", 5, 12001, true},
		{"no tw field", "TCP: inuse 5 orphan 0\n", 0, 0, false},
		{"bad number", "TCP: inuse x tw 3\n", 0, 0, false},
		{"no TCP line", "UDP: inuse 1\n", 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inUse, tw, ok := parseSockstat([]byte(tc.in))
			if ok != tc.ok || ok && (inUse != tc.inUse || tw != tc.tw) {
				t.Errorf("got %d, %d, %v; want %d, %d, %v", inUse, tw, ok, tc.inUse, tc.tw, tc.ok)
			}
		})
	}
	if _, _, err := TCPCounts(""); err != nil {
		t.Errorf("TCPCounts on this machine: %v", err)
	}
}

func FuzzParseSockstat(f *testing.F) {
	f.Add([]byte("TCP: inuse 5 orphan 0 tw 12001 alloc 29004 mem 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) { parseSockstat(b) })
}
