// Command connect-cost measures what one connect() costs the connecting thread as the
// number of connections already open to one server ip:port grows: with the connections
// spread over source addresses as the project's generators spread them (internal/srcaddr:
// 127.0.0.2, .3, … bound with IP_BIND_ADDRESS_NO_PORT), and from one source address for
// contrast, where Linux's port choice hits its cliff (docs/bench.md, "The connect()
// cliff").
//
//	connect-cost [-n 50000] [-one 20000] [-runs 3] [-window 500] [-client-cpu 0] [-server-cpu 1]
//
// Each run starts a fresh server (this binary in its serve mode, a child process pinned
// to -server-cpu, accepting and holding every connection on a new port), then dials from
// one thread pinned to -client-cpu, with plain blocking system calls, until n connections
// are open. At each mark (1,000, 2,000, 5,000, … and n) it reports the last -window
// dials': mean CPU per connect (the thread's CLOCK_THREAD_CPUTIME_ID, which on loopback
// includes the handshake's softirq work done on its behalf), the median and 90th
// percentile of each dial's own CPU, mean system time (getrusage RUSAGE_THREAD) and mean
// wall time. It prints every run, then each figure's median over the runs and the ratio
// of the cost at the last mark to the cost at 1,000. Nothing else should run on the two
// CPUs.
//
// No process needs more descriptors than the usual limit (here 20,000, and not raisable
// in a container without CAP_SYS_RESOURCE): the dialer and the server hand their sockets,
// in batches outside the measured windows, to holder processes (this binary again) over
// SCM_RIGHTS, 15,000 to a holder. What connect() costs depends on the sockets the kernel
// has, not on which process holds them.
//
// Non-goals: other destinations than loopback, IPv6, connects through the event loop
// (the loops make the same system calls).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/srcaddr"
)

// serveEnv, set in a child's environment, makes it the server; holdEnv makes it a holder
// of the descriptors sent to it on descriptor 3.
const (
	serveEnv = "CONNECT_COST_SERVE"
	holdEnv  = "CONNECT_COST_HOLD"
)

func main() {
	if os.Getenv(holdEnv) != "" {
		if err := hold(os.NewFile(3, "holder")); err != nil {
			fmt.Fprintln(os.Stderr, "connect-cost hold:", err)
			os.Exit(1)
		}
		return
	}
	if os.Getenv(serveEnv) != "" {
		if err := serve(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "connect-cost serve:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "connect-cost:", err)
		os.Exit(1)
	}
}

// defaultMarks are where the costs are reported, those at or under a run's connections.
var defaultMarks = []int{1000, 2000, 5000, 10000, 12000, 14000, 16000, 18000, 20000, 25000, 30000, 40000, 50000}

// options are the command line's settings.
type options struct {
	spreadN, oneN        int
	runs, window         int
	clientCPU, serverCPU int
	perAddr              int
	addrs                int
}

func run(ctx context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) error {
	var o options
	fs := flag.NewFlagSet("connect-cost", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.spreadN, "n", 50000, "connections to open spread over source addresses (0: skip)")
	fs.IntVar(&o.oneN, "one", 20000, "connections to open from one source address (0: skip; ~28,000 fit the default port range)")
	fs.IntVar(&o.runs, "runs", 3, "runs of each")
	fs.IntVar(&o.window, "window", 500, "dials each mark's figures are the mean of")
	fs.IntVar(&o.clientCPU, "client-cpu", 0, "CPU the dialing thread is pinned to (-1: none)")
	fs.IntVar(&o.serverCPU, "server-cpu", 1, "CPU the server is pinned to (-1: none)")
	fs.IntVar(&o.perAddr, "per-addr", 0, "connections per source address before the spread takes another (default srcaddr.PerAddr)")
	fs.IntVar(&o.addrs, "addrs", 0, "spread over exactly this many source addresses, 127.0.0.2 on (default: as srcaddr.Plan chooses)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 || o.runs < 1 || o.spreadN < 0 || o.oneN < 0 {
		return errors.New("usage: connect-cost [-n N] [-one N] [-runs R] [-window W] [-client-cpu C] [-server-cpu C]")
	}
	if o.window < 1 || o.window > 1000 {
		// Marks are 1,000 apart at the closest: a window must not reach past the last.
		return fmt.Errorf("-window %d: want 1 to 1,000 dials", o.window)
	}
	// The dials run on this goroutine's thread, pinned, so that the thread's clocks
	// count them and nothing else.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if o.clientCPU >= 0 {
		if err := pin(o.clientCPU); err != nil {
			return err
		}
	}
	type mode struct {
		name string
		n    int
		plan srcaddr.Spread
	}
	var modes []mode
	lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if o.spreadN > 0 {
		var given []netip.Addr
		for a := netip.AddrFrom4([4]byte{127, 0, 0, 2}); len(given) < o.addrs; a = a.Next() {
			given = append(given, a)
		}
		modes = append(modes, mode{"spread", o.spreadN, srcaddr.Plan(lo, o.spreadN, o.perAddr, given)})
	}
	if o.oneN > 0 {
		modes = append(modes, mode{"one address", o.oneN, srcaddr.Spread{Conns: o.oneN}})
	}
	results := make([][]runResult, len(modes))
	for r := range o.runs {
		for i, m := range modes {
			res, err := measure(ctx, m.plan, o)
			if err != nil {
				return fmt.Errorf("run %d, %s: %w", r+1, m.name, err)
			}
			fmt.Fprintf(stdout, "run %d/%d, %s: %s\n", r+1, o.runs, m.name, describe(m.plan, res))
			printMarks(stdout, res.marks)
			results[i] = append(results[i], res)
		}
	}
	fmt.Fprintf(stdout, "\nmedians of %d runs (µs per connect over the last %d dials before each mark):\n", o.runs, o.window)
	for i, m := range modes {
		med := medians(results[i])
		fmt.Fprintf(stdout, "%s: %s\n", m.name, describe(m.plan, results[i][0]))
		printMarks(stdout, med)
		if len(med) > 1 && med[0].cpu > 0 {
			last := med[len(med)-1]
			fmt.Fprintf(stdout, "  cost at %s / cost at %s: CPU mean %.2f×, p50 %.2f×, p90 %.2f×; system %.2f×; wall %.2f×\n",
				num(last.open), num(med[0].open), last.cpu/med[0].cpu, ratio(last.p50, med[0].p50), ratio(last.p90, med[0].p90),
				ratio(last.sys, med[0].sys), last.wall/med[0].wall)
		}
	}
	return nil
}

