package steering

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// newGroup makes a group or skips the test where the kernel refuses eBPF (CI containers
// without CAP_BPF): the fallback is the hash, which other tests cover.
func newGroup(t *testing.T, size int) *Group {
	t.Helper()
	g, err := NewGroup(size)
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("eBPF steering refused here, the supervisor would fall back to the hash: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// listeners opens n sockets of one SO_REUSEPORT group on a free loopback port.
func listeners(t *testing.T, n int) []*net.TCPListener {
	t.Helper()
	var lns []*net.TCPListener
	addr := "127.0.0.1:0"
	for range n {
		ln, err := Listen(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		addr = ln.Addr().String()
		lns = append(lns, ln)
	}
	return lns
}

// added opens n sockets of one group and puts socket i at position i of g.
func added(t *testing.T, g *Group, n int) []*net.TCPListener {
	t.Helper()
	lns := listeners(t, n)
	for i, ln := range lns {
		if err := g.Add(i, ln); err != nil {
			t.Fatal(err)
		}
	}
	return lns
}

// dial opens n connections to addr and keeps them open until the test ends.
func dial(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	var cs []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	return cs
}

// drain accepts what each listener's queue holds and returns the counts. The handshakes
// completed in the kernel before dial returned, so a short deadline finds them all.
func drain(t *testing.T, lns []*net.TCPListener) ([]int, [][]net.Conn) {
	t.Helper()
	counts := make([]int, len(lns))
	conns := make([][]net.Conn, len(lns))
	for i, ln := range lns {
		for {
			ln.SetDeadline(time.Now().Add(50 * time.Millisecond))
			c, err := ln.Accept()
			if err != nil {
				break
			}
			t.Cleanup(func() { c.Close() })
			counts[i]++
			conns[i] = append(conns[i], c)
		}
	}
	return counts, conns
}

func TestRoundRobin(t *testing.T) {
	tests := []struct {
		name    string
		sockets int
		live    []int
		conns   int
		want    []int
	}{
		{"8 connections on 2 sockets", 2, []int{0, 1}, 8, []int{4, 4}},
		{"5 connections on 4 sockets", 4, []int{0, 1, 2, 3}, 5, nil}, // 2/1/1/1 in some order
		{"a socket out of the list gets none", 3, []int{0, 2}, 6, []int{3, 0, 3}},
		{"one live socket takes all", 2, []int{1}, 5, []int{0, 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newGroup(t, 8)
			lns := added(t, g, tc.sockets)
			if err := g.SetLive(tc.live); err != nil {
				t.Fatal(err)
			}
			dial(t, lns[0].Addr().String(), tc.conns)
			got, _ := drain(t, lns)
			if tc.want == nil { // every socket busy, none with more than one extra
				if slices.Contains(got, 0) || slices.Max(got)-slices.Min(got) > 1 {
					t.Fatalf("counts %v: want every socket busy and even", got)
				}
				return
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("counts %v, want %v", got, tc.want)
			}
		})
	}
}

// TestEmptyListFallsBackToHash: with no live socket the kernel's hash decides; nothing is
// refused.
func TestEmptyListFallsBackToHash(t *testing.T) {
	g := newGroup(t, 4)
	lns := added(t, g, 2)
	dial(t, lns[0].Addr().String(), 10)
	got, _ := drain(t, lns)
	if got[0]+got[1] != 10 {
		t.Fatalf("accepted %v of 10", got)
	}
}

// TestClosingSocketMigrates: connections queued on a socket that leaves the list and
// closes are accepted by a live one, and still work.
func TestClosingSocketMigrates(t *testing.T) {
	g := newGroup(t, 4)
	if !g.Migrates() {
		t.Skip("kernel before 5.14: no select-or-migrate program")
	}
	lns := added(t, g, 2)
	if err := g.SetLive([]int{0, 1}); err != nil {
		t.Fatal(err)
	}
	clients := dial(t, lns[0].Addr().String(), 6)
	if err := g.SetLive([]int{1}); err != nil {
		t.Fatal(err)
	}
	lns[0].Close() // three connections queued there, never accepted
	got, conns := drain(t, lns[1:])
	if got[0] != 6 {
		t.Fatalf("the live socket accepted %d, want all 6", got[0])
	}
	for i, c := range clients { // every client reaches a server connection
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
	seen := map[byte]bool{}
	for _, c := range conns[0] {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatalf("read from a migrated connection: %v", err)
		}
		seen[b[0]] = true
	}
	if len(seen) != 6 {
		t.Fatalf("heard from %d clients, want 6", len(seen))
	}
}

// TestReplacedSocket: a position's new socket (a slot that reopened its socket) takes the
// old one's turns.
func TestReplacedSocket(t *testing.T) {
	g := newGroup(t, 4)
	lns := added(t, g, 2)
	if err := g.SetLive([]int{0, 1}); err != nil {
		t.Fatal(err)
	}
	lns[1].Close()
	fresh, err := Listen(context.Background(), lns[0].Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fresh.Close() })
	if err := g.Add(1, fresh); err != nil {
		t.Fatal(err)
	}
	dial(t, lns[0].Addr().String(), 4)
	got, _ := drain(t, []*net.TCPListener{lns[0], fresh})
	if !slices.Equal(got, []int{2, 2}) {
		t.Fatalf("counts %v, want [2 2]", got)
	}
}

func TestGroupErrors(t *testing.T) {
	if _, err := NewGroup(0); err == nil || errors.Is(err, ErrUnsupported) {
		t.Fatalf("NewGroup(0): %v, want a size error", err)
	}
	g := newGroup(t, 2)
	lns := listeners(t, 1)
	if err := g.Add(2, lns[0]); err == nil {
		t.Fatal("Add out of range: no error")
	}
	if err := g.SetLive([]int{0, 5}); err == nil {
		t.Fatal("SetLive out of range: no error")
	}
	// A socket that is not listening cannot join the map.
	c, err := net.Dial("tcp", lns[0].Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := g.Add(0, c.(*net.TCPConn)); err == nil {
		t.Fatal("Add of a connected socket: no error")
	}
}

// TestFetchAddMarshalsFetch asserts the assembler pitfall program works around: the atomic
// add must carry BPF_FETCH in its immediate, or the counter's old value never reaches the
// register and round robin sends everything to one socket.
func TestFetchAddMarshalsFetch(t *testing.T) {
	var ins asm.Instruction
	found := false
	for _, in := range program(3, 4, 5) {
		if in.OpCode.AtomicOp() != asm.InvalidAtomic {
			ins, found = in, true
		}
	}
	if !found {
		t.Fatal("no atomic instruction in the program")
	}
	var b bytes.Buffer
	if _, err := ins.Marshal(&b, binary.LittleEndian); err != nil {
		t.Fatal(err)
	}
	raw := b.Bytes()
	if len(raw) != asm.InstructionSize {
		t.Fatalf("atomic instruction is %d bytes", len(raw))
	}
	if imm := binary.LittleEndian.Uint32(raw[4:8]); imm != 0x01 { // BPF_ADD | BPF_FETCH
		t.Fatalf("atomic immediate %#x, want 0x01 (BPF_ADD|BPF_FETCH)", imm)
	}
	// The library still marshals its own FetchAdd without the flag; if it is fixed, the
	// work-around is harmless and this note can go.
	var plain bytes.Buffer
	asm.FetchAdd.Mem(asm.R0, asm.R1, asm.DWord, 0).Marshal(&plain, binary.LittleEndian)
	if imm := binary.LittleEndian.Uint32(plain.Bytes()[4:8]); imm&0x01 != 0 {
		t.Logf("cilium/ebpf now marshals FetchAdd with BPF_FETCH (imm %#x)", imm)
	}
}

func TestListenIsPlainTCP(t *testing.T) {
	ln := listeners(t, 1)[0]
	proto, err := Protocol(ln)
	if err != nil {
		t.Fatal(err)
	}
	if proto != unix.IPPROTO_TCP {
		t.Fatalf("SO_PROTOCOL %d, want IPPROTO_TCP", proto)
	}
	f, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if proto, err := Protocol(f); err != nil || proto != unix.IPPROTO_TCP {
		t.Fatalf("through the file: %d, %v", proto, err)
	}
	// For contrast: what Go makes by default, where the kernel has MPTCP.
	def, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer def.Close()
	p, _ := Protocol(def.(*net.TCPListener))
	t.Logf("net.Listen's default protocol here: %d (TCP %d, MPTCP %d)", p, unix.IPPROTO_TCP, unix.IPPROTO_MPTCP)
}
