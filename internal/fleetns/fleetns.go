// Package fleetns makes a small fleet of network-namespace "hosts" behind a balancer
// namespace, for tests and benchmarks of the balancers (internal/balancer): the layout of
// internal/loadhosts/nstest (a namespace per host, a veth pair with a /30 on it, the host's
// default route over it) with the hosts' veths joined to the balancer's namespace rather
// than to this one, so that their replies pass back through the balancer as DNAT needs:
//
//	this namespace  10.233.S.1/30 ── 10.233.S.2/30  balancer namespace (ip_forward on)
//	                                 10.233.S.4I+5/30 ── 10.233.S.4I+6/30  host I
//
// This namespace gets a route to 10.233.S.0/24 through the balancer, so a test reaches
// every host directly too (its agent, its server). Nothing is sent anywhere else. The
// hosts share this machine's processes and files, not its network; a process runs in one
// with Command (nsenter). Everything is removed when the test ends, failed or not.
// Where namespaces cannot be had it skips the test with the reason (fails it where CI
// requires the programs: package proctest).
package fleetns

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/onehost/onehost/internal/proctest"
)

// NS is one namespace of the fleet.
type NS struct {
	Name string // the namespace (ip netns NAME; /run/netns/NAME)
	Addr string // its address on its link towards the balancer (the balancer's: towards here)
}

// Net is a made fleet.
type Net struct {
	// Outer is this namespace's address on the link to the balancer: the clients' source.
	Outer string
	// LB is the balancer's namespace; its Addr is the address clients connect to.
	LB NS
	// Hosts are the hosts' namespaces.
	Hosts []NS
}

// Check skips tb (fails it in CI) unless this process can make the fleet.
func Check(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		proctest.Missing(tb, "network namespaces need root")
	}
	for _, p := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(p); err != nil {
			proctest.Missing(tb, p+" not installed (Debian: iproute2, util-linux; .ci/run installs them)")
		}
	}
}

// New makes a balancer namespace with n hosts behind it, removed when the test ends.
func New(t testing.TB, n int) *Net {
	t.Helper()
	Check(t)
	if n < 1 || n > 60 {
		t.Fatalf("fleetns.New: %d hosts: want 1 to 60", n)
	}
	s := 1 + rand.IntN(250) // names and addresses unique per run
	tag := fmt.Sprintf("fl%d", s)
	addr := func(i int) string { return fmt.Sprintf("10.233.%d.%d", s, i) }
	f := &Net{Outer: addr(1), LB: NS{Name: tag + "lb", Addr: addr(2)}}

	lb := f.LB.Name
	newNS(t, lb)
	outer, inner := tag+"l0", tag+"l1"
	link(t, "", outer, f.Outer, lb, inner, f.LB.Addr)
	sh(t, "ip", "netns", "exec", lb, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
	sh(t, "ip", "route", "add", fmt.Sprintf("10.233.%d.0/24", s), "via", f.LB.Addr)
	t.Cleanup(func() { exec.Command("ip", "route", "del", fmt.Sprintf("10.233.%d.0/24", s)).Run() })
	for i := range n {
		h := NS{Name: fmt.Sprintf("%sh%d", tag, i), Addr: addr(4*i + 6)}
		newNS(t, h.Name)
		gw := addr(4*i + 5)
		link(t, lb, fmt.Sprintf("%sh%da", tag, i), gw, h.Name, fmt.Sprintf("%sh%db", tag, i), h.Addr)
		sh(t, "ip", "-n", h.Name, "route", "add", "default", "via", gw)
		f.Hosts = append(f.Hosts, h)
	}
	sh(t, "ip", "-n", lb, "route", "add", "default", "via", f.Outer)
	return f
}

func newNS(t testing.TB, name string) {
	t.Helper()
	sh(t, "ip", "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	sh(t, "ip", "-n", name, "link", "set", "lo", "up")
}

// link makes a veth pair from namespace a ("" for this one) to namespace b, with a /30.
func link(t testing.TB, a, aName, aAddr, b, bName, bAddr string) {
	t.Helper()
	in := func(ns string, args ...string) []string {
		if ns == "" {
			return append([]string{"ip"}, args...)
		}
		return append([]string{"ip", "-n", ns}, args...)
	}
	sh(t, in(a, "link", "add", aName, "type", "veth", "peer", "name", bName, "netns", b)...)
	if a == "" { // deleting a namespace deletes its ends; this one's needs its own removal
		t.Cleanup(func() { exec.Command("ip", "link", "del", aName).Run() })
	}
	sh(t, in(a, "addr", "add", aAddr+"/30", "dev", aName)...)
	sh(t, in(a, "link", "set", aName, "up")...)
	sh(t, in(b, "addr", "add", bAddr+"/30", "dev", bName)...)
	sh(t, in(b, "link", "set", bName, "up")...)
}

func sh(t testing.TB, argv ...string) {
	t.Helper()
	if b, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, b)
	}
}

// Wrap returns a command-line rewriter that runs argv in namespace ns: nsenter joins the
// namespace and execs argv, so the pid is argv's.
func Wrap(ns string) func(argv []string) []string {
	return func(argv []string) []string {
		return append([]string{"nsenter", "--net=/run/netns/" + ns, "--"}, argv...)
	}
}

// Command is exec.Command(argv...) run in namespace ns.
func Command(ns string, argv ...string) *exec.Cmd {
	w := Wrap(ns)(slices.Clone(argv))
	return exec.Command(w[0], w[1:]...)
}
