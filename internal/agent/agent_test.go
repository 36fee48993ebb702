package agent

import (
	"bufio"
	"io"
	"math"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestAnswer(t *testing.T) {
	tests := []struct {
		name  string
		st    State
		ready bool
		want  string
	}{
		{"all online", State{Online: 4, Desired: 4}, false, "up 100%\n"},
		{"1 of 4", State{Online: 1, Desired: 4}, false, "up 25%\n"},
		{"3 of 4", State{Online: 3, Desired: 4}, false, "up 75%\n"},
		{"1 of 200 clamps to 1%", State{Online: 1, Desired: 200}, false, "up 1%\n"},
		{"more online than wanted (scale-down) clamps to 100%", State{Online: 5, Desired: 4}, false, "up 100%\n"},
		{"out of a drain", State{Online: 3, Desired: 4}, true, "up ready 75%\n"},
		{"none serving", State{Online: 0, Desired: 4}, false, "down #no worker serves\n"},
		{"none serving, out of a drain", State{Online: 0, Desired: 4}, true, "down #no worker serves\n"},
		{"no slots", State{}, false, "down #no worker serves\n"},
		{"drained", State{Online: 4, Desired: 4, Drained: true}, false, "drain #drained\n"},
		{"drained with none serving", State{Online: 0, Desired: 4, Drained: true}, false, "drain #drained\n"},
		{"stopping: down, which the next up ends by itself", State{Online: 4, Desired: 4, Stopping: true}, false, "down #stopping\n"},
		{"stopping, workers gone", State{Desired: 4, Stopping: true}, true, "down #stopping\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Answer(tt.st, tt.ready); got != tt.want {
				t.Errorf("Answer(%+v, %v) = %q, want %q", tt.st, tt.ready, got, tt.want)
			}
		})
	}
}