// mark is the cost of the dials that brought the open connections up to open: means
// (the window's total over its dials: CPU, system, wall), and the median and 90th
// percentile of each dial's own CPU, which rare costs shared by many connections (a new
// slab page, memory the host must fault in under a VM) leave alone.
type mark struct {
	open                     int
	cpu, p50, p90, sys, wall float64 // µs per connect
}

type runResult struct {
	marks   []mark
	reached int   // connections open at the end
	stopErr error // why dialing stopped before n, if it did
}

func describe(s srcaddr.Spread, r runResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s connections", num(r.reached))
	if len(s.Addrs) > 0 {
		fmt.Fprintf(&b, " over %d source addresses (%s–%s), ≤ %s per pair", len(s.Addrs), s.Addrs[0], s.Addrs[len(s.Addrs)-1], num(s.MaxPerPair()))
	} else {
		b.WriteString(" from one source address (the kernel's choice)")
	}
	if r.stopErr != nil {
		fmt.Fprintf(&b, "; stopped: %v", r.stopErr)
	}
	return b.String()
}

func printMarks(w io.Writer, ms []mark) {
	fmt.Fprintf(w, "  %8s %10s %10s %10s %10s %10s\n", "open", "CPU mean", "CPU p50", "CPU p90", "sys mean", "wall mean")
	for _, m := range ms {
		fmt.Fprintf(w, "  %8s %10.1f %10.1f %10.1f %10.1f %10.1f\n", num(m.open), m.cpu, m.p50, m.p90, m.sys, m.wall)
	}
}

