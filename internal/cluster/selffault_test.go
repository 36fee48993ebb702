package cluster

import (
	"context"
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
		ExpBackoffRestartDelay: Duration(10 * time.Millisecond)}
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
	if got := pids(s); !slices.Equal(got, before) {
		t.Errorf("workers %v, want the same %v", got, before)
	}
	if !strings.Contains(logs.String(), "every worker is silent at once") {
		t.Error("the whole-cluster silence was not logged")
	}
	get(t, s.Addr())
}
