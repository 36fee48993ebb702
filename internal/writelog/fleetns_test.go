package writelog_test

// The fleet as a user runs it: namespace hosts (internal/fleetns), each `supervisor run
// -fleet ... -fleet-self ... -fleet-dir ...` with two workers and its log node, real
// HAProxy in front (configs/haproxy/haproxy.cfg, round robin, the hosts' agents), and the
// faults of the issue: the stream's leader killed -9, a follower's node killed -9, a whole
// host killed -9 and started again, a write owner killed -9 (its applier restarts on
// another worker), and a fourth host joining from the snapshot in the log. Sizes are cut
// for CI; what is asserted is behaviour (0 stale, ids unique, writes resume, nothing
// acknowledged lost, identical files), never a duration: the outages are measured by
// `ceiling fleet -log` (docs/fleet.md).

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/onehost/onehost/internal/balancer"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/fleetns"
	"github.com/onehost/onehost/internal/fleetns/fleetnstest"
	"github.com/onehost/onehost/internal/fleetspec"
	"github.com/onehost/onehost/internal/proctest"
)

const (
	nsHTTPPort  = 3000
	nsAgentPort = 9999
)

// nsHost is one namespace host running the supervisor.
type nsHost struct {
	ns                  fleetns.NS
	name, dir, db, logs string
	list                string // the -fleet list it runs with
	cmd                 *exec.Cmd
	done                chan error
	exited              atomic.Bool
}

func (h *nsHost) url() string {
	return "http://" + net.JoinHostPort(h.ns.Addr, strconv.Itoa(nsHTTPPort))
}

func (h *nsHost) start(t *testing.T) {
	t.Helper()
	sup := binary(t, "supervisor")
	h.cmd = fleetns.Command(h.ns.Name, sup, "run", "-socket", filepath.Join(h.dir, "sup.sock"),
		"-listen", net.JoinHostPort(h.ns.Addr, strconv.Itoa(nsHTTPPort)), "-instances", "2",
		"-agent", net.JoinHostPort(h.ns.Addr, strconv.Itoa(nsAgentPort)),
		"-fleet", h.list, "-fleet-self", h.name, "-fleet-dir", filepath.Join(h.dir, "log"),
		"-log-format", "json", "-log-file", h.logs)
	h.cmd.Env = []string{"SQLITE_PATH=" + h.db, "JWT_SECRET=" + testSecret, "PATH=" + os.Getenv("PATH"),
		"PRODUCTS_PATH=" + filepath.Join(h.dir, "products.db"), "ONEHOST_FLEET_SNAPSHOT_EVERY=40"}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h.done = make(chan error, 1)
	h.exited.Store(false)
	go func(c *exec.Cmd, done chan error) { // reaps the supervisor; killAll waits for it
		err := c.Wait()
		h.exited.Store(true)
		done <- err
	}(h.cmd, h.done)
}

// killAll kills -9 every process in the host's namespace (the supervisor, its workers, its
// log node): the host's power cut, as far as processes go.
func (h *nsHost) killAll(t *testing.T) {
	t.Helper()
	fleetns.KillAll(h.ns.Name, 20, 50*time.Millisecond)
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("host %s's supervisor not reaped 10 s after kill -9", h.name)
	}
}

// waitServing waits until the host's /health answers 200 (it serves, caught up).
func (h *nsHost) waitServing(t *testing.T, c *client, within time.Duration) {
	t.Helper()
	if st, b, ok := waitHealthy(c, h.url(), within); !ok {
		t.Fatalf("host %s not serving after %v: %d %s\n%s", h.name, within, st, b, tailFile(h.logs, 40))
	}
}

// waitHealthy polls url's /health until it answers 200, as a balancer's check would
// before it sends the host traffic; it returns the last answer and whether it came.
func waitHealthy(c *client, url string, within time.Duration) (int, []byte, bool) {
	var st int
	var b []byte
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if st, b, _ = c.do("GET", url+"/health", 0, ""); st == 200 {
			return st, b, true
		}
	}
	return st, b, false
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// status is the host's `supervisor status -json`.
func (h *nsHost) status(t *testing.T) []control.Worker {
	t.Helper()
	out, err := exec.Command(binary(t, "supervisor"), "status", "-json", "-socket", filepath.Join(h.dir, "sup.sock")).Output()
	if err != nil {
		t.Fatalf("status of %s: %v", h.name, err)
	}
	var st control.Status
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status of %s: %v: %s", h.name, err, out)
	}
	return st.Workers
}