// check is what HAProxy does: connect, send agent-send's text if any, read to the end.
func check(t *testing.T, addr, send string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if send != "" {
		io.WriteString(c, send)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	return string(b)
}

func TestServer(t *testing.T) {
	var st atomic.Pointer[State]
	st.Store(&State{Online: 2, Desired: 2})
	s, err := Listen("127.0.0.1:0", Config{State: func() State { return *st.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().String()
	tests := []struct {
		name, send string
		st         State
		want       string
	}{
		{"plain check", "", State{Online: 2, Desired: 2}, "up 100%\n"},
		{"with agent-send text", "be_web/h1\n", State{Online: 1, Desired: 2}, "up 50%\n"},
		{"drained", "", State{Online: 2, Desired: 2, Drained: true}, "drain #drained\n"},
		{"out of its own drain: ready, once", "", State{Online: 2, Desired: 2}, "up ready 100%\n"},
		{"then up alone", "", State{Online: 2, Desired: 2}, "up 100%\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st.Store(&tt.st)
			if got := check(t, addr, tt.send); got != tt.want {
				t.Errorf("answer %q, want %q", got, tt.want)
			}
		})
	}
	// A client that never closes holds nothing: Close waits for no connection.
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if err := s.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Error("still accepting after Close")
	}
}

// TestServerUnderIdleConnections: 200 connections an attacker opens and holds, reading
// nothing and closing nothing, delay no check: the next is answered within 1 s, and each
// of the attacker's connections got its line and the end of the stream (64 linger for
// their close, the rest are closed at once).
// Before, the agent held each connection up to 2 s waiting for the asker to close, 64 at
// once, and closed the others unanswered: two silent rounds took the host out of the
// nftables balancer.
func TestServerUnderIdleConnections(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	s, err := Listen("127.0.0.1:0", Config{State: func() State { return State{Online: 1, Desired: 1} }, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr := s.Addr().String()
	idle := make([]net.Conn, 0, 200)
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 200 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(start.Add(time.Second))
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "up 100%\n" {
		t.Fatalf("fresh check beside 200 idle connections: %q, %v after %v; want the line and EOF within 1 s", b, err, time.Since(start))
	}
	for i, c := range idle {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if b, err := io.ReadAll(c); err != nil || string(b) != "up 100%\n" {
			t.Fatalf("idle connection %d: %q, %v; want its line and EOF", i, b, err)
		}
	}
	// The crowd is logged, once for the lot (once per LogEvery, 10 s).
	if got := logs.FilterMessageSnippet("more connections held open").Len(); got != 1 {
		t.Errorf("%d log lines about the crowd, want 1: %v", got, logs.All())
	}
}

// TestServerAnswersAtOnce: the agent ends its stream right after the line, whether the
// asker sent nothing, an agent-send line, or keeps sending; it never waits for the
// asker's close (HAProxy reads one line).
func TestServerAnswersAtOnce(t *testing.T) {
	s, err := Listen("127.0.0.1:0", Config{State: func() State { return State{Online: 1, Desired: 2} }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, send := range []string{"", "be_web/h1\n", strings.Repeat("x", 64<<10)} {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if send != "" {
			go io.WriteString(c, send) // may fail once the agent closes: the reset is the asker's
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if line != "up 50%\n" {
			t.Errorf("sent %d bytes: read %q, %v; want the line within 1 s", len(send), line, err)
		}
		c.Close()
	}
}

// TestThrottle: one report per interval, counting the events it stands for.
func TestThrottle(t *testing.T) {
	th := throttle{every: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		at     time.Duration
		n      int
		report bool
	}{
		{0, 1, true},
		{time.Second, 0, false},
		{2 * time.Second, 0, false},
		{10 * time.Second, 3, true},
		{15 * time.Second, 0, false},
		{time.Minute, 2, true},
	} {
		n, report := th.note(t0.Add(tc.at))
		if n != tc.n || report != tc.report {
			t.Errorf("note at %v = %d, %v; want %d, %v", tc.at, n, report, tc.n, tc.report)
		}
	}
}

// TestWeight: online÷desired in percent, 1..100, whatever the counts.
func TestWeight(t *testing.T) {
	for _, tc := range []struct{ online, desired, want int }{
		{1, 4, 25}, {0, 4, 1}, {4, 4, 100}, {9, 4, 100}, {1, 0, 1}, {math.MaxInt, 3, 100},
	} {
		if got := Weight(tc.online, tc.desired); got != tc.want {
			t.Errorf("Weight(%d, %d) = %d, want %d", tc.online, tc.desired, got, tc.want)
		}
	}
}

// TestReadyOnlyOutOfItsOwnDrain: "ready", which ends any drain in HAProxy (the operator's
// through the runtime API too), is said only to an asker that heard this agent's "drain",
// once, and to every asker for ReadyFor after SetReady; the askers are remembered with
// what they were told and what they sent.
func TestReadyOnlyOutOfItsOwnDrain(t *testing.T) {
	var st atomic.Pointer[State]
	st.Store(&State{Online: 2, Desired: 2})
	now := time.Unix(1000, 0)
	var clock atomic.Int64
	clock.Store(now.UnixNano())
	s, err := Listen("127.0.0.1:0", Config{State: func() State { return *st.Load() }, ReadyFor: 10 * time.Second,
		Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr := s.Addr().String()
	steps := []struct {
		name    string
		drained bool
		ready   bool          // SetReady before the check
		advance time.Duration // the clock moves before the check
		want    string
	}{
		{"up: no ready (a runtime-API drain would stay)", false, false, time.Second, "up 100%\n"},
		{"again", false, false, time.Second, "up 100%\n"},
		{"drained by the operator", true, false, time.Second, "drain #drained\n"},
		{"back: ready, once", false, false, time.Second, "up ready 100%\n"},
		{"then no more", false, false, time.Second, "up 100%\n"},
		{"supervisor ready: ready once", false, true, time.Second, "up ready 100%\n"},
		{"inside the window, told already", false, false, time.Second, "up 100%\n"},
		{"SetReady again, past its window", false, true, 20 * time.Second, "up 100%\n"},
	}
	for _, s2 := range steps {
		st.Store(&State{Online: 2, Desired: 2, Drained: s2.drained})
		if s2.ready {
			s.SetReady()
		}
		clock.Add(int64(s2.advance))
		if got := check(t, addr, "onehost-test\n"); got != s2.want {
			t.Errorf("%s: %q, want %q", s2.name, got, s2.want)
		}
	}
	var as []Asker
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if as = s.Askers(); len(as) == 1 && as[0].Said == "onehost-test" {
			break
		}
	}
	if len(as) != 1 || as[0].Addr != "127.0.0.1" || as[0].Said != "onehost-test" || as[0].Answer != "up 100%" || as[0].HeardDrain.IsZero() || as[0].HeardReady.IsZero() {
		t.Errorf("Askers = %+v, want one, 127.0.0.1, what it sent, its last answer and when it heard drain and ready", as)
	}
}
