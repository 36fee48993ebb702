package balancer

import (
	"cmp"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/fleetns"
)

// TestLinkDown takes a host's link down under keep-alive load (its own end of the veth:
// a cable pulled at the host; its supervisor and workers go on running) and brings it back,
// behind each balancer:
//
//   - HAProxy: the HTTP check takes the host DOWN; from then on no request reaches it (its
//     stot stands still) and every request is served by the other host; the requests held on
//     the dead link (in flight when it went, or sent on a kept-alive server connection before
//     the verdict) wait, and finish when the link is back (TCP retransmits; HAProxy's timeout
//     server, 30 s, is far off), and new connections to it fail over after timeout connect
//     (retry-on conn-failure, redispatch): 0 failed. Back up, HAProxy uses it again.
//   - nftables: the checker's agent question gets no answer, so the host leaves the map; new
//     connections go to the other host only; the clients kept-alive on the dead host wait
//     (conntrack keeps them there: L4 has no retry) and resume when the link is back, and the
//     checker puts the host back in the map.
//
// The load's clients time out after 40 s, past HAProxy's timeout server, so that the
// balancer, not the test's client, decides a held request's fate; the requests held on the
// link are counted (over 0.5 s) with the longest one. The link is down a few seconds here; one
// down longer than timeout server (behind HAProxy) or the client's own timeout (behind
// nftables) would fail the requests held on it (docs/fleet.md).
func TestLinkDown(t *testing.T) {
	f := newRollFleet(t)
	h0, h1 := f.hosts[0], f.hosts[1]
	report := func(t *testing.T, what string, fig rollFigures) {
		t.Helper()
		t.Logf("%s: %s; %d held over 0.5 s (longest %v)", what, fig, fig.Slow, fig.MaxLatency.Round(time.Millisecond))
		if fig.GetFailed+fig.PatchFailed != 0 || fig.Refused != 0 {
			t.Errorf("%s: %d failed, %d refused (first: %s)", what, fig.GetFailed+fig.PatchFailed, fig.Refused, fig.FirstErr)
		}
		if fig.Requests == 0 {
			t.Errorf("%s: no request made", what)
		}
	}

	t.Run("haproxy", func(t *testing.T) {
		hp, params := f.startHAProxy(t)
		stat := func(name string) ServerStat { s, _ := serverStat(hp, name); return s }
		state := func(name, want string) func() (bool, string) { return serverState(hp, name, want) }
		for _, h := range f.hosts {
			if err := poll(10*time.Second, h.name+" UP", state(h.name, "UP")); err != nil {
				t.Fatal(err)
			}
		}
		l := startPool("http://"+params.Listen, 8, 40*time.Second, 500*time.Millisecond)
		time.Sleep(500 * time.Millisecond)
		before := stat(h0.name)
		t0 := time.Now()
		setLink(t, h0, false)
		defer setLink(t, h0, true) // also after a failure: the fleet's cleanup needs the host
		if err := poll(15*time.Second, "h0 DOWN", state(h0.name, "DOWN")); err != nil {
			l.end(t)
			t.Fatal(err)
		}
		verdict := time.Since(t0)
		// DOWN: new requests go to h1 only. (The pool's clients may all be held on the dead
		// link by now: HAProxy leaves the sessions it sent to a server that goes DOWN where
		// they are, so fresh requests show where traffic goes.)
		down0, down1 := stat(h0.name), stat(h1.name)
		c := client()
		c.Timeout = 2 * time.Second
		for i := range 20 {
			if err := getFeed(c, "http://"+params.Listen); err != nil {
				t.Errorf("GET /feed %d with h0 DOWN: %v", i, err)
			}
		}
		c.CloseIdleConnections()
		time.Sleep(time.Second) // the link stays down a while longer
		after0, after1 := stat(h0.name), stat(h1.name)
		if after0.Stot != down0.Stot {
			t.Errorf("h0 DOWN took %d sessions", after0.Stot-down0.Stot)
		}
		if after1.Stot-down1.Stot < 20 {
			t.Errorf("h1 took %d sessions while h0 was DOWN, want the 20 fresh GETs at least", after1.Stot-down1.Stot)
		}
		held := down0.Scur
		t1 := time.Now()
		setLink(t, h0, true)
		if err := poll(15*time.Second, "h0 UP again", state(h0.name, "UP")); err != nil {
			l.end(t)
			t.Fatal(err)
		}
		rise := time.Since(t1)
		// Back: HAProxy sends to h0 again.
		back := stat(h0.name).Stot
		err := poll(5*time.Second, "h0 used again", func() (bool, string) {
			s := stat(h0.name)
			return s.Stot > back, fmt.Sprintf("stot %d", s.Stot)
		})
		fig := l.end(t)
		if err != nil {
			t.Error(err)
		}
		end := stat(h0.name)
		t.Logf("h0's link down: DOWN after %v with %d sessions held on it; h1 alone (%d sessions); link up: UP after %v; retries %d, redispatches %d on h0",
			verdict.Round(time.Millisecond), held, after1.Stot-down1.Stot, rise.Round(time.Millisecond), end.Retr-before.Retr, end.Redis-before.Redis)
		report(t, "behind HAProxy, h0's link down and up", fig)
	})

	t.Run("nftables", func(t *testing.T) {
		isLive := f.startChecker(t, nil)
		vip := net.JoinHostPort(f.net.LB.Addr, strconv.Itoa(hostPort))
		l := startPool("http://"+vip, 8, 40*time.Second, 500*time.Millisecond)
		time.Sleep(500 * time.Millisecond)
		t0 := time.Now()
		setLink(t, h0, false)
		defer setLink(t, h0, true)
		if err := poll(10*time.Second, "h0 out of the map", isLive(h0.ns.Addr, false)); err != nil {
			l.end(t)
			t.Fatal(err)
		}
		verdict := time.Since(t0)
		// Out: every new connection goes to h1 (one to h0 would not be answered in 2 s).
		got := through(t, vip, f.hosts, f.net.Outer, 6)
		// Each answered within 2 s, which h0 cannot: all went to h1; ss says so too.
		if got[0] != 0 {
			t.Errorf("6 new connections with h0's link down: %v per host, want none on h0", got)
		}
		time.Sleep(time.Second) // the link stays down a while longer
		setLink(t, h0, true)
		if err := poll(10*time.Second, "h0 back in the map", isLive(h0.ns.Addr, true)); err != nil {
			l.end(t)
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // the clients held on h0 resume
		fig := l.end(t)
		// Back: new connections reach h0 again.
		if got := through(t, vip, f.hosts, f.net.Outer, 8); got[0] == 0 || got[1] == 0 {
			t.Errorf("8 new connections, h0's link back: %v per host, want both used", got)
		}
		t.Logf("h0's link down: out of the map after %v", verdict.Round(time.Millisecond))
		report(t, "behind nftables, h0's link down and up", fig)
	})
}

// through opens n connections to addr (the nftables VIP), each answering GET /health
// within 2 s, and counts those each host holds (ss in its namespace, connections from the
// clients' address outer) while they are open, less those it held before.
func through(t *testing.T, addr string, hosts []*rollHost, outer string, n int) []int {
	t.Helper()
	count := func() []int {
		c := make([]int, len(hosts))
		for i, h := range hosts {
			out, err := fleetns.Command(h.ns.Name, "ss", "-Htn", "state", "established", "src", h.addr(), "dst", outer).Output()
			if err != nil {
				t.Fatalf("ss in %s: %v", h.ns.Name, err)
			}
			c[i] = strings.Count(string(out), "\n")
		}
		return c
	}
	before := count()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		c.SetDeadline(time.Now().Add(2 * time.Second))
		io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
		buf := make([]byte, 12)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "HTTP/1.1 200" {
			t.Fatalf("GET /health through the DNAT: %q, %v", buf, err)
		}
	}
	got := count()
	for i := range got {
		got[i] -= before[i]
	}
	return got
}