// medians is each mark's median over the runs, of each figure on its own.
func medians(rs []runResult) []mark {
	var out []mark
	for i := range rs[0].marks {
		var cpu, p50, p90, sys, wall []float64
		for _, r := range rs {
			if i < len(r.marks) {
				m := r.marks[i]
				cpu, p50, p90 = append(cpu, m.cpu), append(p50, m.p50), append(p90, m.p90)
				sys, wall = append(sys, m.sys), append(wall, m.wall)
			}
		}
		out = append(out, mark{open: rs[0].marks[i].open, cpu: median(cpu), p50: median(p50), p90: median(p90),
			sys: median(sys), wall: median(wall)})
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// measure starts a server, opens s.Conns connections to it as planned, and closes them.
func measure(ctx context.Context, s srcaddr.Spread, o options) (runResult, error) {
	srv, port, err := startServer(ctx, o.serverCPU)
	if err != nil {
		return runResult{}, err
	}
	held := &holders{}
	defer func() {
		// The server goes first, so that the connections' TIME_WAIT is on its side (its
		// port, which the next run does not use) and none is left on the client's ports.
		srv.stop()
		time.Sleep(500 * time.Millisecond) // for its holders to see it gone and exit
		held.close()
	}()
	dst := &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}
	var src []unix.Sockaddr
	for _, a := range s.Addrs {
		src = append(src, &unix.SockaddrInet4{Addr: a.As4()})
	}
	var marks []int
	for _, m := range defaultMarks {
		if m <= s.Conns {
			marks = append(marks, m)
		}
	}
	if len(marks) == 0 || marks[len(marks)-1] != s.Conns {
		marks = append(marks, s.Conns)
	}
	var res runResult
	var c0 clocks
	per := make([]float64, 0, o.window) // each dial's CPU in the window, µs
	for i := 0; i < s.Conns; i++ {
		inWindow := len(marks) > 0 && i >= max(marks[0]-o.window, 0)
		if inWindow && i == max(marks[0]-o.window, 0) {
			c0, per = now(), per[:0]
		}
		var t0 int64
		if inWindow {
			t0 = threadCPU()
		}
		fd, err := dial(dst, src, i)
		if inWindow {
			per = append(per, float64(threadCPU()-t0)/1e3)
		}
		if err != nil {
			res.stopErr = fmt.Errorf("connection %d: %w", i+1, err)
			break
		}
		held.add(fd)
		res.reached++
		if len(marks) > 0 && i+1 == marks[0] {
			c1 := now()
			n := float64(len(per))
			slices.Sort(per)
			res.marks = append(res.marks, mark{
				open: marks[0],
				cpu:  float64(c1.cpu-c0.cpu) / 1e3 / n,
				p50:  per[len(per)/2],
				p90:  per[len(per)*9/10],
				sys:  float64(c1.sys-c0.sys) / 1e3 / n,
				wall: float64(c1.wall.Sub(c0.wall).Nanoseconds()) / 1e3 / n,
			})
			marks = marks[1:]
			// Between the windows: no mark is more than 10,000 dials after the last.
			if err := held.flush(); err != nil {
				return res, err
			}
		}
	}
	return res, held.flush()
}

// dial makes connection i: from source address i mod len(src) when there are any, bound
// without a port as srcaddr does it.
func dial(dst *unix.SockaddrInet4, src []unix.Sockaddr, i int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if len(src) > 0 {
		if err := srcaddr.NoPort(fd); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("set IP_BIND_ADDRESS_NO_PORT: %w", err)
		}
		if err := unix.Bind(fd, src[i%len(src)]); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("bind: %w", err)
		}
	}
	for {
		err = unix.Connect(fd, dst)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("connect: %w", err)
	}
	return fd, nil
}

// clocks are the calling thread's CPU and system time (ns) and the wall clock.
type clocks struct {
	cpu, sys int64
	wall     time.Time
}

func now() clocks {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_THREAD, &ru)
	return clocks{cpu: threadCPU(), sys: ru.Stime.Nano(), wall: time.Now()}
}

// threadCPU is the calling thread's CPU time in ns (a system call: no vDSO for it).
func threadCPU() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}

func pin(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin to CPU %d: %w", cpu, err)
	}
	return nil
}

// server is a child process accepting and holding connections.
type server struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startServer starts this binary in its serve mode on cpu and returns the port it
// listens on.
func startServer(ctx context.Context, cpu int) (*server, int, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, 0, fmt.Errorf("find own binary: %w", err)
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), serveEnv+"="+strconv.Itoa(cpu))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, 0, fmt.Errorf("start server: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, 0, fmt.Errorf("start server: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, 0, fmt.Errorf("start server: %w", err)
	}
	s := &server{cmd: cmd, stdin: stdin}
	line, err := bufio.NewReader(out).ReadString('\n')
	port, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		s.stop()
		return nil, 0, fmt.Errorf("start server: no port from it (%q)", line)
	}
	return s, port, nil
}

// stop ends the server: closing its stdin tells it to exit, which closes its connections.
func (s *server) stop() {
	s.stdin.Close()
	s.cmd.Wait()
}

