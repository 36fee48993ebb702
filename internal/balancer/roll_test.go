package balancer

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/fleetns"
	"github.com/onehost/onehost/internal/fleetns/fleetnstest"
	"github.com/onehost/onehost/internal/seedtest"
)

// RollRoundsEnv, when set to N > 0, makes TestRoll the target run instead of the
// quick one: N rounds over both hosts behind each balancer, under two `autocannon -c 64`
// (GET /feed and the heavy PATCH), figures logged per round (docs/fleet.md). Unset: one
// round per host under a small client pool, which the normal suite runs.
const RollRoundsEnv = "ONEHOST_ROLL_ROUNDS"

// rollAgentPort is where each host's supervisor answers HAProxy's agent-check.
const rollAgentPort = 9777

// rollBinaries builds cmd/supervisor, cmd/worker (beside it: the supervisor's default
// command) and bench/autocannon once per test binary, into one directory.
func rollBinaries(t testing.TB) string {
	t.Helper()
	return buildOnce(t, "roll", "github.com/onehost/onehost/cmd/supervisor",
		"github.com/onehost/onehost/cmd/worker", "github.com/onehost/onehost/bench/autocannon")
}

// rollHost is one namespace host running a real `supervisor run` with two real workers,
// with its own socket directory and its own copy of the seed database.
type rollHost struct {
	name string // the server's name in HAProxy's backend
	ns   fleetns.NS
	bin  string // the directory of supervisor and worker
	dir  string
	db   string

	mu   sync.Mutex
	sup  *exec.Cmd
	done chan error
	log  *syncBuffer
}

func (h *rollHost) socket() string { return filepath.Join(h.dir, "run", "supervisor.sock") }
func (h *rollHost) addr() string   { return net.JoinHostPort(h.ns.Addr, strconv.Itoa(hostPort)) }

// start runs `supervisor run` in the host's namespace: with its agent on ADDR:9777 when
// agent is set; broken points the workers at a database that cannot be opened, so that
// the host never comes back.
func (h *rollHost) start(t testing.TB, agent, broken bool) {
	t.Helper()
	db := h.db
	if broken {
		db = filepath.Join(h.dir, "missing", "feed.db")
	}
	cfg := fmt.Sprintf("instances: 2\nlisten: %s\nstats_interval: 200ms\nenv: {SQLITE_PATH: %q, PRODUCTS_PATH: %q, JWT_SECRET: %q}\n",
		h.addr(), db, filepath.Join(h.dir, "products.db"), "roll-test-secret-"+strings.Repeat("x", 32))
	path := filepath.Join(h.dir, "cluster.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	argv := []string{filepath.Join(h.bin, "supervisor"), "run", "-config", path, "-socket", h.socket()}
	if agent {
		argv = append(argv, "-agent", net.JoinHostPort(h.ns.Addr, strconv.Itoa(rollAgentPort)))
	}
	cmd := fleetns.Command(h.ns.Name, argv...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "GORACE=atexit_sleep_ms=0"}
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }() // reaps the supervisor; killTree waits on it
	h.mu.Lock()
	h.sup, h.done, h.log = cmd, done, log
	h.mu.Unlock()
}

// ctl runs `supervisor ARGS -socket S` in the host's namespace, as an operator would.
func (h *rollHost) ctl(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	argv := fleetns.Wrap(h.ns.Name)(append([]string{filepath.Join(h.bin, "supervisor")}, append(args, "-socket", h.socket())...))
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	return string(out), err
}

// waitOnline polls `supervisor status -json` until both workers are online.
func (h *rollHost) waitOnline(timeout time.Duration) error {
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		out, err := h.ctl(5*time.Second, "status", "-json")
		if err != nil {
			last = fmt.Sprintf("%v: %s", err, out)
			continue
		}
		var st struct {
			Workers []struct{ Status string }
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			last = err.Error()
			continue
		}
		online := 0
		for _, w := range st.Workers {
			if w.Status == "online" {
				online++
			}
		}
		if len(st.Workers) == 2 && online == 2 {
			return nil
		}
		last = out
	}
	return fmt.Errorf("%s not online after %v (last status: %s)", h.name, timeout, last)
}

