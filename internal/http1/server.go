package http1

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Handler answers one request. The request's slices point into the connection's read
// buffer and are valid only during the call; the handler appends its body to w.Body.
type Handler interface {
	ServeHTTP1(w *Response, r *Request)
}

// Blocker is implemented by a Handler some of whose requests may wait: for a lock, a
// group commit, another process. The loop transport runs those requests on a goroutine of
// their own and answers them through the loop when they return, so the loop goes on
// serving every other connection; every other request runs on the loop itself, as a
// Node handler runs on its event loop, and must not wait. MayBlock sees the parsed
// request (its body included) and must be cheap and must not keep it. The goroutine
// transport ignores it: each connection has its own goroutine there.
type Blocker interface {
	MayBlock(r *Request) bool
}

// Transports: how a Server owns its connections (Server.Transport).
const (
	// TransportGoroutine serves each connection on a goroutine of its own, parked on Go's
	// netpoller between requests.
	TransportGoroutine = "goroutine"
	// TransportLoop serves connections from one epoll loop per GOMAXPROCS (loop.go): a
	// connection that waits costs no goroutine and no buffer.
	TransportLoop = "loop"
)

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(w *Response, r *Request)

// ServeHTTP1 calls f(w, r).
func (f HandlerFunc) ServeHTTP1(w *Response, r *Request) { f(w, r) }

// Defaults of the Server's zero-valued fields.
const (
	DefaultMaxHeaderBytes = 16 << 10
	DefaultMaxBodyBytes   = 16 << 10
	DefaultIdleTimeout    = 75 * time.Second
	// DefaultFirstRequestTimeout is nginx's client_header_timeout: a connection that
	// sends nothing is closed after it.
	DefaultFirstRequestTimeout = 60 * time.Second
	DefaultReadTimeout         = 10 * time.Second
	// DescriptorReserve is what the default MaxConns leaves of the descriptor limit for
	// everything else the process opens (database files, logs, pipes, sockets of its own).
	DescriptorReserve   = 128
	DefaultWriteTimeout = 10 * time.Second
	maxHeaders          = 100
	// flushThreshold bounds the responses held for one pipelined batch: past it they are
	// written before more requests are parsed, so a client that pipelines without reading
	// cannot make us buffer its answers without limit.
	flushThreshold = 64 << 10
)

// Server serves HTTP/1.1 on listeners. Its zero value (plus a Handler) is ready to use.
type Server struct {
	Handler Handler
	// Logger receives connection-level problems (accept errors, panics). nil: no logs.
	Logger *zap.Logger
	// MaxHeaderBytes bounds the request line and headers; more is 431. Default 16 KiB.
	MaxHeaderBytes int
	// MaxBodyBytes bounds a request body; more is 413. Default 16 KiB.
	MaxBodyBytes int
	// IdleTimeout is how long a keep-alive connection may wait for its next request.
	// Default 75 s: longer than the 60–65 s that proxies and the challenge expect.
	IdleTimeout time.Duration
	// FirstRequestTimeout is how long a new connection may wait before its first request's
	// first byte: one opened and left silent (by a client that never uses it, or to hold
	// a descriptor) is closed after it. Default DefaultFirstRequestTimeout, 60 s.
	FirstRequestTimeout time.Duration
	// ReadTimeout bounds reading one request once its first byte arrived. Default 10 s.
	// The read timeouts are kept to within an eighth of the shortest, at most 1 s (see
	// reap).
	ReadTimeout time.Duration
	// MaxConns bounds the connections open at once. Past it a new connection is accepted
	// and closed at once, unserved, as when descriptors run out (see shed): counted in
	// Stats.Refused and logged once a second at most, while the open ones are served on.
	// Default 0: the descriptor limit (RLIMIT_NOFILE's soft limit when Serve starts) less
	// DescriptorReserve, so that connections cannot take the descriptors the rest of the
	// process needs. Negative: no bound but the descriptor limit.
	MaxConns int
	// WriteTimeout bounds waiting for a client that does not read to take a response: it
	// starts when the socket's send buffer is full. Default 10 s.
	WriteTimeout time.Duration
	// IdleGrace is how long Shutdown leaves idle keep-alive connections open, so that a
	// request already on its way is answered (with "Connection: close") instead of meeting
	// a closed connection, which a client cannot tell from a failure and must not retry
	// when the request was a POST. Connections that send nothing in that time are closed.
	// Default 0: idle connections are closed at once, as net/http does.
	IdleGrace time.Duration
	// Transport is TransportGoroutine (the default, "") or TransportLoop. Both parse and
	// answer with the same code, limits and timeouts; only who waits for the socket differs.
	Transport string
	// Loops is how many event loops TransportLoop serves a listener from. Default 0: one
	// per GOMAXPROCS. Accepted connections are spread over them, the fewest first (loop.go).
	Loops int

	loops  []*loop        // the loop transport's loops (under mu)
	loopWG sync.WaitGroup // the loops' goroutines

	mu        sync.Mutex
	serving   sync.WaitGroup // the Serve loops, so Shutdown knows when accepting has stopped
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	reaping   bool // a reap goroutine runs (under mu)
	closing   atomic.Bool
	// noKeepAlive: every response says "Connection: close" and its connection closes after
	// it, while the server serves on (SetKeepAlive).
	noKeepAlive atomic.Bool
	done        chan struct{} // closed when the last connection ends after closing
	requests    atomic.Uint64
	accepted    atomic.Uint64
	open        atomic.Int64
	date        atomic.Pointer[dateLine]
	lastLimit   atomic.Int64  // unix nano of the last "out of descriptors" log line
	shedCount   atomic.Uint64 // connections closed unserved: past maxConns, or for want of descriptors
	maxConns    atomic.Int64  // MaxConns resolved by the first Serve; 0: not yet, <0: none
}

