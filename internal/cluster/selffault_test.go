package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestStallClock(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := newStallClock(1500*time.Millisecond, t0)
	steps := []struct {
		name       string
		at         time.Duration // since t0
		stall, tot time.Duration
	}{
		{"on time", time.Second, 0, 0},
		{"late but allowed", 2400 * time.Millisecond, 0, 0},
		{"stalled", 14 * time.Second, 11600 * time.Millisecond, 11600 * time.Millisecond},
		{"an older observation changes nothing", 13 * time.Second, 0, 11600 * time.Millisecond},
		{"on time again", 15 * time.Second, 0, 11600 * time.Millisecond},
		{"stalled again", 18 * time.Second, 3 * time.Second, 14600 * time.Millisecond},
	}
	for _, st := range steps {
		stall, tot := c.observe(t0.Add(st.at))
		if stall != st.stall || tot != st.tot {
			t.Errorf("%s: observe = %v, %v; want %v, %v", st.name, stall, tot, st.stall, st.tot)
		}
	}
}

// notifications records what the supervisor tells systemd.
type notifications struct {
	mu  sync.Mutex
	all []string
}

func (n *notifications) add(s string) { n.mu.Lock(); n.all = append(n.all, s); n.mu.Unlock() }

func (n *notifications) list() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.all)
}

func (n *notifications) count(prefix string) int {
	c := 0
	for _, s := range n.list() {
		if strings.HasPrefix(s, prefix) {
			c++
		}
	}
	return c
}

// lifecycle is the notifications other than the watchdog and STATUS= updates, each cut to
// its first line.
func (n *notifications) lifecycle() []string {
	var out []string
	for _, s := range n.list() {
		if s == "WATCHDOG=1" || strings.HasPrefix(s, "STATUS=") {
			continue
		}
		first, _, _ := strings.Cut(s, "\n")
		out = append(out, first)
	}
	return out
}

func TestNotifyLifecycle(t *testing.T) {
	t.Parallel()
	n := &notifications{}
	t.Cleanup(func() { // runs after the cluster's own cleanup stopped it
		want := []string{"READY=1", "RELOADING=1", "READY=1", "STOPPING=1"}
		if got := n.lifecycle(); !slices.Equal(got, want) {
			t.Errorf("notifications %q, want %q", got, want)
		}
	})
	s, _ := startClusterOpts(t, Config{Instances: 2}, Options{Notify: n.add})
	waitFor(t, 5*time.Second, "READY=1", func() bool { return n.count("READY=1") == 1 })
	first := n.list()[0]
	if !strings.Contains(first, "STATUS=2/2 online, 0 errored, 0 req/s") {
		t.Errorf("first notification %q: want READY=1 with the summary", first)
	}
	if err := s.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	var reloading string
	for _, m := range n.list() {
		if strings.HasPrefix(m, "RELOADING=1") {
			reloading = m
		}
	}
	if !strings.Contains(reloading, "\nMONOTONIC_USEC=") {
		t.Errorf("reload notification %q lacks MONOTONIC_USEC", reloading)
	}
}

// TestNotifyReadyWithErroredSlot: a slot that errors does not hold READY=1 back; the
// status says so.
func TestNotifyReadyWithErroredSlot(t *testing.T) {
	t.Parallel()
	n := &notifications{}
	wait := true // online only when it says so, which `false` never does
	cfg := Config{Instances: 1, Command: []string{"false"}, Listen: "127.0.0.1:0", MaxRestarts: 1, WaitReady: &wait,
		// Every exit unstable, however slow a loaded machine makes one start of `false`.
		MinUptime: Duration(time.Minute), ExpBackoffRestartDelay: Duration(10 * time.Millisecond)}
	s, err := New(cfg, Options{Notify: n.add})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	waitFor(t, 10*time.Second, "READY=1", func() bool { return n.count("READY=1") == 1 })
	if got := n.list()[0]; !strings.Contains(got, "0/1 online, 1 errored") {
		t.Errorf("READY notification %q: want the errored slot counted", got)
	}
}