// killTree is kill -9 of the supervisor and every process under it: the supervisor is
// stopped first (SIGSTOP) so that it starts no worker meanwhile, then its tree is read
// from /proc and killed at once.
func (h *rollHost) killTree(t testing.TB) {
	t.Helper()
	h.mu.Lock()
	cmd, done := h.sup, h.done
	h.mu.Unlock()
	if cmd == nil {
		return
	}
	pid := cmd.Process.Pid
	syscall.Kill(pid, syscall.SIGSTOP)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if st, err := procStat(pid); err != nil || st.state == 'T' || st.state == 'Z' {
			break
		}
	}
	pids := append([]int{pid}, descendants(pid)...)
	for _, p := range pids {
		syscall.Kill(p, syscall.SIGKILL)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: supervisor %d not gone 10 s after SIGKILL", h.name, pid)
	}
	// The workers were reparented; wait until they are gone (or zombies), so that nothing
	// of this generation holds the port.
	for _, p := range pids[1:] {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if st, err := procStat(p); err != nil || st.state == 'Z' {
				break
			}
		}
	}
	h.mu.Lock()
	h.sup = nil
	h.mu.Unlock()
}

type pstat struct {
	state byte
	ppid  int
}

func procStat(pid int) (pstat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return pstat{}, err
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses; cut at the last ')'.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 2 {
		return pstat{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	ppid, _ := strconv.Atoi(f[1])
	return pstat{state: f[0][0], ppid: ppid}, nil
}

// descendants lists every process under pid, from /proc.
func descendants(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := procStat(p); err == nil {
			children[st.ppid] = append(children[st.ppid], p)
		}
	}
	var out []int
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// rollLoad is traffic through the balancer during a roll: either a pool of clients in this
// process (half GET /feed, half the heavy PATCH; one connection each, kept alive), which
// tells a refused connect from another failure, or two `autocannon -c 64` (rounds mode).
type rollLoad struct {
	stop                   atomic.Bool
	wg                     sync.WaitGroup
	getOK, patchOK         atomic.Int64
	getFailed, patchFailed atomic.Int64
	refused, dials         atomic.Int64
	slow                   atomic.Int64 // requests that took over slowAfter (startPool)
	slowAfter              time.Duration
	maxLatency             atomic.Int64 // ns (startPool)
	firstErr               atomic.Value // string
	clients                int
	cannons                []*exec.Cmd
	cannonOut              []*bytes.Buffer
}

// rollFigures are what a load counted.
type rollFigures struct {
	Requests, GetFailed, PatchFailed, Refused, Reconnects int64
	// Slow: requests (done or failed) that took over the pool's slowAfter, MaxLatency the
	// longest (startPool only): the ones held on a dead link.
	Slow       int64
	MaxLatency time.Duration
	FirstErr   string
}

func (f rollFigures) String() string {
	return fmt.Sprintf("%d requests, %d failed (GET %d, PATCH %d), %d refused, %d reconnects",
		f.Requests, f.GetFailed+f.PatchFailed, f.GetFailed, f.PatchFailed, f.Refused, f.Reconnects)
}

// startPool starts clients goroutines, each one kept-alive connection; a request times out
// after timeout (0: 10 s); one that takes over slowAfter (0: 1 s) is counted slow.
func startPool(url string, clients int, timeout, slowAfter time.Duration) *rollLoad {
	l := &rollLoad{clients: clients, slowAfter: cmp.Or(slowAfter, time.Second)}
	for g := range clients {
		l.wg.Go(func() {
			d := net.Dialer{Timeout: 2 * time.Second}
			c := &http.Client{Timeout: cmp.Or(timeout, 10*time.Second), Transport: &http.Transport{
				MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1,
				DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					l.dials.Add(1)
					return d.DialContext(ctx, network, addr)
				},
			}}
			defer c.CloseIdleConnections()
			for !l.stop.Load() {
				var err error
				t0 := time.Now()
				if g%2 == 0 {
					if err = getFeed(c, url); err == nil {
						l.getOK.Add(1)
					} else {
						l.getFailed.Add(1)
					}
				} else {
					if err = patch(c, url); err == nil {
						l.patchOK.Add(1)
					} else {
						l.patchFailed.Add(1)
					}
				}
				if took := time.Since(t0); took > l.slowAfter {
					l.slow.Add(1)
					for m := l.maxLatency.Load(); int64(took) > m && !l.maxLatency.CompareAndSwap(m, int64(took)); m = l.maxLatency.Load() {
					}
				}
				if err != nil {
					if errors.Is(err, syscall.ECONNREFUSED) {
						l.refused.Add(1)
					}
					l.firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	return l
}

func getFeed(c *http.Client, url string) error {
	resp, err := c.Get(url + "/feed")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return fmt.Errorf("GET /feed: body after %d bytes: %w", n, err)
	}
	if resp.StatusCode != 200 || n < 100 {
		return fmt.Errorf("GET /feed: %s, %d bytes", resp.Status, n)
	}
	return nil
}

// startCannons runs two `autocannon -c 64` for as long as the roll lasts: GET /feed and
// the heavy PATCH (the body internal/ceiling's heavy workload sends).
func startCannons(t testing.TB, bin, url string) *rollLoad {
	t.Helper()
	l := &rollLoad{}
	for _, args := range [][]string{
		{url + "/feed"},
		{"-m", "PATCH", "-H", "Content-Type: application/json", "-b", `{"foo1":"bar"}`, url + "/api/resource/123"},
	} {
		cmd := exec.Command(filepath.Join(bin, "autocannon"), append([]string{"-c", "64", "-d", "3600", "-j", "-n"}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		l.cannons, l.cannonOut = append(l.cannons, cmd), append(l.cannonOut, &out)
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	return l
}

// end stops the load and returns its figures.
func (l *rollLoad) end(t testing.TB) rollFigures {
	t.Helper()
	if l.cannons == nil {
		l.stop.Store(true)
		l.wg.Wait()
		f := rollFigures{
			Requests:  l.getOK.Load() + l.patchOK.Load() + l.getFailed.Load() + l.patchFailed.Load(),
			GetFailed: l.getFailed.Load(), PatchFailed: l.patchFailed.Load(),
			Refused: l.refused.Load(), Reconnects: l.dials.Load() - int64(l.clients),
			Slow: l.slow.Load(), MaxLatency: time.Duration(l.maxLatency.Load()),
		}
		if s, ok := l.firstErr.Load().(string); ok {
			f.FirstErr = s
		}
		return f
	}
	var f rollFigures
	for i, cmd := range l.cannons {
		cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("autocannon: %v\n%s", err, l.cannonOut[i])
		}
		var r struct {
			C2xx       int64 `json:"2xx"`
			Non2xx     int64 `json:"non2xx"`
			Errors     int64 `json:"errors"`
			Resets     int64 `json:"resets"`
			Reconnects int64 `json:"reconnects"`
		}
		if err := json.Unmarshal(l.cannonOut[i].Bytes(), &r); err != nil {
			t.Fatalf("autocannon's report: %v\n%s", err, l.cannonOut[i])
		}
		// autocannon counts a refused connect among its errors.
		failed := r.Errors + r.Non2xx
		f.Requests += r.C2xx + r.Non2xx + r.Errors
		if i == 0 {
			f.GetFailed = failed
		} else {
			f.PatchFailed = failed
		}
		f.Reconnects += r.Reconnects
	}
	return f
}

// rollFleet is two namespace hosts, each a real supervisor with two workers and its agent.
type rollFleet struct {
	net   *fleetns.Net
	hosts []*rollHost
	bin   string
}

func newRollFleet(t *testing.T) *rollFleet {
	t.Helper()
	fleetnstest.Check(t)
	needHAProxy(t)
	needNft(t)
	f := &rollFleet{net: fleetnstest.New(t, 2), bin: rollBinaries(t)}
	for i, ns := range f.net.Hosts {
		h := &rollHost{name: "h" + strconv.Itoa(i), ns: ns, bin: f.bin, dir: t.TempDir(), db: seedtest.Path(t)}
		t.Cleanup(func() {
			if t.Failed() {
				h.mu.Lock()
				if h.log != nil {
					t.Logf("%s's supervisor:\n%s", h.name, h.log.String())
				}
				h.mu.Unlock()
			}
			h.killTree(t)
		})
		h.start(t, true, false)
		f.hosts = append(f.hosts, h)
	}
	for _, h := range f.hosts {
		if err := h.waitOnline(30 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// rollTimes is how long each step of one host's round took.
type rollTimes struct{ drain, down, online, back time.Duration }

func (r rollTimes) total() time.Duration { return r.drain + r.down + r.online + r.back }

// roll takes host h out and back: out (drain it and wait until no request reaches it),
// kill -9 of its supervisor and workers, a new supervisor (agent: with -agent; broken: it
// never comes back), wait until its workers are online (within onlineWithin), in (tell
// the balancer it is ready and wait until the balancer sends to it again). An error stops
// the roll: the caller rolls no further host.
func (f *rollFleet) roll(t *testing.T, h *rollHost, agent, broken bool, onlineWithin time.Duration, out, in func() error) (rollTimes, error) {
	var rt rollTimes
	t0 := time.Now()
	if err := out(); err != nil {
		return rt, fmt.Errorf("%s out: %w", h.name, err)
	}
	t1 := time.Now()
	h.killTree(t)
	h.start(t, agent, broken)
	t2 := time.Now()
	if err := h.waitOnline(onlineWithin); err != nil {
		return rt, err
	}
	t3 := time.Now()
	if err := in(); err != nil {
		return rt, fmt.Errorf("%s in: %w", h.name, err)
	}
	t4 := time.Now()
	return rollTimes{t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), t4.Sub(t3)}, nil
}

// agentOut and agentIn are the roll's steps with the host's own agent: `supervisor drain`
// (returns once the workers' counters stayed still for -quiet) and `supervisor ready`,
// then waitBack until the balancer sends to the host again.
func agentOut(h *rollHost) func() error {
	return func() error {
		if out, err := h.ctl(30*time.Second, "drain", "-quiet", "600ms", "-timeout", "20s"); err != nil {
			return fmt.Errorf("supervisor drain: %v: %s", err, out)
		}
		return nil
	}
}

func agentIn(h *rollHost, waitBack func() error) func() error {
	return func() error {
		if out, err := h.ctl(10*time.Second, "ready"); err != nil {
			return fmt.Errorf("supervisor ready: %v: %s", err, out)
		}
		return waitBack()
	}
}

// poll calls cond every 50 ms until it holds or timeout passes.
func poll(timeout time.Duration, what string, cond func() (bool, string)) error {
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var ok bool
		if ok, last = cond(); ok {
			return nil
		}
	}
	return fmt.Errorf("%s: not after %v (last: %s)", what, timeout, last)
}

func rollRounds(t *testing.T) int {
	n, _ := strconv.Atoi(os.Getenv(RollRoundsEnv))
	return n
}

// TestRoll takes each host out and back under keep-alive load, behind HAProxy and behind
// nftables: `supervisor drain` (in the host's namespace) → kill -9 of the supervisor and
// its workers → a new supervisor → workers online → `supervisor ready`, host after host,
// with no request failed or refused. Behind HAProxy also: the runtime API's drain for a
// host without its agent, a host killed without a drain, and a host that does not come
// back, which stops the roll with the other host serving.
func TestRoll(t *testing.T) {
	f := newRollFleet(t)
	rounds := max(1, rollRounds(t))
	load := func(t *testing.T, url string) *rollLoad {
		if rollRounds(t) > 0 {
			return startCannons(t, f.bin, url)
		}
		return startPool(url, 8, 0, 0)
	}
	check := func(t *testing.T, what string, fig rollFigures, times []rollTimes) {
		t.Helper()
		var sum time.Duration
		for _, r := range times {
			sum += r.total()
		}
		per := time.Duration(0)
		if len(times) > 0 {
			per = sum / time.Duration(len(times))
		}
		t.Logf("%s: %d host rounds, %v per host round (mean); %s", what, len(times), per.Round(time.Millisecond), fig)
		if fig.GetFailed+fig.PatchFailed != 0 || fig.Refused != 0 {
			t.Errorf("%s: %d failed, %d refused (first: %s)", what, fig.GetFailed+fig.PatchFailed, fig.Refused, fig.FirstErr)
		}
		if fig.Requests == 0 {
			t.Errorf("%s: no request made", what)
		}
	}
	logRound := func(t *testing.T, i int, h *rollHost, rt rollTimes) {
		t.Logf("round %d %s: drain %v, kill %v, online %v, ready+back %v: %v", i, h.name,
			rt.drain.Round(time.Millisecond), rt.down.Round(time.Millisecond), rt.online.Round(time.Millisecond),
			rt.back.Round(time.Millisecond), rt.total().Round(time.Millisecond))
	}

	t.Run("nftables", func(t *testing.T) {
		isLive := f.startChecker(t, nil)
		l := load(t, "http://"+net.JoinHostPort(f.net.LB.Addr, strconv.Itoa(hostPort)))
		var times []rollTimes
		for i := range rounds {
			for _, h := range f.hosts {
				rt, err := f.roll(t, h, true, false, 20*time.Second, agentOut(h),
					agentIn(h, func() error { return poll(10*time.Second, h.name+" back in the map", isLive(h.ns.Addr, true)) }))
				if err != nil {
					l.end(t)
					t.Fatal(err)
				}
				logRound(t, i, h, rt)
				times = append(times, rt)
			}
		}
		fig := l.end(t)
		check(t, "behind nftables", fig, times)
		// Behind L4 the clients' connections are the hosts' own: each drain closed those on
		// its host after their next response, and the clients connected again elsewhere.
		if fig.Reconnects == 0 {
			t.Errorf("behind nftables: no client reconnected, though each drain closes kept-alive connections")
		}
	})

	t.Run("haproxy", func(t *testing.T) {
		hp, params := f.startHAProxy(t)
		stat := func(name string) (ServerStat, error) { return serverStat(hp, name) }
		state := func(name, want string) func() (bool, string) { return serverState(hp, name, want) }
		up := func(h *rollHost) func() error {
			return func() error { return poll(10*time.Second, h.name+" UP", state(h.name, "UP")) }
		}
		for _, h := range f.hosts {
			if err := up(h)(); err != nil {
				t.Fatal(err)
			}
		}
		url := "http://" + params.Listen

		t.Run("agent", func(t *testing.T) {
			l := load(t, url)
			var times []rollTimes
			for i := range rounds {
				for j, h := range f.hosts {
					// The last host comes back without its agent, for the runtime API's turn.
					// HAProxy keeps the drain its agent said until something says ready:
					// with the agent gone, the runtime API must.
					agent := !(i == rounds-1 && j == len(f.hosts)-1)
					back := up(h)
					if !agent {
						back = func() error {
							if err := hp.SetState(h.name, "ready"); err != nil {
								return err
							}
							return up(h)()
						}
					}
					rt, err := f.roll(t, h, agent, false, 20*time.Second, agentOut(h), agentIn(h, back))
					if err != nil {
						l.end(t)
						t.Fatal(err)
					}
					logRound(t, i, h, rt)
					times = append(times, rt)
				}
			}
			check(t, "behind HAProxy, drained by the agent", l.end(t), times)
		})

		t.Run("runtime API", func(t *testing.T) {
			// A host whose agent is off: HAProxy ignores an agent it cannot reach, so the
			// drain and the ready are set through its runtime API instead, and the host is
			// out once show stat says no session is left on it (scur 0).
			h := f.hosts[len(f.hosts)-1]
			l := load(t, url)
			rt, err := f.roll(t, h, false, false, 20*time.Second, func() error {
				if err := hp.SetState(h.name, "drain"); err != nil {
					return err
				}
				return poll(10*time.Second, h.name+" DRAIN with scur 0", func() (bool, string) {
					s, err := stat(h.name)
					return err == nil && strings.HasPrefix(s.Status, "DRAIN") && s.Scur == 0, fmt.Sprintf("%+v %v", s, err)
				})
			}, func() error {
				if err := hp.SetState(h.name, "ready"); err != nil {
					return err
				}
				return up(h)()
			})
			if err != nil {
				l.end(t)
				t.Fatal(err)
			}
			logRound(t, 0, h, rt)
			check(t, "behind HAProxy, drained through its runtime API", l.end(t), []rollTimes{rt})
		})

		t.Run("dead host", func(t *testing.T) {
			// kill -9 of h0's whole tree with no drain: the requests it held are retried on
			// h1 (retry-on empty-response: GET, and the heavy PATCH, which stores nothing),
			// new ones too (conn-failure), until the HTTP check takes it DOWN.
			h := f.hosts[0]
			l := load(t, url)
			time.Sleep(300 * time.Millisecond)
			before, _ := stat(h.name)
			t0 := time.Now()
			h.killTree(t)
			err := poll(10*time.Second, h.name+" DOWN", func() (bool, string) {
				s, err := stat(h.name)
				return err == nil && strings.HasPrefix(s.Status, "DOWN"), s.Status
			})
			verdict := time.Since(t0)
			fig := l.end(t)
			if err != nil {
				t.Fatal(err)
			}
			after, _ := stat(h.name)
			t.Logf("h0 killed: DOWN after %v; retries %d, redispatches %d", verdict.Round(time.Millisecond),
				after.Retr-before.Retr, after.Redis-before.Redis)
			check(t, "behind HAProxy, a host killed", fig, nil)
			// Back for the last case.
			h.start(t, true, false)
			if err := h.waitOnline(20 * time.Second); err != nil {
				t.Fatal(err)
			}
			if err := up(h)(); err != nil {
				t.Fatal(err)
			}
		})

		t.Run("host does not come back", func(t *testing.T) {
			// The roll loop over both hosts, h0 restarted broken (its workers cannot open
			// their database): the roll stops at h0, h1 is never touched, and every request
			// is served by h1 meanwhile.
			l := load(t, url)
			h1pid := f.hosts[1].sup.Process.Pid
			var rollErr error
			for i, h := range f.hosts {
				if _, rollErr = f.roll(t, h, true, i == 0, 4*time.Second, agentOut(h), agentIn(h, up(h))); rollErr != nil {
					break
				}
			}
			time.Sleep(500 * time.Millisecond) // h0 down and h1 serving alone, a while longer
			fig := l.end(t)
			if rollErr == nil || !strings.Contains(rollErr.Error(), "h0 not online") {
				t.Fatalf("roll with h0 broken: %v, want h0 not online", rollErr)
			}
			if f.hosts[1].sup == nil || f.hosts[1].sup.Process.Pid != h1pid {
				t.Errorf("h1 was rolled after h0 did not come back")
			}
			s, _ := stat("h0")
			t.Logf("roll stopped: %v; h0 %s", rollErr, s.Status)
			if strings.HasPrefix(s.Status, "UP") {
				t.Errorf("h0 is %s with no worker online", s.Status)
			}
			check(t, "behind HAProxy, h0 not back", fig, nil)
		})
	})
}

// startHAProxy runs the production haproxy.cfg in the balancer namespace in front of the
// fleet's hosts (agent and HTTP checks every 200 ms), stopped when the test ends, its log
// shown when the test failed. mods change the parameters before it starts.
func (f *rollFleet) startHAProxy(t *testing.T, mods ...func(*HAProxyParams)) (*HAProxy, HAProxyParams) {
	t.Helper()
	lb := f.net.LB
	var servers []Server
	for _, h := range f.hosts {
		servers = append(servers, Server{Name: h.name, Addr: h.addr()})
	}
	params := HAProxyParams{
		Listen: net.JoinHostPort(lb.Addr, "8080"), Servers: servers, AgentPort: rollAgentPort, Threads: 1,
		CheckInter: 200 * time.Millisecond, AgentInter: 200 * time.Millisecond,
	}
	for _, m := range mods {
		m(&params)
	}
	var hlog syncBuffer
	hp, err := StartHAProxy(context.Background(), readTemplate(t, "haproxy/haproxy.cfg"),
		HAProxyOptions{Dir: t.TempDir(), Params: params, Stderr: &hlog, Wrap: fleetns.Wrap(lb.Name)})
	if err != nil {
		t.Fatalf("%v\n%s", err, hlog.String())
	}
	t.Cleanup(func() {
		if err := hp.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("haproxy:\n%s", hlog.String())
		}
	})
	return hp, params
}

// startChecker runs the nftables checker in the balancer namespace over the fleet's hosts
// (agents asked every 100 ms), onLoad (when not nil) told of every map it loads, until the
// test ends, and waits for every host in the map. The function it returns polls whether
// addr is in the map (want true) or out of it (want false).
func (f *rollFleet) startChecker(t *testing.T, onLoad func([]NftHost)) func(addr string, want bool) func() (bool, string) {
	t.Helper()
	var hosts, agents []string
	for _, h := range f.hosts {
		hosts = append(hosts, h.ns.Addr)
		agents = append(agents, net.JoinHostPort(h.ns.Addr, strconv.Itoa(rollAgentPort)))
	}
	var live atomic.Value // []NftHost
	live.Store([]NftHost(nil))
	ck := &Checker{
		Template: readTemplate(t, "nftables/balancer.nft"),
		Params:   NftParams{VIP: f.net.LB.Addr, Port: hostPort},
		Hosts:    hosts, Agents: agents, Interval: 100 * time.Millisecond,
		Nft: []string{"nsenter", "--net=/run/netns/" + f.net.LB.Name, "--", "nft"},
		OnLoad: func(l []NftHost) {
			live.Store(l)
			if onLoad != nil {
				onLoad(l)
			}
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- ck.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != context.Canceled {
			t.Errorf("checker: %v", err)
		}
	})
	isLive := func(addr string, want bool) func() (bool, string) {
		return func() (bool, string) {
			l := live.Load().([]NftHost)
			return slices.ContainsFunc(l, func(h NftHost) bool { return h.Addr == addr }) == want, fmt.Sprint(l)
		}
	}
	for _, h := range f.hosts {
		if err := poll(10*time.Second, h.name+" live", isLive(h.ns.Addr, true)); err != nil {
			t.Fatal(err)
		}
	}
	return isLive
}

// serverStat is server name's line of HAProxy's show stat.
func serverStat(hp *HAProxy, name string) (ServerStat, error) {
	ss, err := hp.Stat()
	for _, s := range ss {
		if s.Name == name {
			return s, nil
		}
	}
	return ServerStat{}, fmt.Errorf("show stat: no server %s (%v)", name, err)
}

// serverState polls whether server name's state is want: the first word of its status
// ("DRAIN (agent)", "DOWN 1/2").
func serverState(hp *HAProxy, name, want string) func() (bool, string) {
	return func() (bool, string) {
		s, err := serverStat(hp, name)
		if err != nil {
			return false, err.Error()
		}
		return strings.Fields(s.Status + " ?")[0] == want, s.Status
	}
}

// setLink takes host h's link down or up (its own end of the veth: a cable pulled at the
// host).
func setLink(t *testing.T, h *rollHost, up bool) {
	t.Helper()
	if err := fleetns.SetLink(h.ns, up); err != nil {
		t.Fatal(err)
	}
}