// Stats are a server's counters since it started.
type Stats struct {
	Requests    uint64 // requests answered, including protocol errors; not health checks (Response.Probe)
	Accepted    uint64 // connections accepted
	Connections int64  // connections open now
	Refused     uint64 // connections closed at accept, unserved: past MaxConns or out of descriptors
	// LoopConnections is TransportLoop's open connections per loop, in the loops' order
	// (those of every Serve so far; an ended loop holds none); nil on the goroutine transport.
	LoopConnections []int64
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	st := Stats{Requests: s.requests.Load(), Accepted: s.accepted.Load(), Connections: s.open.Load(), Refused: s.shedCount.Load()}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.loops) > 0 {
		st.LoopConnections = make([]int64, len(s.loops))
		for i, l := range s.loops {
			st.LoopConnections[i] = l.load.Load()
		}
	}
	return st
}

// SetKeepAlive turns keep-alive off (false) or back on while the server serves on: off,
// each connection is closed after its next response, which says "Connection: close", as
// during Shutdown, but new connections are still accepted. A balancer in front (HAProxy's
// drain, an L4 one's weight 0) sends no new connection here but keeps a kept-alive client
// on this host: the client reconnects, and the balancer sends it elsewhere. Idle
// connections stay open until their next request.
func (s *Server) SetKeepAlive(on bool) { s.noKeepAlive.Store(!on) }

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("http1: server closed")

func (s *Server) maxHeader() int      { return or(s.MaxHeaderBytes, DefaultMaxHeaderBytes) }
func (s *Server) maxBody() int        { return or(s.MaxBodyBytes, DefaultMaxBodyBytes) }
func (s *Server) idle() time.Duration { return or(s.IdleTimeout, DefaultIdleTimeout) }
func (s *Server) firstTO() time.Duration {
	return or(s.FirstRequestTimeout, DefaultFirstRequestTimeout)
}
func (s *Server) readTO() time.Duration { return or(s.ReadTimeout, DefaultReadTimeout) }
func (s *Server) writeTO() time.Duration {
	return or(s.WriteTimeout, DefaultWriteTimeout)
}

