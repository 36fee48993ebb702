// Package pageserver serves HTTP pages on a TCP port that others can reach — the
// supervisor's -metrics and -dashboard — with the limits such a port needs, so that the
// page cannot cost the process what it needs for its real work:
//
//   - the port is bound by Listen, before the process starts anything else, so a port
//     another program holds is an error at once rather than after the apps started;
//   - a connection that sends nothing is closed after ReadHeaderTimeout, one kept alive
//     with no request after IdleTimeout (net/http keeps them for ever by default: 227 idle
//     connections once left a supervisor under a 256-descriptor limit unable to start a
//     worker);
//   - at most MaxConns connections at once; more are closed as they are accepted (a
//     browser or Prometheus retries), and said in the log now and then;
//   - a request for another host name than the port's own, localhost, an IP address or
//     one of AllowedHosts is refused (HostCheck: DNS rebinding);
//   - the server's own errors go to the log.
//
// Non-goals: TLS, authentication (the pages read; bind them to a private address).
package pageserver

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Config configures a Server. The zero value works.
type Config struct {
	// Name names the page in errors and the log ("metrics", "dashboard").
	Name string
	// Logger hears of the server's errors and of connections refused. Default: none.
	Logger *zap.Logger
	// MaxConns bounds the connections open at once. Default 64.
	MaxConns int
	// ReadHeaderTimeout bounds the wait for a request's header, the first one's too.
	// Default 10 s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a kept-alive connection that sends no further request. Default
	// 30 s.
	IdleTimeout time.Duration
	// AllowedHosts are the host names the page answers to besides its own address's,
	// localhost and IP addresses (HostCheck).
	AllowedHosts []string
}

// Server is one page's listener and server.
type Server struct {
	cfg     Config
	addr    string // as given to Listen: HostCheck's own name
	ln      *capListener
	srv     *http.Server
	served  chan struct{}
	serving atomic.Bool
}

// Listen binds addr (HOST:PORT; port 0 picks one). Nothing is served until Serve.
func Listen(addr string, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 64
	}
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = 10 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 30 * time.Second
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Name, err)
	}
	return &Server{cfg: cfg, addr: addr, ln: &capListener{Listener: ln, slots: make(chan struct{}, cfg.MaxConns), log: cfg.Logger, name: cfg.Name},
		served: make(chan struct{})}, nil
}

// Addr is the address bound (the real port when asked for 0).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves h, behind HostCheck, in a goroutine of the Server's until Close. It is
// called once.
func (s *Server) Serve(h http.Handler) {
	s.srv = &http.Server{Handler: HostCheck(s.cfg.Name, s.addr, s.cfg.AllowedHosts, h), ReadHeaderTimeout: s.cfg.ReadHeaderTimeout, IdleTimeout: s.cfg.IdleTimeout,
		ErrorLog: zap.NewStdLog(s.cfg.Logger.With(zap.String("page", s.cfg.Name)))}
	s.serving.Store(true)
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error(s.cfg.Name+": serve", zap.Error(err))
		}
	}()
}

// Close closes the listener and every connection (streams in progress too) and waits for
// the serving goroutine.
func (s *Server) Close() error {
	if !s.serving.Load() {
		return s.ln.Close()
	}
	err := s.srv.Close()
	<-s.served
	return err
}

// Refused is how many connections were closed at accept for want of a slot.
func (s *Server) Refused() uint64 { return s.ln.refused.Load() }

// capListener hands out at most cap(slots) connections at once; a connection frees its
// slot when closed. Past the cap it closes what it accepts and goes on.
type capListener struct {
	net.Listener
	slots   chan struct{}
	log     *zap.Logger
	name    string
	refused atomic.Uint64
	mu      sync.Mutex
	logged  time.Time
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
		default:
		}
		c.Close()
		n := l.refused.Add(1)
		l.mu.Lock()
		if time.Since(l.logged) > 10*time.Second {
			l.logged = time.Now()
			l.log.Warn(l.name+": connections refused: as many are open as allowed", zap.Int("open", cap(l.slots)), zap.Uint64("refused_so_far", n))
		}
		l.mu.Unlock()
	}
}

type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}
