// Package agent answers HAProxy's agent-check for a host of workers: HAProxy connects to
// the agent's port, may send the text of its agent-send setting, reads one line and
// closes. The line is made of words (HAProxy 2.6's configuration manual, "agent-check"):
// operational ones (up, down), administrative ones (ready, drain, maint) and a weight N%
// relative to the server's configured weight.
//
// The answer for a host follows its workers and its operator:
//   - "drain" while drained (`supervisor drain`): HAProxy sends the host no new
//     connection, and keeps those it has;
//   - "down" while the supervisor stops, or when no worker serves: an operational state,
//     which the next "up" ends by itself, so that a supervisor started again after a stop
//     is back in the balancer without remembering that it said it;
//   - otherwise "up N%", N the share of the wanted workers that serve, clamped to 1..100:
//     a host with 1 of its 4 workers takes a quarter of the traffic.
//
// "drain" is an administrative state, and HAProxy leaves it only on the word "ready", which
// also ends a drain or maintenance the operator set through HAProxy's runtime API. So the
// agent says "ready" only on its own way out of a drain it announced: to each asker that
// heard its "drain", once (until it has read it), and to every asker for a while after
// `supervisor ready` (SetReady: the operator asks for the host back, whatever drained it).
// A host drained through the runtime API stays drained until the operator readies it.
//
// The agent remembers who asked (Askers: the address, when, what it was told, what it
// sent), so that `supervisor drain` can say which balancer heard it.
//
// Answers never wait on the cluster (State reads snapshots) nor on the asker: the line and
// the end of the stream (FIN) are written the moment a connection is accepted, in the
// accept loop itself, so no number of connections held open by someone else can delay or
// take the place of HAProxy's next check. After that the connection lingers up to
// Config.Linger for the asker's close, reading and dropping what it sends (HAProxy's
// agent-send): a socket closed with input unread would answer it with a reset, which can
// cost the asker the line. At most Config.MaxLingering linger at once; past that a
// connection is closed at once, after reading what already arrived. Failures (accept,
// write) and connections closed at once for want of a slot (someone holds many open) are
// logged at most once per Config.LogEvery each, with the count since the last line.
//
// This file holds the answer (State, Answer, Weight) and the server.
package agent

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// DefaultPort is the agent's port in the project's configurations, templates and docs
// (HAProxy's agent-port).
const DefaultPort = 9777

// State is what an answer says of the host.
type State struct {
	// Online workers serve, out of Desired.
	Online, Desired int
	// Drained: the operator took the host out (`supervisor drain`).
	Drained bool
	// Stopping: the supervisor is stopping.
	Stopping bool
}

// Answer is the reply line for st, newline included; ready adds "ready" to an "up" (the
// way out of a drain: see the package comment).
func Answer(st State, ready bool) string {
	switch {
	case st.Stopping:
		return "down #stopping\n"
	case st.Drained:
		return "drain #drained\n"
	case st.Online <= 0 || st.Desired <= 0:
		return "down #no worker serves\n"
	}
	if ready {
		return "up ready " + strconv.Itoa(Weight(st.Online, st.Desired)) + "%\n"
	}
	return "up " + strconv.Itoa(Weight(st.Online, st.Desired)) + "%\n"
}

// Weight is online×100÷desired, clamped to 1..100: a host that serves at all keeps some
// traffic (HAProxy's 0% would drain it), and a scale-down in progress (more online than
// wanted) is not more than whole. An agent's weight is never more than 100 %: the ceiling
// HAProxy and the nftables checker put on what they read (256 %) is for agents not ours.
func Weight(online, desired int) int {
	if desired <= 0 {
		return 1
	}
	if online >= desired { // also spares online×100 an overflow
		return 100
	}
	return min(max(online*100/desired, 1), 100)
}