func or[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

func (s *Server) log() *zap.Logger {
	if s.Logger == nil {
		return zap.NewNop()
	}
	return s.Logger
}

// Serve accepts connections on ln until Shutdown, serving each on its own goroutine (or, with
// TransportLoop, from the event loops it starts on ln's socket; see loop.go). It
// returns ErrServerClosed after Shutdown, or the listener's error. While the process is
// out of descriptors, new connections are closed as soon as they arrive (see shed) and
// the connections already open are served as usual.
func (s *Server) Serve(ln net.Listener) error {
	if s.Transport != "" && s.Transport != TransportGoroutine && s.Transport != TransportLoop {
		return fmt.Errorf("serve: transport %q: want %q or %q", s.Transport, TransportGoroutine, TransportLoop)
	}
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return ErrServerClosed
	}
	if s.listeners == nil {
		s.listeners = make(map[net.Listener]struct{})
	}
	s.listeners[ln] = struct{}{}
	if s.maxConns.Load() == 0 {
		s.maxConns.Store(s.resolveMaxConns())
	}
	s.serving.Add(1)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		s.serving.Done()
	}()
	if s.Transport == TransportLoop {
		return s.serveLoops(ln)
	}

	// reserve is a descriptor held back for the moment the process runs out of them (see
	// shed); nil while given away or when it could not be had.
	reserve, _ := os.Open(os.DevNull)
	defer func() {
		if reserve != nil {
			reserve.Close()
		}
	}()
	var backoff time.Duration
	var lnRaw syscall.RawConn
	if sc, ok := ln.(syscall.Conn); ok {
		lnRaw, _ = sc.SyscallConn()
	}
	for {
		nc, err := ln.Accept()
		if lnRaw != nil {
			// As the loop's accept (restoreNonblocking): a listening socket made blocking
			// under us blocks the next Accept, and then Shutdown's Close, which waits for it.
			lnRaw.Control(func(fd uintptr) {
				if restoreNonblocking(fd) {
					s.warnBlocking()
				}
			})
		}
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			if isOutOfDescriptors(err) && reserve != nil {
				reserve = s.shed(ln, reserve, err)
				continue
			}
			if isTemporary(err) {
				// Out of memory, or of descriptors with no reserve to shed with: existing
				// connections keep working; retry with backoff, as net/http does, and say
				// why once a second at most.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.logLimit(err, "accept failing: new connections wait in the kernel queue until descriptors or memory free up")
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		backoff = 0
		if reserve == nil {
			reserve, _ = os.Open(os.DevNull)
		}
		if s.full() {
			nc.Close()
			continue
		}
		// A connection accepted while Shutdown closes the listener is served too: its
		// client sent a SYN to a listening socket and has no reason to expect a reset.
		c := &conn{srv: s, nc: nc, raw: newRawIO(nc)}
		s.track(c)
		s.accepted.Add(1)
		go c.serve()
	}
}

// shed answers a full descriptor table (EMFILE, ENFILE) as libuv does for Node, hence
// for PM2's workers: it gives the reserve descriptor back, accepts the connection that
// waits, closes it at once, and takes the reserve again. Left in the accept queue, that
// connection's client would wait, its request sent, until a descriptor frees up or it
// gives up, and behind it the queue would fill until new SYNs were dropped; closed, its
// client fails at once, and a proxy in front retries elsewhere (nginx's default
// proxy_next_upstream does, for an upstream that closed without answering). It returns
// the new reserve, nil when it could not be had again.
func (s *Server) shed(ln net.Listener, reserve *os.File, cause error) *os.File {
	reserve.Close()
	if nc, err := ln.Accept(); err == nil {
		nc.Close()
		s.shedCount.Add(1)
	}
	s.logLimit(cause, "out of descriptors: closing new connections at once until some free up")
	r, err := os.Open(os.DevNull)
	if err != nil {
		return nil // another goroutine took the descriptor: back off until one frees up
	}
	return r
}

// resolveMaxConns is MaxConns with its default applied; -1 for no bound.
func (s *Server) resolveMaxConns() int64 {
	switch {
	case s.MaxConns > 0:
		return int64(s.MaxConns)
	case s.MaxConns < 0:
		return -1
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<40 { // unlimited (RLIM_INFINITY) or as good as
		return -1
	}
	return max(int64(lim.Cur)-DescriptorReserve, 1)
}

// full says whether a connection just accepted is one past MaxConns; the caller then
// closes it. It is counted and logged here (once a second at most).
func (s *Server) full() bool {
	if m := s.maxConns.Load(); m <= 0 || s.open.Load() < m {
		return false
	}
	s.shedCount.Add(1)
	s.logLimit(nil, "connection limit (MaxConns) reached: closing new connections at once until some end")
	return true
}

func isOutOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

func isTemporary(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) ||
		errors.Is(err, syscall.ECONNABORTED)
}

// restoreNonblocking makes the listening socket fd non-blocking again if it is not, and
// says whether it had to. O_NONBLOCK belongs to the socket's open file description, which
// every process serving the socket shares: one os.File.Fd call on a duplicate of it
// anywhere (os/exec's ExtraFiles, an SCM_RIGHTS pass, a program run beside this one) makes
// it blocking for all, and a blocking accept stops the event loop and the drain of either
// transport. ipc.SocketFile is how this project's own processes pass sockets without it;
// this is for the rest. Both transports check once per wake-up for new connections.
func restoreNonblocking(fd uintptr) bool {
	fl, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
	if e != 0 || fl&syscall.O_NONBLOCK != 0 {
		return false
	}
	syscall.RawSyscall(syscall.SYS_FCNTL, fd, syscall.F_SETFL, fl|syscall.O_NONBLOCK)
	return true
}