// TestLinkDownLong takes a host's link down for longer than the time a request may wait on
// it — HAProxy's timeout server, the client's own timeout behind nftables — under the same
// keep-alive load as TestLinkDown, and brings it back:
//
//   - HAProxy: the requests held on the dead link are given up on at timeout server and,
//     being replayable (GET, the heavy PATCH), sent to the other host (retry-on
//     response-timeout, redispatch): 0 failed, the held ones slow by timeout server. Back
//     up, the host is UP again and takes requests.
//   - nftables: L4 has no retry: a client held on the dead host fails at its own timeout
//     (counted, at most one per client: its next connection goes to a live host), and the
//     others see nothing. Back up, the checker puts the host back in the map.
//
// What decides a held request's fate is the outage against that one timeout: so the test
// shortens timeout server (and the client's timeout behind nftables) to 3 s and holds the
// link down 5 s, which is the 30 s production timeout against an outage past it, in
// seconds. ONEHOST_LINKDOWN_LONG=35s runs it with the production timeout server (30 s) and
// the link down that long (the clients' timeout behind nftables 30 s too).
func TestLinkDownLong(t *testing.T) {
	serverTimeout, down := 3*time.Second, 5*time.Second
	if v := os.Getenv("ONEHOST_LINKDOWN_LONG"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= DefaultServerTimeout {
			t.Fatalf("ONEHOST_LINKDOWN_LONG=%q: want a duration past timeout server's %v, e.g. 35s", v, DefaultServerTimeout)
		}
		serverTimeout, down = 0, d // 0: the template's default
	}
	clientTimeout := cmp.Or(serverTimeout, DefaultServerTimeout)
	f := newRollFleet(t)
	h0, h1 := f.hosts[0], f.hosts[1]

	t.Run("haproxy", func(t *testing.T) {
		hp, params := f.startHAProxy(t, func(p *HAProxyParams) { p.ServerTimeout = serverTimeout })
		stat := func(name string) ServerStat { s, _ := serverStat(hp, name); return s }
		state := func(name, want string) func() (bool, string) { return serverState(hp, name, want) }
		for _, h := range f.hosts {
			if err := poll(10*time.Second, h.name+" UP", state(h.name, "UP")); err != nil {
				t.Fatal(err)
			}
		}
		// The clients wait past timeout server and the retry on the other host: the
		// balancer decides.
		l := startPool("http://"+params.Listen, 8, 2*clientTimeout+10*time.Second, 500*time.Millisecond)
		time.Sleep(500 * time.Millisecond)
		before0, before1 := stat(h0.name), stat(h1.name)
		t0 := time.Now()
		setLink(t, h0, false)
		defer setLink(t, h0, true)
		if err := poll(15*time.Second, "h0 DOWN", state(h0.name, "DOWN")); err != nil {
			l.end(t)
			t.Fatal(err)
		}
		verdict := time.Since(t0)
		held := stat(h0.name).Scur
		// Past timeout server, with the link still down: HAProxy has given up on every
		// request held there (scur 0).
		err := poll(clientTimeout+5*time.Second, "h0's held sessions given up (scur 0)", func() (bool, string) {
			s := stat(h0.name)
			return s.Scur == 0, fmt.Sprintf("scur %d", s.Scur)
		})
		givenUp := time.Since(t0)
		if err != nil {
			t.Error(err)
		}
		if rest := down - time.Since(t0); rest > 0 {
			time.Sleep(rest)
		}
		if s := stat(h0.name); !strings.HasPrefix(s.Status, "DOWN") {
			t.Errorf("h0 %s with its link still down, want DOWN", s.Status)
		}
		t1 := time.Now()
		outage := t1.Sub(t0)
		setLink(t, h0, true)
		if err := poll(15*time.Second, "h0 UP again", state(h0.name, "UP")); err != nil {
			l.end(t)
			t.Fatal(err)
		}
		rise := time.Since(t1)
		back := stat(h0.name).Stot
		err = poll(5*time.Second, "h0 used again", func() (bool, string) {
			s := stat(h0.name)
			return s.Stot > back, fmt.Sprintf("stot %d", s.Stot)
		})
		fig := l.end(t)
		if err != nil {
			t.Error(err)
		}
		end0, end1 := stat(h0.name), stat(h1.name)
		t.Logf("h0's link down %v (timeout server %v): DOWN after %v, %d sessions held on it, all given up by %v; link up: UP after %v; "+
			"retries %d, redispatches %d on h0 (h1: %d, %d)",
			outage.Round(time.Millisecond), clientTimeout, verdict.Round(time.Millisecond), held, givenUp.Round(time.Millisecond),
			rise.Round(time.Millisecond), end0.Retr-before0.Retr, end0.Redis-before0.Redis, end1.Retr-before1.Retr, end1.Redis-before1.Redis)
		t.Logf("behind HAProxy: %s; %d held over 0.5 s (longest %v)", fig, fig.Slow, fig.MaxLatency.Round(time.Millisecond))
		if fig.GetFailed+fig.PatchFailed != 0 || fig.Refused != 0 {
			t.Errorf("%d failed, %d refused (first: %s), want none: the held GETs and PATCHes are retried on h1",
				fig.GetFailed+fig.PatchFailed, fig.Refused, fig.FirstErr)
		}
		if fig.Requests == 0 {
			t.Error("no request made")
		}
	})

	t.Run("nftables", func(t *testing.T) {
		var loads syncList // every map the checker loaded, with its time
		isLive := f.startChecker(t, func(l []NftHost) {
			loads.Add(fmt.Sprintf("%v %v", time.Now().Format("15:04:05.000"), l))
		})
		vip := net.JoinHostPort(f.net.LB.Addr, strconv.Itoa(hostPort))
		const clients = 8
		l := startPool("http://"+vip, clients, clientTimeout, 500*time.Millisecond)
		time.Sleep(500 * time.Millisecond)
		t0 := time.Now()
		setLink(t, h0, false)
		defer setLink(t, h0, true)
		if err := poll(10*time.Second, "h0 out of the map", isLive(h0.ns.Addr, false)); err != nil {
			l.end(t)
			t.Fatal(err)
		}
		verdict := time.Since(t0)
		if rest := down - time.Since(t0); rest > 0 {
			time.Sleep(rest)
		}
		outage := time.Since(t0)
		setLink(t, h0, true)
		if err := poll(10*time.Second, "h0 back in the map", isLive(h0.ns.Addr, true)); err != nil {
			l.end(t)
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		fig := l.end(t)
		if got := through(t, vip, f.hosts, f.net.Outer, 8); got[0] == 0 || got[1] == 0 {
			t.Errorf("8 new connections, h0's link back: %v per host, want both used", got)
		}
		t.Logf("h0's link down %v (the clients' timeout %v): out of the map after %v", outage.Round(time.Millisecond), clientTimeout,
			verdict.Round(time.Millisecond))
		t.Logf("behind nftables: %s; %d held over 0.5 s (longest %v); first error: %s", fig, fig.Slow,
			fig.MaxLatency.Round(time.Millisecond), fig.FirstErr)
		t.Logf("the checker's maps (link down at %s): %s", t0.Format("15:04:05.000"), strings.Join(loads.Get(), "; "))
		// A client held on h0 fails once, at its timeout; its next connection goes to h1.
		if failed := fig.GetFailed + fig.PatchFailed; failed > clients || fig.Refused != 0 {
			t.Errorf("%d failed, %d refused: want at most one failure per client (%d) and none refused", failed, fig.Refused, clients)
		}
		if fig.Requests == 0 {
			t.Error("no request made")
		}
	})
}

// syncList is a list of strings appended to from several goroutines.
type syncList struct {
	mu sync.Mutex
	l  []string
}

func (s *syncList) Add(v string) { s.mu.Lock(); s.l = append(s.l, v); s.mu.Unlock() }

func (s *syncList) Get() []string { s.mu.Lock(); defer s.mu.Unlock(); return slices.Clone(s.l) }
