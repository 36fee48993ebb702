package steering

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// How a group's connections are steered, as `supervisor status` names it.
const (
	KindRoundRobin = "bpf-rr" // Group's program: round robin over the live sockets
	KindHash       = "hash"   // the kernel's hash of each connection's addresses
)

// Modes a configuration chooses between.
const (
	ModeAuto       = "auto"        // round robin where the kernel allows it, else the hash
	ModeHash       = "hash"        // the kernel's hash, no program
	ModeRoundRobin = "round-robin" // round robin, or fail
)

// ErrUnsupported wraps every reason a Group cannot be made here (no CAP_BPF, a kernel
// without SK_REUSEPORT programs, a seccomp filter that refuses bpf(2)).
var ErrUnsupported = errors.New("eBPF socket steering unsupported")

// Group is an SK_REUSEPORT program and its maps for one SO_REUSEPORT group of at most
// Size sockets, each in a numbered position (the supervisor's slots). Its methods are safe
// for concurrent use; the kernel reads the maps concurrently with them.
//
// The program keeps a dense list of the live positions and a counter: each new connection
// takes the next counter value modulo the list's length and goes to the socket at that
// position of the list. A dense list rather than skipping dead positions, because skipping
// hands a dead position's turn to its next live neighbour, which then gets twice its share.
// When the list is empty, or the chosen position holds no socket (it closed a moment ago),
// the program passes and the kernel falls back to its hash.
type Group struct {
	prog    *ebpf.Program
	socks   *ebpf.Map // REUSEPORT_SOCKARRAY: position → socket
	live    *ebpf.Map // ARRAY u32 → u32: [0] the list's length, [1..n] the live positions
	counter *ebpf.Map // ARRAY u32 → u64: [0] the round-robin counter
	size    int
	migrate bool

	mu   sync.Mutex
	list []uint32 // what live holds now
}

// NewGroup loads the program and creates its maps for positions 0 to size-1. Every error
// wraps ErrUnsupported: the caller falls back to the hash and says why.
func NewGroup(size int) (*Group, error) {
	if size < 1 {
		return nil, fmt.Errorf("create steering group: size %d: want at least 1", size)
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; later ones ignore it.
	_ = rlimit.RemoveMemlock()
	g := &Group{size: size}
	var err error
	fail := func(what string, err error) (*Group, error) {
		g.Close()
		return nil, fmt.Errorf("%w: %s: %w", ErrUnsupported, what, err)
	}
	g.socks, err = ebpf.NewMap(&ebpf.MapSpec{Name: "onehost_socks", Type: ebpf.ReusePortSockArray,
		KeySize: 4, ValueSize: 8, MaxEntries: uint32(size)})
	if err != nil {
		return fail("create socket map", err)
	}
	g.live, err = ebpf.NewMap(&ebpf.MapSpec{Name: "onehost_live", Type: ebpf.Array,
		KeySize: 4, ValueSize: 4, MaxEntries: uint32(size + 1)})
	if err != nil {
		return fail("create live map", err)
	}
	g.counter, err = ebpf.NewMap(&ebpf.MapSpec{Name: "onehost_rr", Type: ebpf.Array,
		KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return fail("create counter map", err)
	}
	spec := &ebpf.ProgramSpec{Name: "onehost_rr", Type: ebpf.SkReuseport,
		AttachType: ebpf.AttachSkReuseportSelectOrMigrate, License: "MIT",
		Instructions: program(g.socks.FD(), g.live.FD(), g.counter.FD())}
	// Select-or-migrate (Linux 5.14) also places a closing socket's queued connections;
	// before it, a plain select program still balances new ones.
	g.prog, err = ebpf.NewProgram(spec)
	g.migrate = err == nil
	if err != nil {
		spec.AttachType = ebpf.AttachSkReuseportSelect
		var err2 error
		if g.prog, err2 = ebpf.NewProgram(spec); err2 != nil {
			return fail("load program", err)
		}
	}
	return g, nil
}

// Size is how many positions the group has.
func (g *Group) Size() int { return g.size }

// Migrates reports whether the program also moves a closing socket's queued connections
// to live sockets (select-or-migrate, Linux 5.14+). Otherwise, net.ipv4.tcp_migrate_req
// lets the kernel's hash move them, or they are reset.
func (g *Group) Migrates() bool { return g.migrate }

// Add puts a listening SO_REUSEPORT TCP socket at position pos, replacing what was there,
// and attaches the program to the socket's group (again, harmlessly, if it is attached: a
// group whose sockets all closed is a new group). The socket does not get connections
// until SetLive lists pos.
func (g *Group) Add(pos int, c syscall.Conn) error {
	if pos < 0 || pos >= g.size {
		return fmt.Errorf("add socket to steering group: position %d out of range 0 to %d", pos, g.size-1)
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("add socket to steering group: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, g.prog.FD()); serr != nil {
			serr = fmt.Errorf("attach program: %w", serr)
			return
		}
		if serr = g.socks.Put(uint32(pos), uint64(fd)); serr != nil {
			serr = fmt.Errorf("put socket in map: %w", serr)
		}
	}); err != nil {
		return fmt.Errorf("add socket to steering group: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("add socket to steering group: %w", serr)
	}
	return nil
}

// SetLive makes positions, in that order, the list new connections are dealt to. An empty
// list hands every connection back to the kernel's hash.
func (g *Group) SetLive(positions []int) error {
	list := make([]uint32, 0, len(positions))
	for _, p := range positions {
		if p < 0 || p >= g.size {
			return fmt.Errorf("set live sockets: position %d out of range 0 to %d", p, g.size-1)
		}
		list = append(list, uint32(p))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if slices.Equal(list, g.list) {
		return nil
	}
	// Entries first, the length last: a connection that reads the old length meanwhile
	// finds a valid position (at worst one listed twice), never a hole.
	for i, p := range list {
		if i < len(g.list) && g.list[i] == p {
			continue
		}
		if err := g.live.Put(uint32(i+1), p); err != nil {
			return fmt.Errorf("set live sockets: %w", err)
		}
	}
	if err := g.live.Put(uint32(0), uint32(len(list))); err != nil {
		return fmt.Errorf("set live sockets: %w", err)
	}
	g.list = list
	return nil
}

// Live returns the positions new connections are dealt to now.
func (g *Group) Live() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]int, len(g.list))
	for i, p := range g.list {
		out[i] = int(p)
	}
	return out
}