func TestWatchdogFromTheLoop(t *testing.T) {
	t.Parallel()
	n := &notifications{}
	s, _ := startClusterOpts(t, Config{Instances: 1}, Options{Notify: n.add, Watchdog: 20 * time.Millisecond})
	waitFor(t, 5*time.Second, "watchdog notifications", func() bool { return n.count("WATCHDOG=1") >= 5 })
	release := make(chan struct{})
	s.post(func() { <-release }) // the loop is wedged
	time.Sleep(50 * time.Millisecond)
	during := n.count("WATCHDOG=1")
	time.Sleep(300 * time.Millisecond)
	if got := n.count("WATCHDOG=1"); got != during {
		t.Errorf("%d watchdog notifications while the loop was wedged, want none", got-during)
	}
	close(release)
	waitFor(t, 5*time.Second, "the watchdog again", func() bool { return n.count("WATCHDOG=1") > during+2 })
}

// TestLoopStallKillsNobody: the supervisor's loop does not run for three heartbeat timeouts
// (as under SIGSTOP; TestReliability/SupervisorStall stops the real process): its workers
// answered the whole time, so none is killed when it runs again.
func TestLoopStallKillsNobody(t *testing.T) {
	t.Parallel()
	s, logs := startClusterOpts(t, Config{Instances: 2, StatsInterval: Duration(100 * time.Millisecond),
		HeartbeatTimeout: Duration(400 * time.Millisecond)}, Options{})
	before := pids(s)
	release := make(chan struct{})
	s.post(func() { <-release })
	time.Sleep(1200 * time.Millisecond)
	close(release)
	time.Sleep(800 * time.Millisecond) // two heartbeat timeouts after it runs again
	if got := pids(s); !slices.Equal(got, before) {
		t.Errorf("workers %v after the stall, want %v", got, before)
	}
	for _, r := range s.Status() {
		if r.Restarts != 0 || r.Status != StateOnline {
			t.Errorf("after the stall: %+v", r)
		}
	}
	if !strings.Contains(logs.String(), "supervisor was not running") {
		t.Error("the stall was not logged")
	}
}

