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
// with Command (nsenter). Everything is removed when the test ends, failed or not (Make:
// when its cleanup is called). Tests make it with package fleetnstest, which skips a test
// where namespaces cannot be had.
package fleetns

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// NS is one namespace of the fleet.
type NS struct {
	Name string // the namespace (ip netns NAME; /run/netns/NAME)
	Addr string // its address on its link towards the balancer (the balancer's: towards here)
	// Link is a host's end of its veth towards the balancer, and Gateway the balancer's
	// address on it (the host's default route); both "" for the balancer's namespace.
	Link, Gateway string
}

// Net is a made fleet.
type Net struct {
	// Outer is this namespace's address on the link to the balancer: the clients' source.
	Outer string
	// LB is the balancer's namespace; its Addr is the address clients connect to.
	LB NS
	// Hosts are the hosts' namespaces.
	Hosts []NS
	// OuterLink is this namespace's end of the link to the balancer (its counters in
	// /sys/class/net/NAME/statistics are every byte between the clients and the fleet).
	OuterLink string
}

// Make makes a balancer namespace with n hosts behind it outside a test (`ceiling fleet`);
// cleanup removes everything made, also after an error, and must be called. Needs root.
func Make(n int) (f *Net, cleanup func(), err error) {
	var undo []func()
	cleanup = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	if n < 1 || n > 60 {
		return nil, cleanup, fmt.Errorf("make fleet: %d hosts: want 1 to 60", n)
	}
	sh := func(argv ...string) {
		if err != nil {
			return
		}
		if b, e := exec.Command(argv[0], argv[1:]...).CombinedOutput(); e != nil {
			err = fmt.Errorf("make fleet: %s: %v: %s", strings.Join(argv, " "), e, b)
		}
	}
	newNS := func(name string) {
		sh("ip", "netns", "add", name)
		if err == nil {
			undo = append(undo, func() { exec.Command("ip", "netns", "del", name).Run() })
		}
		sh("ip", "-n", name, "link", "set", "lo", "up")
	}
	// link makes a veth pair from namespace a ("" for this one) to namespace b, with a /30.
	link := func(a, aName, aAddr, b, bName, bAddr string) {
		in := func(ns string, args ...string) []string {
			if ns == "" {
				return append([]string{"ip"}, args...)
			}
			return append([]string{"ip", "-n", ns}, args...)
		}
		sh(in(a, "link", "add", aName, "type", "veth", "peer", "name", bName, "netns", b)...)
		if a == "" && err == nil { // deleting a namespace deletes its ends; this one's needs its own removal
			undo = append(undo, func() { exec.Command("ip", "link", "del", aName).Run() })
		}
		sh(in(a, "addr", "add", aAddr+"/30", "dev", aName)...)
		sh(in(a, "link", "set", aName, "up")...)
		sh(in(b, "addr", "add", bAddr+"/30", "dev", bName)...)
		sh(in(b, "link", "set", bName, "up")...)
	}
	s := 1 + rand.IntN(250) // names and addresses unique per run
	tag := fmt.Sprintf("fl%d", s)
	addr := func(i int) string { return fmt.Sprintf("10.233.%d.%d", s, i) }
	f = &Net{Outer: addr(1), LB: NS{Name: tag + "lb", Addr: addr(2)}, OuterLink: tag + "l0"}

	lb := f.LB.Name
	newNS(lb)
	link("", f.OuterLink, f.Outer, lb, tag+"l1", f.LB.Addr)
	sh("ip", "netns", "exec", lb, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
	sh("ip", "route", "add", fmt.Sprintf("10.233.%d.0/24", s), "via", f.LB.Addr)
	if err == nil {
		undo = append(undo, func() { exec.Command("ip", "route", "del", fmt.Sprintf("10.233.%d.0/24", s)).Run() })
	}
	for i := range n {
		h := NS{Name: fmt.Sprintf("%sh%d", tag, i), Addr: addr(4*i + 6), Link: fmt.Sprintf("%sh%db", tag, i), Gateway: addr(4*i + 5)}
		newNS(h.Name)
		link(lb, fmt.Sprintf("%sh%da", tag, i), h.Gateway, h.Name, h.Link, h.Addr)
		sh("ip", "-n", h.Name, "route", "add", "default", "via", h.Gateway)
		f.Hosts = append(f.Hosts, h)
	}
	sh("ip", "-n", lb, "route", "add", "default", "via", f.Outer)
	if err != nil {
		return nil, cleanup, err
	}
	return f, cleanup, nil
}

// SetLink takes host h's link to the balancer down or up: its own end of the veth, as a
// cable pulled at the host. The balancer's end loses its carrier and keeps its address
// and route, so what the balancer sends to the host vanishes (no reset, no ICMP), as on a
// real dead link; the host's processes go on running. Up again, the host's default route
// (removed with the link) is put back, and the connections it had resume.
func SetLink(h NS, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	if b, err := exec.Command("ip", "-n", h.Name, "link", "set", h.Link, state).CombinedOutput(); err != nil {
		return fmt.Errorf("set %s's link %s %s: %v: %s", h.Name, h.Link, state, err, b)
	}
	if !up {
		return nil
	}
	// replace: the route is gone after a down, but may be back already if the link was up.
	if b, err := exec.Command("ip", "-n", h.Name, "route", "replace", "default", "via", h.Gateway).CombinedOutput(); err != nil {
		return fmt.Errorf("set %s's link up: default route via %s: %v: %s", h.Name, h.Gateway, err, b)
	}
	return nil
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

// KillAll kills -9 every process in namespace ns (a host's power cut, as far as processes
// go): what `ip netns pids` lists, again after pause while any is left (a process may
// start another as it dies), at most tries times. It does not wait for the processes to
// be reaped: their parents (or the caller, for its own children) do that.
func KillAll(ns string, tries int, pause time.Duration) {
	for range tries {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			return
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(pause)
	}
}