// Close releases the program and the maps. Sockets keep the program attached (their group
// holds a reference), so Close stops nothing; the group's sockets closing does.
func (g *Group) Close() error {
	var errs []error
	if g.prog != nil {
		errs = append(errs, g.prog.Close())
	}
	for _, m := range []*ebpf.Map{g.socks, g.live, g.counter} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}

// skPass is an SK_REUSEPORT program's "accept the connection" (SK_DROP, 0, refuses it).
const skPass = 1

// bpfFetch is BPF_FETCH, the flag in an atomic instruction's immediate that makes it return
// the old value in its source register. cilium/ebpf v0.22.0's FetchAdd.Mem marshals the
// immediate without it (a plain add: the register keeps 1, every connection goes to the
// same place), so program sets it itself; TestFetchAddMarshalsFetch checks the bytes.
const bpfFetch = 0x01

// program is the round robin, written out as instructions so that no C toolchain or
// generated object is needed to build the project:
//
//	n = live[0]; if n == 0: pass
//	i = atomic_fetch_add(&counter[0], 1) % n
//	pos = live[1 + i]
//	bpf_sk_select_reuseport(ctx, socks, &pos, 0)   // fails for an empty position: pass
//	return SK_PASS
//
// SK_PASS after a failed select lets the kernel hash instead: a connection is never
// dropped by the program.
func program(socks, live, counter int) asm.Instructions {
	fetchAdd := asm.FetchAdd.Mem(asm.R0, asm.R1, asm.DWord, 0)
	fetchAdd.Constant = bpfFetch
	var p asm.Instructions
	p = append(p,
		asm.Mov.Reg(asm.R6, asm.R1), // ctx
		asm.StoreImm(asm.RFP, -4, 0, asm.Word))
	// r7 = live[0]
	p = append(p, lookup(live, -4)...)
	p = append(p,
		asm.LoadMem(asm.R7, asm.R0, 0, asm.Word),
		asm.JEq.Imm(asm.R7, 0, "pass"))
	// r1 = fetch_add(counter[0], 1) % r7 + 1
	p = append(p, lookup(counter, -4)...)
	p = append(p,
		asm.Mov.Imm(asm.R1, 1),
		fetchAdd,
		asm.Mod.Reg(asm.R1, asm.R7),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.RFP, -8, asm.R1, asm.Word))
	// pos = live[r1]
	p = append(p, lookup(live, -8)...)
	return append(p,
		asm.LoadMem(asm.R1, asm.R0, 0, asm.Word),
		asm.StoreMem(asm.RFP, -12, asm.R1, asm.Word),
		// bpf_sk_select_reuseport(ctx, socks, &pos, 0)
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, socks),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -12),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnSkSelectReuseport.Call(),
		asm.Mov.Imm(asm.R0, skPass).WithSymbol("pass"),
		asm.Return(),
	)
}

// lookup is r0 = bpf_map_lookup_elem(map, fp+key), passing when it finds nothing.
func lookup(m int, key int16) asm.Instructions {
	return asm.Instructions{
		asm.LoadMapPtr(asm.R1, m),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(key)),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
	}
}