// TestSilenceKillsOneAtATime: two of three workers stopped: one is killed after
// heartbeat_timeout, the other only a heartbeat_timeout later.
func TestSilenceKillsOneAtATime(t *testing.T) {
	t.Parallel()
	hb := 1500 * time.Millisecond
	s := startCluster(t, Config{Instances: 3, StatsInterval: Duration(100 * time.Millisecond), HeartbeatTimeout: Duration(hb)})
	victims := pids(s)[:2]
	for _, p := range victims {
		if err := syscall.Kill(p, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	stopped := time.Now()
	var firstGone time.Time
	waitFor(t, 10*time.Second, "one stopped worker killed", func() bool {
		if gone(victims[0]) || gone(victims[1]) {
			firstGone = time.Now()
			return true
		}
		return false
	})
	if gone(victims[0]) && gone(victims[1]) {
		t.Fatal("both stopped workers killed at once")
	}
	waitFor(t, 10*time.Second, "the other killed too", func() bool { return gone(victims[0]) && gone(victims[1]) })
	t.Logf("first killed %v after the stop, the second %v later (heartbeat_timeout %v)",
		firstGone.Sub(stopped).Round(10*time.Millisecond), time.Since(firstGone).Round(10*time.Millisecond), hb)
	if gap := time.Since(firstGone); gap < hb-300*time.Millisecond {
		t.Errorf("second kill %v after the first, want about heartbeat_timeout (%v)", gap, hb)
	}
}

// TestAllSilentKillsNone: every worker silent at once is the host's trouble: none is
// killed, the log says so, and they serve again when they run.
func TestAllSilentKillsNone(t *testing.T) {
	t.Parallel()
	s, logs := startClusterOpts(t, Config{Instances: 2, StatsInterval: Duration(100 * time.Millisecond),
		HeartbeatTimeout: Duration(300 * time.Millisecond)}, Options{})
	before := pids(s)
	for _, p := range before {
		syscall.Kill(p, syscall.SIGSTOP)
	}
	time.Sleep(1200 * time.Millisecond)
	for _, p := range before {
		syscall.Kill(p, syscall.SIGCONT)
	}
	time.Sleep(300 * time.Millisecond)
	t.Logf("%d workers stopped for 1.2 s (heartbeat_timeout 300 ms), then resumed together", len(before))
	if got := pids(s); !slices.Equal(got, before) {
		t.Errorf("workers %v, want the same %v", got, before)
	}
	if !strings.Contains(logs.String(), "every worker is silent at once") {
		t.Error("the whole-cluster silence was not logged")
	}
	get(t, s.Addr())
}

// TestStaggeredWakeKillsNone: every worker silent at once, then they wake one after
// another, a heartbeat_timeout apart: the first to answer does not make the others a
// partial silence, and none is killed.
func TestStaggeredWakeKillsNone(t *testing.T) {
	t.Parallel()
	hb := 400 * time.Millisecond
	s, logs := startClusterOpts(t, Config{Instances: 3, StatsInterval: Duration(100 * time.Millisecond),
		HeartbeatTimeout: Duration(hb)}, Options{})
	before := pids(s)
	for _, p := range before {
		syscall.Kill(p, syscall.SIGSTOP)
	}
	t.Cleanup(func() {
		for _, p := range before {
			syscall.Kill(p, syscall.SIGCONT)
		}
	})
	time.Sleep(3 * hb)
	for i, p := range before {
		if i > 0 {
			time.Sleep(hb)
		}
		syscall.Kill(p, syscall.SIGCONT)
	}
	time.Sleep(hushGrace * hb)
	t.Logf("%d workers woke %v apart after %v of silence", len(before), hb, 3*hb)
	if got := pids(s); !slices.Equal(got, before) {
		t.Errorf("workers %v after a staggered wake-up, want the same %v", got, before)
	}
	if strings.Contains(logs.String(), "missed its heartbeat") {
		t.Error("a worker was killed for silence while the cluster woke")
	}
	if !strings.Contains(logs.String(), "woke from its silence") {
		t.Error("the end of the whole-cluster silence was not logged")
	}
}

// TestSilentAfterTheWakeIsKilled: after a whole-cluster silence, a worker that stays
// silent once the others woke is still replaced, hushGrace heartbeat_timeouts after the
// last of them.
func TestSilentAfterTheWakeIsKilled(t *testing.T) {
	t.Parallel()
	hb := 400 * time.Millisecond
	s := startCluster(t, Config{Instances: 3, StatsInterval: Duration(100 * time.Millisecond), HeartbeatTimeout: Duration(hb)})
	before := pids(s)
	for _, p := range before {
		syscall.Kill(p, syscall.SIGSTOP)
	}
	t.Cleanup(func() { syscall.Kill(before[2], syscall.SIGCONT) })
	time.Sleep(3 * hb)
	syscall.Kill(before[0], syscall.SIGCONT)
	syscall.Kill(before[1], syscall.SIGCONT)
	woke := time.Now()
	waitFor(t, 10*time.Second, "the worker still stopped killed", func() bool { return gone(before[2]) })
	after := time.Since(woke)
	t.Logf("the one still silent killed %v after the others woke", after.Round(time.Millisecond))
	if after < hushGrace*hb-hb/2 {
		t.Errorf("killed %v after the others woke, want about %d heartbeat_timeouts (%v)", after, hushGrace, hushGrace*hb)
	}
	if gone(before[0]) || gone(before[1]) {
		t.Error("a worker that woke was killed")
	}
}

// TestStopOnceDuringReload: a stop while a reload runs, then a second one (a second
// signal: kill now): systemd hears STOPPING=1 once, and no READY=1 after it from the
// reload that the stop ended.
func TestStopOnceDuringReload(t *testing.T) {
	t.Parallel()
	n := &notifications{}
	modeFile := filepath.Join(t.TempDir(), "mode")
	os.WriteFile(modeFile, []byte("ok"), 0o600)
	log, _ := testLogger(t)
	wait := true
	cfg := Config{Instances: 2, Command: []string{os.Args[0]}, Listen: "127.0.0.1:0", WaitReady: &wait,
		ListenTimeout: Duration(10 * time.Second)}
	s, err := New(cfg, Options{Notify: n.add, Logger: log, Environ: append(workerEnv(), "FAKE_MODE_FILE="+modeFile)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	waitFor(t, 10*time.Second, "READY=1", func() bool { return n.count("READY=1") == 1 })
	os.WriteFile(modeFile, []byte("notready"), 0o600) // the reload's new worker never gets ready
	reloaded := make(chan error, 1)
	go func() { reloaded <- s.Reload(context.Background()) }()
	waitFor(t, 5*time.Second, "RELOADING=1", func() bool { return n.count("RELOADING=1") == 1 })
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(context.Background()) }() // waits for the reload
	waitFor(t, 5*time.Second, "STOPPING=1", func() bool { return n.count("STOPPING=1") == 1 })
	s.Kill() // the second signal
	if err := <-reloaded; err == nil {
		t.Error("the reload the stop ended reports success")
	}
	<-stopped
	want := []string{"READY=1", "RELOADING=1", "STOPPING=1"}
	if got := n.lifecycle(); !slices.Equal(got, want) {
		t.Errorf("notifications %q, want %q", got, want)
	}
	if err := s.Reload(context.Background()); !errors.Is(err, ErrStopped) {
		t.Errorf("reload after the stop: %v, want ErrStopped", err)
	}
}

// TestUptimeAcrossStall: the restart budgets count a worker's uptime as the time the
// supervisor itself ran while the worker lived, so that a crash loop does not look stable
// across a stall of the supervisor. A worker that dies during the stall is therefore
// counted up to the stall's start only: the supervisor cannot tell when, while it was
// away, the worker died (wait(2) gives no time of death).
func TestUptimeAcrossStall(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                  string
		before, stall, killAt time.Duration // killAt: into the stall, or after it if > stall
	}{
		{"crash during the stall", 1200 * time.Millisecond, 2 * time.Second, 600 * time.Millisecond},
		{"crash after the stall", 600 * time.Millisecond, 1200 * time.Millisecond, 1800 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, logs := startClusterOpts(t, Config{Instances: 1, StatsInterval: Duration(100 * time.Millisecond)}, Options{})
			// The expectation is built from the times things happened, not the nominal
			// sleeps: on a loaded machine the worker starts well before startClusterOpts
			// returns, and sleeps overrun.
			var started time.Time
			pid := 0
			s.call(func() { started, pid = s.slots[0].cur.started, s.slots[0].cur.pid })
			time.Sleep(c.before)
			release := make(chan struct{})
			stallBegan := make(chan time.Time, 1)
			s.post(func() { stallBegan <- time.Now(); <-release })
			var killed, released time.Time
			if c.killAt < c.stall {
				time.Sleep(c.killAt)
				syscall.Kill(pid, syscall.SIGKILL)
				killed = time.Now()
				time.Sleep(c.stall - c.killAt)
				released = time.Now()
				close(release)
			} else {
				time.Sleep(c.stall)
				released = time.Now()
				close(release)
				time.Sleep(c.killAt - c.stall)
				syscall.Kill(pid, syscall.SIGKILL)
				killed = time.Now()
			}
			began := <-stallBegan
			// Died in the stall: counted up to the stall's start. After it: its life
			// less the stall.
			want := began.Sub(started)
			if killed.After(released) {
				want = killed.Sub(started) - released.Sub(began)
			}
			var m []string
			waitFor(t, 5*time.Second, "the crash logged", func() bool {
				m = regexp.MustCompile(`worker crashed\t.*"uptime": "([^"]+)"`).FindStringSubmatch(logs.String())
				return m != nil
			})
			up, err := time.ParseDuration(m[1])
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("lived %v, counted %v, want about %v", killed.Sub(started).Round(time.Millisecond), up, want.Round(time.Millisecond))
			// The stall clock sees a stall from its last observation before it (up to one
			// stats_interval earlier) to its first after: the count may fall short by that
			// and by the loop's own delays; counting the stall would be 1.2 s or more over.
			if d := up - want; d < -400*time.Millisecond || d > 400*time.Millisecond {
				t.Errorf("uptime counted %v, want about %v (lived %v, the supervisor away %v)", up, want, killed.Sub(started), released.Sub(began))
			}
		})
	}
}
