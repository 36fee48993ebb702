// Package writelog is a host's client of the fleet's write log: one JetStream stream whose
// order is the one order of the fleet's writes (the nodes are internal/lognode's). It
// carries opaque messages (the feed encodes its intents, internal/feed's logwrite.go) and
// knows nothing of SQLite:
//
//   - Publish appends one message under a message id, retrying with the same id
//     (Nats-Msg-Id) until the stream acknowledges it or the caller's deadline passes: the
//     stream stores it once however often it was sent (acks are lost in benign events: a
//     leader change, a node's restart), so a write is never applied twice and never lost
//     once acknowledged;
//   - Follow hands the caller every message after a sequence, in order, in batches, from an
//     ephemeral pull consumer with short idle heartbeats, created again from the last
//     sequence handed over whenever the heartbeats stop (its node died) or the connection
//     moved: no gap, no duplicate, and a dead node noticed within about two heartbeats;
//   - each host reports what it has applied on a plain subject (progress.go), and
//     WaitApplied waits until every live host has applied a sequence: a write answered
//     after it is readable on every host in the balancer (read your writes for clients
//     that carry nothing); Serving says when this host must leave the balancer (its node
//     is gone, or its apply lags);
//   - snapshots of the database live in the log's object store (snapshot.go), so a new
//     host starts from the latest one plus the stream after it, and the stream is purged
//     up to what every host still needs.
//
// The client connects to this host's node first and to the others as fallback
// (fleetspec.Spec.ClientURLs), and keeps a second connection to its own node alone, whose
// state says whether that node lives.
//
// Files: writelog.go holds Config, Open, Close and Publish; follow.go the ordered reading;
// direct.go the reading by sequence while no consumer can be made; progress.go the applied
// reports, WaitApplied and Serving; snapshot.go the snapshots and the purge.
package writelog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/fleetspec"
)

// Config configures Open.
type Config struct {
	// Spec is the fleet; its Hosts and Self are used (required).
	Spec fleetspec.Spec
	// Logger receives connection changes and hosts leaving the wait. Default: none.
	Logger *zap.Logger
	// Name names the connections (the node's monitoring shows it). Default "writelog".
	Name string

	// AttemptTimeout bounds one try of a publish; the next try sends the same message id.
	// Default 250 ms: an ack lost when the stream's leader changes (a planned step-down
	// loses the acks in flight) costs a write this much; a try that is only slow is sent
	// again and stored once.
	AttemptTimeout time.Duration
	// Heartbeat is the followed consumer's idle heartbeat: two missed ones and Follow
	// creates the consumer again (on another node if its own died). Default 500 ms, the
	// least nats.go allows: a consumer lives on one node, chosen by the log, so a node's
	// stop or death stalls the appliers of the hosts whose consumer it held for about two
	// heartbeats, which must stay well under LagBound (or every such host would leave the
	// balancer).
	Heartbeat time.Duration
	// ReportEvery is how often this host repeats its applied sequence while nothing
	// changes (how the others know it lives). Default 250 ms.
	ReportEvery time.Duration
	// LiveWithin: a host not heard from for this long is not waited for. Default 1 s.
	LiveWithin time.Duration
	// WaitBound: a live host that has not applied a sequence this long after a write
	// began waiting for it stops being waited for, until it has caught up. Default 4 s:
	// LagBound, then the balancer's checks (HAProxy's, each second, fall 2) to take the
	// host out, so that a write acknowledged without a host is not read there.
	WaitBound time.Duration
	// LagBound: this host says it does not serve (Serving) once it has been behind
	// another serving host's applied sequence for this long. Default 2 s (above the
	// stall of a consumer's loss, two heartbeats).
	LagBound time.Duration
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Name == "" {
		c.Name = "writelog"
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = 250 * time.Millisecond
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 500 * time.Millisecond
	}
	if c.ReportEvery <= 0 {
		c.ReportEvery = 250 * time.Millisecond
	}
	if c.LiveWithin <= 0 {
		c.LiveWithin = time.Second
	}
	if c.WaitBound <= 0 {
		c.WaitBound = 4 * time.Second
	}
	if c.LagBound <= 0 {
		c.LagBound = 2 * time.Second
	}
}

// ErrUndecided reports a publish that was not acknowledged in time: the message may still
// be stored (and then applied) later.
var ErrUndecided = errors.New("the write log did not acknowledge the write in time; it may or may not be saved")

// Log is a host's connection to the write log. Its methods are safe for concurrent use.
type Log struct {
	cfg   Config
	log   *zap.Logger
	nc    *nats.Conn // every node, this host's first
	local *nats.Conn // this host's node alone: is it alive?
	js    jetstream.JetStream

	prog progress

	movedMu sync.Mutex
	moved   chan struct{} // closed and replaced at every reconnect (follow.go)

	// leaving: this host's node said its planned stop has begun (fleetspec.LeavingSubject);
	// cleared when the local connection reaches a node again.
	leaving atomic.Bool

	stop    chan struct{}
	done    sync.WaitGroup
	closeMu sync.Once
}