// nodePID is the pid of the host's log node (its pid file).
func (h *nsHost) nodePID(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.dir, "log", "lognode.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// streamInfo connects to the log's nodes at urls (the test fails if none answers) and
// returns how to read the stream's info, each read bounded by within, and how to close the
// connection: the waits below poll on one connection.
func streamInfo(t *testing.T, urls []string) (info func(within time.Duration) (*jetstream.StreamInfo, error), closeConn func()) {
	t.Helper()
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	info = func(within time.Duration) (*jetstream.StreamInfo, error) {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		st, err := js.Stream(ctx, fleetspec.Stream)
		if err != nil {
			return nil, err
		}
		return st.Info(ctx)
	}
	return info, nc.Close
}

// streamLeader names the host that leads the write log's stream now.
func streamLeader(t *testing.T, urls []string) string {
	t.Helper()
	info, closeConn := streamInfo(t, urls)
	defer closeConn()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if i, err := info(2 * time.Second); err == nil && i.Cluster != nil && i.Cluster.Leader != "" {
			return i.Cluster.Leader
		}
	}
	t.Fatal("the stream has no leader after 30 s")
	return ""
}

// streamHealthy waits until the stream has a leader and every one of its replicas is
// current: one fault at a time, as the faults are.
func streamHealthy(t *testing.T, urls []string) {
	t.Helper()
	info, closeConn := streamInfo(t, urls)
	defer closeConn()
	var last string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		i, err := info(2 * time.Second)
		if err != nil {
			last = err.Error()
			continue
		}
		ok := i.Cluster != nil && i.Cluster.Leader != "" && len(i.Cluster.Replicas) == 2
		for _, r := range i.Cluster.Replicas {
			ok = ok && r.Current && !r.Offline
		}
		if ok {
			return
		}
		last = fmt.Sprintf("%+v", i.Cluster)
	}
	t.Fatalf("the stream not healthy after 60 s: %s", last)
}

// streamFirst is the stream's first sequence.
func streamFirst(t *testing.T, urls []string) uint64 {
	t.Helper()
	info, closeConn := streamInfo(t, urls)
	defer closeConn()
	i, err := info(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return i.State.FirstSeq
}

// writer posts through the balancer until stopped, keeping the acknowledged ids.
type writer struct {
	mu     sync.Mutex
	acked  []int64
	failed int
	stop   chan struct{}
	done   chan struct{}
}

func startWriter(c *client, url string) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() { // stopped by w.finish
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			id, _, err := c.post(url, int64(1+i%50), "under a fault "+strconv.Itoa(i))
			w.mu.Lock()
			if err != nil {
				w.failed++
			} else {
				w.acked = append(w.acked, id)
			}
			w.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return w
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func (w *writer) finish() []int64 {
	close(w.stop)
	<-w.done
	return w.acked
}

// waitMore waits until the writer has n more acknowledged writes than before.
func (w *writer) waitMore(t *testing.T, what string, before, n int) {
	t.Helper()
	for deadline := time.Now().Add(45 * time.Second); w.count() < before+n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: writes did not resume: %d acknowledged in 45 s after it", what, w.count()-before)
		}
	}
}

// checkAcked asserts every acknowledged id is distinct and readable through the balancer.
func checkAcked(t *testing.T, c *client, url string, ids []int64) {
	t.Helper()
	if d := distinct(ids); d != len(ids) {
		t.Errorf("%d acknowledged posts, %d distinct ids: an id was reused", len(ids), d)
	}
	for _, id := range ids {
		if st, b, err := c.do("GET", url+"/posts/"+strconv.FormatInt(id, 10), 1, ""); err != nil || st != 200 {
			t.Errorf("acknowledged post %d: %d %s %v: lost", id, st, b, err)
		}
	}
}

