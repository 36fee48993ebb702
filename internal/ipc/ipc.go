// Package ipc is the channel between the supervisor and one of its workers.
//
// The supervisor creates a unix socketpair per worker and passes one end to the child as an
// inherited descriptor (its number in the environment variable named by EnvFD, after the
// listening socket at fd 3). Messages are JSON objects, one per line, so a person can read a
// capture of the traffic. The channel carries three things:
//   - readiness: the worker says "ready" once it can serve (database open, statements
//     prepared, listener in hand); until then the supervisor does not count it online;
//   - drain: the supervisor asks the worker to stop accepting, finish in-flight requests,
//     close idle keep-alives and exit;
//   - keep-alive: the supervisor asks the worker to close each connection after its next
//     response ("Connection: close"), or to keep them alive again, while it serves on
//     (the host drained from its balancer: `supervisor drain`, `supervisor ready`);
//   - counters: the supervisor asks for "stats" and the worker answers with its request and
//     connection counts, the connections per event loop among them (prefork keeps
//     counters per process; the supervisor adds them up).
//
// The socketpair doubles as the parent-death signal: only the supervisor holds the other
// end, so when the supervisor dies for any reason, even SIGKILL, or re-executes itself, the
// worker reads EOF. Then it drains, or, given EnvAdopt, serves on and waits for the next
// supervisor to adopt it (rejoin.go). (Pdeathsig in Go is tied to the OS thread that
// forked, so it is not reliable, and it fires at an exec.)
package ipc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// Environment variables of the worker protocol, set by the supervisor for each child.
const (
	// EnvFD names the descriptor number of the worker's end of the socketpair.
	EnvFD = "ONEHOST_IPC_FD"
	// EnvWorkerID is the worker's stable slot index, 0-based (as PM2's NODE_APP_INSTANCE).
	EnvWorkerID = "WORKER_ID"
	// EnvWorkerCount is the number of worker slots in the cluster.
	EnvWorkerCount = "WORKER_COUNT"
	// EnvListenFDs and EnvListenPID follow systemd's socket-activation convention: the
	// listening socket is fd 3. LISTEN_PID may be absent, since os/exec cannot know the
	// child's pid before it starts; when present it must equal the worker's pid.
	EnvListenFDs = "LISTEN_FDS"
	EnvListenPID = "LISTEN_PID"
	// ListenFD is the descriptor of the inherited listening socket.
	ListenFD = 3
	// EnvLogFormat is the form of the supervisor's own log, LogConsole or LogJSON, so that
	// a worker that writes structured lines writes them in the same form: readable lines
	// after `ID|APP |` where the supervisor prints readable lines, JSON where it prints
	// JSON for a collector. Every worker gets it (an app's env may set it otherwise).
	EnvLogFormat = "ONEHOST_LOG_FORMAT"
)

// Values of EnvLogFormat.
const (
	LogConsole = "console"
	LogJSON    = "json"
)

// Message types.
const (
	TypeReady = "ready" // worker → supervisor: can serve
	TypeDrain = "drain" // supervisor → worker: stop gracefully
	TypeStats = "stats" // supervisor → worker: a request; worker → supervisor: the answer
	// TypeKeepAlive (supervisor → worker) sets keep-alive: with CloseAfterResponse, each
	// connection closes after its next response; without, connections are kept alive
	// again. A worker that does not know it ignores it, as any unknown type.
	TypeKeepAlive = "keepalive"
)

// Msg is one message. Fields that do not apply to a type are omitted.
type Msg struct {
	Type        string `json:"type"`
	PID         int    `json:"pid,omitempty"`
	Requests    uint64 `json:"requests,omitempty"`
	Accepted    uint64 `json:"accepted,omitempty"`
	Connections int64  `json:"connections,omitempty"`
	// LoopConnections, in a stats answer, is a worker's open connections per event loop
	// (http1.Stats.LoopConnections), absent when it serves from none: shown by the
	// supervisor, so an uneven spread over one process's cores is seen.
	LoopConnections []int64 `json:"loop_connections,omitempty"`
	// Healthy and Error, in a stats answer, are the worker's own health check: Healthy when
	// it passes, Error (and not Healthy) when it fails and why. An answer with neither says
	// nothing about health (a worker that has no check, or has not finished its first).
	Healthy bool   `json:"healthy,omitempty"`
	Error   string `json:"error,omitempty"`
	// NotServing, in a stats answer, is a worker's "send me no traffic" and why: it runs
	// and answers, but must not be sent requests now (a fleet host whose data lags). The
	// supervisor shows it not-serving and does not count it online, so the host's agent
	// takes the host out of its balancer when no worker serves; "" again puts it back.
	NotServing string `json:"not_serving,omitempty"`
	// Role, in a stats answer, is the worker's own word for its part in its app (the feed
	// worker's write role: "owner", "follower", ...): shown by the supervisor (status's
	// role column, /metrics' onehost_worker_role), which gives it no meaning.
	Role string `json:"role,omitempty"`
	// Report, in a stats answer, is whatever else the worker says of itself, a JSON value
	// the supervisor passes on as it is (status -json's report) and never reads: the feed
	// worker's write-path counters, which the ceiling sweep reads. Bounded, with the rest
	// of the message, by the channel's line limit.
	Report json.RawMessage `json:"report,omitempty"`
	// Rejoin, in a ready message (the worker's greeting), says the worker outlives its
	// supervisor and rejoins the next one at EnvAdopt (rejoin.go): it has cleared its
	// parent-death signal (OutliveParent). A worker that does not say so dies with it.
	Rejoin bool `json:"rejoin,omitempty"`
	// CloseAfterResponse, in a keepalive message, turns keep-alive off: see TypeKeepAlive.
	CloseAfterResponse bool `json:"close_after_response,omitempty"`
}