// serve is the server: it pins itself to the CPU in serveEnv, listens on 127.0.0.1:0,
// writes its port to out, and accepts and holds connections until in reaches its end.
func serve(in io.Reader, out io.Writer) error {
	if cpu, err := strconv.Atoi(os.Getenv(serveEnv)); err == nil && cpu >= 0 {
		runtime.LockOSThread() // the accepting thread is the pinned one
		if err := pin(cpu); err != nil {
			return err
		}
	}
	// Non-blocking, and drained every 2 ms rather than waited on: a server asleep in
	// accept() would make each connect pay for waking it (an IPI under a VM, 10 µs and
	// more, varying with the server's timing), which is no part of what connect() costs
	// to choose a port; this way nobody waits on the listener. 2 ms of dials at ~15 µs
	// each fit the accept queue (somaxconn, 4,096) many times over.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	if err := unix.Listen(fd, 65535); err != nil { // the kernel caps it at somaxconn
		return fmt.Errorf("listen: %w", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fmt.Errorf("getsockname: %w", err)
	}
	fmt.Fprintf(out, "%d\n", sa.(*unix.SockaddrInet4).Port)
	go func() { // owned by serve: ends the process when the parent closes in
		io.Copy(io.Discard, in)
		os.Exit(0)
	}()
	// The connections, never read: holding them is the point. They go to holders
	// 5,000 at a time (a few milliseconds, while the accept queue takes the dials).
	held := &holders{}
	defer held.close()
	for n := 0; ; {
		c, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
		switch {
		case err == unix.EAGAIN:
			time.Sleep(2 * time.Millisecond)
			continue
		case err == unix.EINTR || err == unix.ECONNABORTED:
			continue
		case err != nil:
			return fmt.Errorf("accept after %d: %w", n, err)
		}
		held.add(c)
		n++
		if len(held.own) >= 5000 {
			if err := held.flush(); err != nil {
				return err
			}
		}
	}
}

// perHolder is how many descriptors one holder process keeps, under the usual limit.
const perHolder = 15_000

// holders are the holder processes a process hands its sockets to.
type holders struct {
	own []int // not yet handed over
	cur *holder
	all []*holder
}

type holder struct {
	cmd  *exec.Cmd
	sock int // this end of the socket pair
	n    int // descriptors sent
}

func (h *holders) add(fd int) { h.own = append(h.own, fd) }

// flush hands every descriptor held here to holders, closing it here.
func (h *holders) flush() error {
	for len(h.own) > 0 {
		if h.cur == nil || h.cur.n >= perHolder {
			c, err := startHolder()
			if err != nil {
				return err
			}
			h.cur = c
			h.all = append(h.all, c)
		}
		// SCM_MAX_FD: at most 253 descriptors in one message.
		k := min(len(h.own), 253, perHolder-h.cur.n)
		if err := unix.Sendmsg(h.cur.sock, []byte{0}, unix.UnixRights(h.own[:k]...), nil, 0); err != nil {
			return fmt.Errorf("hand sockets to a holder: %w", err)
		}
		for _, fd := range h.own[:k] {
			unix.Close(fd)
		}
		h.own = h.own[k:]
		h.cur.n += k
	}
	h.own = h.own[:0]
	return nil
}

// close ends the holders (closing what they hold) and closes what is held here.
func (h *holders) close() {
	for _, fd := range h.own {
		unix.Close(fd)
	}
	h.own = nil
	for _, c := range h.all {
		unix.Close(c.sock) // the holder sees the end of its socket and exits
		c.cmd.Wait()
	}
	h.all, h.cur = nil, nil
}

// startHolder starts this binary as a holder, with one end of a socket pair as its
// descriptor 3.
func startHolder() (*holder, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own binary: %w", err)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("start holder: %w", err)
	}
	theirs := os.NewFile(uintptr(pair[1]), "holder")
	defer theirs.Close()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), holdEnv+"=1")
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		unix.Close(pair[0])
		return nil, fmt.Errorf("start holder: %w", err)
	}
	return &holder{cmd: cmd, sock: pair[0]}, nil
}

// hold keeps every descriptor sent on sock until its other end closes.
func hold(sock *os.File) error {
	fd := int(sock.Fd())
	oob := make([]byte, unix.CmsgSpace(253*4))
	buf := make([]byte, 1)
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return fmt.Errorf("receive: %w", err)
		case n == 0 && oobn == 0:
			return nil // the sender is done: exiting closes everything
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return fmt.Errorf("parse: %w", err)
		}
		for _, m := range msgs {
			// The descriptors are raw ints: nothing closes them before this process exits,
			// which is what holding them means.
			if _, err := unix.ParseUnixRights(&m); err != nil {
				return fmt.Errorf("parse: %w", err)
			}
		}
	}
}

// num writes n with thousands separators.
func num(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