func (s *Server) warnBlocking() {
	s.log().Warn("the listening socket was made blocking by a process sharing it: made non-blocking again")
}

func (s *Server) logLimit(err error, msg string) {
	now := time.Now().UnixNano()
	last := s.lastLimit.Load()
	if now-last < int64(time.Second) || !s.lastLimit.CompareAndSwap(last, now) {
		return
	}
	var lim syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	s.log().Warn(msg, zap.Error(err), zap.Int64("open_connections", s.open.Load()),
		zap.Int64("max_connections", s.maxConns.Load()), zap.Uint64("closed_unserved", s.shedCount.Load()),
		zap.Uint64("nofile_soft", lim.Cur), zap.Uint64("nofile_hard", lim.Max))
}

func (s *Server) track(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = make(map[*conn]struct{})
	}
	s.conns[c] = struct{}{}
	s.open.Add(1)
	if !s.reaping {
		s.reaping = true
		go s.reap()
	}
}

// reap enforces the connections' idle and request deadlines (conn.waitBy): every
// reapPeriod it cuts short the reads that waited past theirs. One ticker for all the
// connections, instead of a runtime timer each re-armed at every request: a timer moved
// later is left in the runtime's heap at its old time and wakes the process then, for
// nothing, which at 10,000 connections was more wake-ups than requests. The deadlines
// are therefore kept to within one period. The goroutine ends when no connection is
// left, and the next connection starts another.
func (s *Server) reap() {
	t := time.NewTicker(s.reapPeriod())
	defer t.Stop()
	for range t.C {
		now := monoNow()
		s.mu.Lock()
		if len(s.conns) == 0 {
			s.reaping = false
			s.mu.Unlock()
			return
		}
		for c := range s.conns {
			if by := c.waitBy.Load(); by > 0 && now >= by {
				c.expire(by)
			}
		}
		s.mu.Unlock()
	}
}

// reapPeriod is an eighth of the shortest read timeout, between 5 ms and 1 s.
func (s *Server) reapPeriod() time.Duration {
	return min(max(min(s.idle(), s.firstTO(), s.readTO())/8, 5*time.Millisecond), time.Second)
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	s.open.Add(-1)
	if s.closing.Load() && s.open.Load() == 0 && s.done != nil {
		close(s.done)
		s.done = nil
	}
}

// Shutdown stops accepting, closes idle keep-alive connections, lets requests in flight
// finish (their responses say "Connection: close"), and waits for every connection to end.
// When ctx ends first, it closes the remaining connections and returns ctx's error.
//
// Shutdown closes the listeners given to Serve. A listener inherited from a supervisor is
// only this process's copy of the socket: the supervisor's copy keeps the accept queue.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing.Store(true)
	for ln := range s.listeners {
		ln.Close()
	}
	loops := s.loops
	for _, l := range loops {
		l.wake() // stop accepting, then close idle connections (after IdleGrace)
	}
	s.mu.Unlock()
	// Wait for the accept loops to return, so the connection table below is complete.
	s.serving.Wait()
	s.mu.Lock()
	var done chan struct{}
	if s.open.Load() > 0 { // the goroutine transport's s.conns, and the loops' connections
		done = make(chan struct{})
		s.done = done
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if done == nil {
		s.loopWG.Wait() // loops with no connection left end at once
		return nil
	}
	var grace <-chan time.Time
	if s.IdleGrace > 0 {
		t := time.NewTimer(s.IdleGrace)
		defer t.Stop()
		grace = t.C
	} else {
		for _, c := range conns {
			c.wakeIfIdle()
		}
	}
	for {
		select {
		case <-done:
			s.loopWG.Wait()
			return nil
		case <-grace:
			grace = nil
			for _, c := range conns {
				c.wakeIfIdle()
			}
		case <-ctx.Done():
			s.mu.Lock()
			for c := range s.conns {
				c.nc.Close()
			}
			s.mu.Unlock()
			for _, l := range loops {
				l.forceClose()
			}
			return fmt.Errorf("drain connections: %w", ctx.Err())
		}
	}
}

// dateLine is the "Date: ...\r\n" header for one second.
type dateLine struct {
	sec  int64
	line []byte
}

func (s *Server) dateHeader(now time.Time) []byte {
	sec := now.Unix()
	if d := s.date.Load(); d != nil && d.sec == sec {
		return d.line
	}
	d := &dateLine{sec: sec}
	d.line = append([]byte("Date: "), now.UTC().AppendFormat(nil, "Mon, 02 Jan 2006 15:04:05 GMT")...)
	d.line = append(d.line, "\r\n"...)
	s.date.Store(d)
	return d.line
}