// Config configures a Server. The zero value (plus State) works.
type Config struct {
	// State returns the host's state for an answer; it must not block: it is called in
	// the accept loop. Required.
	State func() State
	// Logger receives the agent's problems. Default: none.
	Logger *zap.Logger
	// Timeout bounds the write of one answer. Default 1 s. A freshly accepted connection's
	// send buffer takes the line at once, so the bound is never reached in practice.
	Timeout time.Duration
	// Linger is how long an answered connection waits for the asker's close. Default 1 s.
	Linger time.Duration
	// MaxLingering bounds the answered connections that wait for their asker's close at
	// once; past it they are closed at once. Default 64.
	MaxLingering int
	// LogEvery is the least time between two log lines about failed accepts or answers;
	// each line counts the failures since the one before. Default 10 s.
	LogEvery time.Duration
	// ReadyFor is how long after SetReady every asker is told "ready" (once each). Default
	// 30 s: longer than any agent-inter in use.
	ReadyFor time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Server answers agent checks on a listener until Close.
type Server struct {
	cfg     Config
	ln      net.Listener
	done    chan struct{} // closed when the accept loop has returned
	linger  chan struct{} // a slot per lingering connection
	lingers sync.WaitGroup
	once    sync.Once
	askers  askers
}

// Listen binds addr (HOST:PORT; port 0 picks one) and starts answering.
func Listen(addr string, cfg Config) (*Server, error) {
	if cfg.State == nil {
		return nil, errors.New("agent: no State")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("agent: listen on %s: %w", addr, err)
	}
	return Serve(ln, cfg), nil
}

// Serve answers agent checks on ln, which the Server owns from now on.
func Serve(ln net.Listener, cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.LogEvery <= 0 {
		cfg.LogEvery = 10 * time.Second
	}
	if cfg.Linger <= 0 {
		cfg.Linger = time.Second
	}
	if cfg.MaxLingering <= 0 {
		cfg.MaxLingering = 64
	}
	if cfg.ReadyFor <= 0 {
		cfg.ReadyFor = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, ln: ln, done: make(chan struct{}), linger: make(chan struct{}, cfg.MaxLingering),
		askers: askers{by: map[string]*Asker{}}}
	go s.accept()
	return s
}

// Addr is the address answered (the real port when asked for 0).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops answering and waits for the accept loop and the lingering connections (at
// most Linger).
func (s *Server) Close() error {
	var err error
	s.once.Do(func() { err = s.ln.Close() })
	<-s.done
	s.lingers.Wait()
	return err
}

// accept answers each connection as it comes, and hands it to a lingering goroutine or
// closes it before it accepts the next.
func (s *Server) accept() {
	defer close(s.done)
	acceptErrs := throttle{every: s.cfg.LogEvery}
	answerErrs := throttle{every: s.cfg.LogEvery}
	crowded := throttle{every: s.cfg.LogEvery}
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors and the like: keep going, and say so now and then.
			if n, ok := acceptErrs.note(time.Now()); ok {
				s.cfg.Logger.Warn("agent: accept failed", zap.Int("failures", n), zap.Error(err))
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		lingers, err := s.answer(c)
		if err != nil {
			if n, ok := answerErrs.note(time.Now()); ok {
				s.cfg.Logger.Warn("agent: answer failed", zap.Int("failures", n),
					zap.Stringer("remote", c.RemoteAddr()), zap.Error(err))
			}
		} else if !lingers {
			// More askers at once than HAProxy makes: someone else holds connections open.
			if n, ok := crowded.note(time.Now()); ok {
				s.cfg.Logger.Warn("agent: more connections held open than max_lingering: answered ones closed without waiting for the asker's close",
					zap.Int("closed_at_once", n), zap.Int("max_lingering", s.cfg.MaxLingering), zap.Stringer("remote", c.RemoteAddr()))
			}
		}
	}
}

// answer writes the line and the end of the stream, then leaves the connection to linger
// for the asker's close (lingers true), or closes it. The state is read when the
// connection comes, so the answer is as fresh as HAProxy's check.
func (s *Server) answer(c net.Conn) (lingers bool, err error) {
	now := s.cfg.Now()
	host := hostOf(c.RemoteAddr())
	line := s.askers.answer(host, s.cfg.State(), now)
	c.SetWriteDeadline(time.Now().Add(s.cfg.Timeout))
	if _, err := c.Write([]byte(line)); err != nil {
		c.Close()
		s.askers.unsaid(host, line)
		return false, fmt.Errorf("write answer: %w", err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite() // the asker reads the line and EOF now, whatever comes next
	}
	select {
	case s.linger <- struct{}{}:
	default:
		dropReceived(c) // no slot: what already arrived is read, so the close sends a FIN
		c.Close()
		return false, nil
	}
	s.lingers.Add(1)
	go func() {
		defer s.lingers.Done()
		defer func() { <-s.linger }()
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(s.cfg.Linger))
		var buf [512]byte
		first := true
		for {
			n, err := c.Read(buf[:])
			if first && n > 0 { // agent-send, which may say who asks
				s.askers.said(host, buf[:n])
				first = false
			}
			if err != nil {
				return
			}
		}
	}()
	return true, nil
}

// dropReceived reads and drops what c has received so far, without waiting.
func dropReceived(c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	var buf [512]byte
	rc.Read(func(fd uintptr) bool {
		// The socket is non-blocking: this reads what is there and returns. An asker that
		// sent more than an agent-send line gets the reset.
		for range 8 {
			if n, err := syscall.Read(int(fd), buf[:]); n <= 0 || err != nil {
				break
			}
		}
		return true
	})
}

// throttle lets one event in per every and counts those it held back. Not safe for
// concurrent use (the accept loop owns its throttles).
type throttle struct {
	every time.Duration
	last  time.Time
	held  int
}

// note records an event at now and says whether to report it, with the number of events
// the report stands for (this one and those held back since the last report).
func (t *throttle) note(now time.Time) (n int, report bool) {
	t.held++
	if !t.last.IsZero() && now.Sub(t.last) < t.every {
		return 0, false
	}
	n, t.held, t.last = t.held, 0, now
	return n, true
}
