// Package agent answers HAProxy's agent-check for a host of workers: HAProxy connects to
// the agent's port, may send the text of its agent-send setting, reads one line and
// closes. The line is made of words (HAProxy 2.6's configuration manual, "agent-check"):
// operational ones (up, down), administrative ones (ready, drain, maint) and a weight N%
// relative to the server's configured weight.
//
// The answer for a host follows its workers and its operator:
//   - "drain" while drained (`supervisor drain`) or stopping: HAProxy sends the host no
//     new connection, and keeps those it has;
//   - "down" when no worker serves;
//   - otherwise "up ready N%", N the share of the wanted workers that serve, clamped to
//     1..100: a host with 1 of its 4 workers takes a quarter of the traffic. "ready" is
//     there because HAProxy leaves a drain an agent put it in only on that word (an "up"
//     alone would leave the host drained after `supervisor ready`, or after a restart).
//     It also ends a drain or maintenance set through HAProxy's runtime API, so a host
//     with an agent is drained through its agent.
//
// Answers never wait on the cluster: State reads snapshots.
package agent

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
)

// State is what an answer says of the host.
type State struct {
	// Online workers serve, out of Desired.
	Online, Desired int
	// Drained: the operator took the host out (`supervisor drain`).
	Drained bool
	// Stopping: the supervisor is stopping.
	Stopping bool
}

// Answer is the reply line for st, newline included.
func Answer(st State) string {
	switch {
	case st.Stopping:
		return "drain #stopping\n"
	case st.Drained:
		return "drain #drained\n"
	case st.Online <= 0 || st.Desired <= 0:
		return "down #no worker serves\n"
	}
	return "up ready " + strconv.Itoa(Weight(st.Online, st.Desired)) + "%\n"
}

// Weight is online×100÷desired, clamped to 1..100: a host that serves at all keeps some
// traffic (HAProxy's 0% would drain it), and a scale-down in progress (more online than
// wanted) is not more than whole.
func Weight(online, desired int) int {
	if desired <= 0 {
		return 1
	}
	return min(max(online*100/desired, 1), 100)
}

// Config configures a Server. The zero value (plus State) works.
type Config struct {
	// State returns the host's state for an answer; it must not block. Required.
	State func() State
	// Logger receives the agent's problems. Default: none.
	Logger *zap.Logger
	// Timeout bounds one check's connection: the write of the answer, and the wait for
	// HAProxy to close after reading it. Default 2 s.
	Timeout time.Duration
	// MaxConns bounds the checks answered at once; more are closed unanswered (HAProxy
	// retries at its next agent-inter). Default 64.
	MaxConns int
}

// Server answers agent checks on a listener until Close.
type Server struct {
	cfg  Config
	ln   net.Listener
	sem  chan struct{}
	wg   sync.WaitGroup // the accept loop and the connections
	once sync.Once
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
		cfg.Timeout = 2 * time.Second
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 64
	}
	s := &Server{cfg: cfg, ln: ln, sem: make(chan struct{}, cfg.MaxConns)}
	s.wg.Add(1)
	go s.accept()
	return s
}

// Addr is the address answered (the real port when asked for 0).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops answering and waits for the checks in progress (at most Timeout).
func (s *Server) Close() error {
	var err error
	s.once.Do(func() { err = s.ln.Close() })
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	var lastErr time.Time
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors and the like: log now and then, keep going.
			if time.Since(lastErr) > time.Second {
				lastErr = time.Now()
				s.cfg.Logger.Warn("agent: accept", zap.Error(err))
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		select {
		case s.sem <- struct{}{}:
		default:
			c.Close() // too many at once: a flood, not HAProxy
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.sem }()
			s.answer(c)
		}()
	}
}

// answer writes the line and closes. The state is read when the connection comes, so
// the answer is as fresh as HAProxy's check. What HAProxy sent (agent-send) is read and
// ignored after the answer, until it closes: closing with unread input would reset the
// connection, and a reset can destroy the answer before HAProxy reads it.
func (s *Server) answer(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(s.cfg.Timeout))
	if _, err := c.Write([]byte(Answer(s.cfg.State()))); err != nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	var buf [512]byte
	for {
		if _, err := c.Read(buf[:]); err != nil {
			return
		}
	}
}