// Conn is one end of the channel. Send is safe for concurrent use; Recv is for one reader.
type Conn struct {
	c   net.Conn
	r   *bufio.Reader
	wmu sync.Mutex
}

// maxLine bounds one message, so a confused peer cannot make the other side buffer without
// limit.
const maxLine = 64 << 10

// New wraps a connected socket.
func New(c net.Conn) *Conn { return &Conn{c: c, r: bufio.NewReaderSize(c, maxLine)} }

// FromFile wraps an inherited descriptor. The file is closed; the Conn owns a duplicate.
func FromFile(f *os.File) (*Conn, error) {
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("open ipc descriptor: %w", err)
	}
	return New(c), nil
}

// Pair creates a connected socketpair: the supervisor keeps sup and passes child to the
// worker (in exec.Cmd.ExtraFiles), closing its own copy of child after the start.
func Pair() (sup *Conn, child *os.File, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("create socketpair: %w", err)
	}
	sf := os.NewFile(uintptr(fds[0]), "ipc-supervisor")
	child = os.NewFile(uintptr(fds[1]), "ipc-worker")
	sup, err = FromFile(sf)
	if err != nil {
		child.Close()
		return nil, nil, err
	}
	return sup, child, nil
}

// Send writes one message.
func (c *Conn) Send(m Msg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s message: %w", m.Type, err)
	}
	b = append(b, '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.c.Write(b); err != nil {
		return fmt.Errorf("send %s message: %w", m.Type, err)
	}
	return nil
}

// Recv reads one message. It returns io.EOF when the peer closed its end.
func (c *Conn) Recv() (Msg, error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return Msg{}, fmt.Errorf("receive message: longer than %d bytes", c.r.Size())
		}
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return Msg{}, io.EOF
		}
		return Msg{}, fmt.Errorf("receive message: %w", err)
	}
	var m Msg
	if err := json.Unmarshal(line, &m); err != nil {
		return Msg{}, fmt.Errorf("decode message: %w", err)
	}
	return m, nil
}

// Close closes this end.
func (c *Conn) Close() error { return c.c.Close() }

// Why a worker's Serve loop ended.
var (
	ErrDrain      = errors.New("supervisor asked to drain")
	ErrParentGone = errors.New("supervisor is gone")
)

// Serve is the worker's side of the channel: it answers stats requests with stats() until
// the supervisor asks to drain (ErrDrain), the supervisor's end closes (ErrParentGone), or
// ctx ends (ctx's error; the connection is closed to unblock the read).
func (c *Conn) Serve(ctx context.Context, stats func() Msg) error {
	return c.ServeWith(ctx, Handlers{Stats: stats})
}

// Handlers are what a worker does with the supervisor's requests. Stats is required; a
// nil KeepAlive ignores keepalive messages.
type Handlers struct {
	Stats func() Msg
	// KeepAlive(on) is called for each keepalive message: on is false when the
	// supervisor asks that each connection close after its next response.
	KeepAlive func(on bool)
}

// ServeWith is Serve with a handler for each request the worker knows.
func (c *Conn) ServeWith(ctx context.Context, h Handlers) error {
	stop := context.AfterFunc(ctx, func() { c.c.Close() })
	defer stop()
	for {
		m, err := c.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				return ErrParentGone
			}
			return fmt.Errorf("%w: %v", ErrParentGone, err)
		}
		switch m.Type {
		case TypeDrain:
			return ErrDrain
		case TypeKeepAlive:
			if h.KeepAlive != nil {
				h.KeepAlive(!m.CloseAfterResponse)
			}
		case TypeStats:
			s := h.Stats()
			s.Type = TypeStats
			if err := c.Send(s); err != nil {
				return fmt.Errorf("%w: %v", ErrParentGone, err)
			}
		}
	}
}