// TestFleetBehindHAProxy is the list, on three (then four) namespace hosts.
func TestFleetBehindHAProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("namespace hosts, HAProxy, faults")
	}
	fleetnstest.Check(t)
	if _, err := balancer.LookHAProxy(); err != nil {
		proctest.Missing(t, err.Error())
	}
	fn := fleetnstest.New(t, 4)
	dbs := tinyDBs(t, 3)
	var list3 []string
	for i := range 3 {
		list3 = append(list3, fmt.Sprintf("h%d=%s", i+1, fn.Hosts[i].Addr))
	}
	list4 := strings.Join(append(list3, "h4="+fn.Hosts[3].Addr), ",")
	var hosts []*nsHost
	for i := range 4 {
		dir := t.TempDir()
		db := filepath.Join(dir, "feed.db")
		list := strings.Join(list3, ",")
		if i < 3 {
			b, _ := os.ReadFile(dbs[i])
			os.WriteFile(db, b, 0o644)
		} else {
			list = list4 // the newcomer: no database, the longer list
		}
		hosts = append(hosts, &nsHost{ns: fn.Hosts[i], name: fmt.Sprintf("h%d", i+1), dir: dir, db: db, logs: filepath.Join(dir, "sup.log"), list: list})
	}
	t.Cleanup(func() {
		for _, h := range hosts {
			if h.cmd != nil && !h.exited.Load() {
				h.killAll(t)
			}
			if t.Failed() {
				// The whole log outlives the test's directory, for reading after.
				kept := filepath.Join(os.TempDir(), fmt.Sprintf("fleetns-%s-%d.log", h.name, os.Getpid()))
				if b, err := os.ReadFile(h.logs); err == nil && os.WriteFile(kept, b, 0o644) == nil {
					t.Logf("host %s's whole log: %s", h.name, kept)
				}
				t.Logf("host %s log:\n%s", h.name, tailFile(h.logs, 30))
			}
		}
	})
	c := newClient()
	for _, h := range hosts[:3] {
		h.start(t)
	}
	for _, h := range hosts[:3] {
		h.waitServing(t, c, 90*time.Second)
	}
	var natsURLs []string
	for _, h := range hosts {
		natsURLs = append(natsURLs, "nats://"+net.JoinHostPort(h.ns.Addr, "4222"))
	}

	servers := func(n int) []balancer.Server {
		var s []balancer.Server
		for _, h := range hosts[:n] {
			s = append(s, balancer.Server{Addr: net.JoinHostPort(h.ns.Addr, strconv.Itoa(nsHTTPPort))})
		}
		return s
	}
	params := balancer.HAProxyParams{Listen: net.JoinHostPort(fn.LB.Addr, "8080"), Servers: servers(3), Threads: 1,
		AgentPort: nsAgentPort, CheckInter: 200 * time.Millisecond, AgentInter: 200 * time.Millisecond}
	tmpl, err := os.ReadFile(filepath.Join("..", "..", "configs", "haproxy", "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	var hlog strings.Builder
	var hmu sync.Mutex
	hp, err := balancer.StartHAProxy(context.Background(), tmpl, balancer.HAProxyOptions{Dir: t.TempDir(), Params: params,
		Stderr: lockedWriter{&hmu, &hlog}, Wrap: fleetns.Wrap(fn.LB.Name)})
	if err != nil {
		t.Fatalf("%v\n%s", err, hlog.String())
	}
	t.Cleanup(func() { hp.Stop() })
	lb := "http://" + params.Listen
	// waitUp waits until n hosts have been UP for 1.5 s in a row: a host that has just
	// caught up is UP by its /health at once, and by its agent a stats round (a second)
	// later, which may take it down for that second first.
	waitUp := func(n int) {
		t.Helper()
		var since time.Time
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			ss, err := hp.Stat()
			up := 0
			for _, s := range ss {
				if strings.HasPrefix(s.Status, "UP") {
					up++
				}
			}
			switch {
			case err != nil || up < n:
				since = time.Time{}
			case since.IsZero():
				since = time.Now()
			case time.Since(since) >= 1500*time.Millisecond:
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("HAProxy: %d of %d hosts UP after 30 s: %+v %v", up, n, ss, err)
			}
		}
	}
	waitUp(3)
	dbs3 := []string{hosts[0].db, hosts[1].db, hosts[2].db}

	t.Run("read your writes", func(t *testing.T) {
		for round := range 3 {
			stale, ids := pairs(t, c, []string{lb}, 100, int64(1+round*10))
			if stale != 0 {
				t.Errorf("round %d: %d stale of 100 POST→GET pairs through round robin, want 0", round+1, stale)
			}
			if d := distinct(ids); d != len(ids) {
				t.Errorf("round %d: %d ids for %d posts", round+1, d, len(ids))
			}
		}
	})
	t.Run("likes once", func(t *testing.T) {
		id, _, err := c.post(lb, 1, "liked by many")
		if err != nil {
			t.Fatal(err)
		}
		created := 0
		for u := int64(1); u <= 20; u++ {
			for range 3 {
				st, b, err := c.like(lb, u, id)
				if err != nil || (st != 201 && st != 200) {
					t.Fatalf("like: %d %s %v", st, b, err)
				}
				if st == 201 {
					created++
				}
			}
		}
		if created != 20 {
			t.Errorf("20 users liked one post 3 times each through round robin: %d accepted as new, want 20", created)
		}
	})
	t.Run("identical files", func(t *testing.T) { sameFiles(t, dbs3...) })

	t.Run("leader killed", func(t *testing.T) {
		leader := streamLeader(t, natsURLs[:3])
		var lh *nsHost
		for _, h := range hosts[:3] {
			if h.name == leader {
				lh = h
			}
		}
		if lh == nil {
			t.Fatalf("leader %q is no host", leader)
		}
		w := startWriter(c, lb)
		w.waitMore(t, "before the kill", 0, 10)
		syscall.Kill(lh.nodePID(t), syscall.SIGKILL)
		w.waitMore(t, "after the leader's kill", w.count(), 20)
		ids := w.finish()
		checkAcked(t, c, lb, ids)
		if l := streamLeader(t, natsURLs[:3]); l == leader {
			t.Logf("the killed node %s leads again (it was restarted by its supervisor)", l)
		}
		lh.waitServing(t, c, 60*time.Second)
		sameFiles(t, dbs3...)
		streamHealthy(t, natsURLs[:3])
	})
	t.Run("follower killed", func(t *testing.T) {
		leader := streamLeader(t, natsURLs[:3])
		var fh *nsHost
		for _, h := range hosts[:3] {
			if h.name != leader {
				fh = h
				break
			}
		}
		w := startWriter(c, lb)
		w.waitMore(t, "before the kill", 0, 10)
		syscall.Kill(fh.nodePID(t), syscall.SIGKILL)
		w.waitMore(t, "after a follower's kill", w.count(), 20)
		ids := w.finish()
		checkAcked(t, c, lb, ids)
		fh.waitServing(t, c, 60*time.Second)
		sameFiles(t, dbs3...)
		streamHealthy(t, natsURLs[:3])
	})
	t.Run("node stopped: the host leaves the balancer", func(t *testing.T) {
		h := hosts[2]
		sup := func(args ...string) {
			t.Helper()
			args = append(args, "-socket", filepath.Join(h.dir, "sup.sock"))
			if out, err := exec.Command(binary(t, "supervisor"), args...).CombinedOutput(); err != nil {
				t.Fatalf("supervisor %v: %v: %s", args, err, out)
			}
		}
		sup("stop", "lognode")
		var st int
		var b []byte
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if st, b, _ = c.do("GET", h.url()+"/health", 0, ""); st == 503 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("host %s without its log node: /health %d %s, want 503", h.name, st, b)
			}
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			ss, _ := hp.Stat()
			out := false
			for _, s := range ss {
				out = out || s.Name == "h2" && !strings.HasPrefix(s.Status, "UP")
			}
			if out {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("HAProxy keeps host %s UP without its log node: %+v", h.name, ss)
			}
		}
		stale, ids := pairs(t, c, []string{lb}, 30, 21)
		if stale != 0 || distinct(ids) != len(ids) {
			t.Errorf("with a host out: %d stale of 30, %d ids for %d posts", stale, distinct(ids), len(ids))
		}
		sup("start", "lognode")
		h.waitServing(t, c, 60*time.Second)
		waitUp(3)
		sameFiles(t, dbs3...)
		streamHealthy(t, natsURLs[:3])
	})
	t.Run("host rejoins", func(t *testing.T) {
		h := hosts[1]
		w := startWriter(c, lb)
		w.waitMore(t, "before the kill", 0, 10)
		h.killAll(t)
		w.waitMore(t, "with a host down", w.count(), 30)
		h.start(t)
		h.waitServing(t, c, 90*time.Second)
		w.waitMore(t, "after the host came back", w.count(), 10)
		ids := w.finish()
		checkAcked(t, c, lb, ids)
		waitUp(3)
		sameFiles(t, dbs3...)
		streamHealthy(t, natsURLs[:3])
	})
	t.Run("applier restarts", func(t *testing.T) {
		h := hosts[0]
		owner := 0
		for _, ws := range h.status(t) {
			if ws.Role == "owner" {
				owner = ws.PID
			}
		}
		if owner == 0 {
			t.Fatalf("no write owner on %s: %+v", h.name, h.status(t))
		}
		w := startWriter(c, lb)
		w.waitMore(t, "before the kill", 0, 10)
		syscall.Kill(owner, syscall.SIGKILL)
		w.waitMore(t, "after the write owner's kill", w.count(), 20)
		ids := w.finish()
		checkAcked(t, c, lb, ids)
		sameFiles(t, dbs3...)
	})
	t.Run("fourth host from a snapshot", func(t *testing.T) {
		if first := streamFirst(t, natsURLs[:3]); first <= 1 {
			t.Fatalf("the stream starts at %d: no snapshot purged it (ONEHOST_FLEET_SNAPSHOT_EVERY=40)", first)
		}
		h := hosts[3]
		if _, err := os.Stat(h.db); err == nil {
			t.Fatal("the newcomer has a database already")
		}
		h.start(t)
		h.waitServing(t, c, 90*time.Second)
		params.Servers = servers(4)
		if err := hp.Reload(context.Background(), params); err != nil {
			t.Fatal(err)
		}
		waitUp(4)
		stale, ids := pairs(t, c, []string{lb}, 80, 31)
		if stale != 0 {
			t.Errorf("%d stale of 80 POST→GET pairs over four hosts, want 0", stale)
		}
		if d := distinct(ids); d != len(ids) {
			t.Errorf("%d ids for %d posts", d, len(ids))
		}
		sameFiles(t, append(dbs3, h.db)...)
	})
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