// Open connects to the log's nodes (returning once connected to one of them, retrying
// until ctx ends) and starts reporting and hearing the hosts' progress.
func Open(ctx context.Context, cfg Config) (*Log, error) {
	cfg.setDefaults()
	if len(cfg.Spec.Hosts) == 0 || cfg.Spec.SelfHost().Name == "" {
		return nil, errors.New("open write log: the fleet's hosts and this host's name are required")
	}
	l := &Log{cfg: cfg, log: cfg.Logger, stop: make(chan struct{}), moved: make(chan struct{})}
	l.prog.init(cfg)
	l.prog.nodeOK = func() bool { return l.local != nil && l.local.IsConnected() && !l.leaving.Load() }
	urls := cfg.Spec.ClientURLs()
	common := []nats.Option{
		nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond), nats.ReconnectJitter(50*time.Millisecond, 50*time.Millisecond),
		nats.PingInterval(time.Second), nats.MaxPingsOutstanding(2), nats.Timeout(time.Second),
		nats.RetryOnFailedConnect(true), nats.DontRandomize(), nats.NoEcho(),
	}
	var err error
	l.nc, err = nats.Connect(strings.Join(urls, ","), append(common, nats.Name(cfg.Name),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { l.log.Warn("write log: disconnected", zap.Error(err)) }),
		nats.ReconnectHandler(func(c *nats.Conn) {
			l.log.Info("write log: connected", zap.String("node", c.ConnectedUrl()))
			l.movedMu.Lock()
			close(l.moved)
			l.moved = make(chan struct{})
			l.movedMu.Unlock()
		}))...)
	if err != nil {
		return nil, fmt.Errorf("open write log: %w", err)
	}
	// Its own node alone: not the others that node tells of (what Serving asks is
	// whether this host's node lives).
	l.local, err = nats.Connect(urls[0], append(common, nats.Name(cfg.Name+" local"), nats.IgnoreDiscoveredServers(),
		nats.ReconnectHandler(func(*nats.Conn) { l.leaving.Store(false) }))...)
	if err != nil {
		l.nc.Close()
		return nil, fmt.Errorf("open write log: %w", err)
	}
	for !l.nc.IsConnected() {
		select {
		case <-ctx.Done():
			l.Close()
			return nil, fmt.Errorf("open write log: no node of %v answers: %w", urls, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if l.js, err = jetstream.New(l.nc); err != nil {
		l.Close()
		return nil, fmt.Errorf("open write log: %w", err)
	}
	if err := l.prog.subscribe(l.nc); err != nil {
		l.Close()
		return nil, fmt.Errorf("open write log: %w", err)
	}
	if _, err := l.nc.Subscribe(fleetspec.LeavingSubject+"."+cfg.Spec.Self, func(*nats.Msg) {
		l.leaving.Store(true)
		l.log.Info("write log: this host's node is stopping: the host does not serve")
		l.prog.reportNow()
	}); err != nil {
		l.Close()
		return nil, fmt.Errorf("open write log: %w", err)
	}
	l.done.Add(1)
	go l.reportLoop()
	return l, nil
}

// Close stops the reports and closes the connections.
func (l *Log) Close() error {
	l.closeMu.Do(func() {
		close(l.stop)
		l.done.Wait()
		if l.nc != nil {
			l.nc.Close()
		}
		if l.local != nil {
			l.local.Close()
		}
	})
	return nil
}

// Publish appends data to the stream under id and returns its sequence. It retries with
// the same id until acknowledged (a message stored by an earlier try is acknowledged as a
// duplicate with its first sequence) or ctx ends: then ErrUndecided.
func (l *Log) Publish(ctx context.Context, id string, data []byte) (uint64, error) {
	msg := &nats.Msg{Subject: fleetspec.Subject, Data: data, Header: nats.Header{}}
	var last error
	for try := 0; ; try++ {
		actx, cancel := context.WithTimeout(ctx, l.cfg.AttemptTimeout)
		ack, err := l.js.PublishMsg(actx, msg, jetstream.WithMsgID(id), jetstream.WithRetryAttempts(0))
		cancel()
		if err == nil {
			return ack.Sequence, nil
		}
		last = err
		if ctx.Err() != nil {
			return 0, fmt.Errorf("%w (%d tries, last: %v)", ErrUndecided, try+1, last)
		}
		// A timeout was a try that took its whole time; anything else (no responders
		// during an election, a disconnected client) comes back at once: pause briefly.
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// Self is this host's name.
func (l *Log) Self() string { return l.cfg.Spec.Self }
