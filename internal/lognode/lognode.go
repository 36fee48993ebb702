// Package lognode runs this host's node of the fleet's write log: a NATS server with
// JetStream (nats-server, linked from the Go module pinned in go.mod, nothing installed by
// hand), clustered with the other hosts' nodes by the fleet's list (internal/fleetspec),
// and it creates the log's stream and snapshot bucket once (every node tries; the first
// creation wins, the others find them), replicated on min(3, hosts) hosts.
//
// A planned stop (Stop: SIGTERM from the supervisor, `supervisor kill`, reload or upgrade)
// first hands away the streams this node leads (the write log's, the snapshot bucket's:
// the JetStream API's step-down) and waits for another node to take each, then enters lame
// duck mode, which hands over every other raft group it leads (the meta group's, which a
// client of the global account may not step down) and closes the clients over a second;
// so writes pause for a step-down (~0.1-0.3 s) rather than for an election after a silent
// leader (4-9 s: nats-server's election timeouts are constants in its raft.go, not
// settings). A node killed -9 gives the others that election.
//
// Files: lognode.go holds Config, Start and the node's life; ensure.go creates the stream
// and the bucket; zaplog.go passes nats-server's log lines to zap.
package lognode

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/fleetspec"
)

// Config configures Start.
type Config struct {
	// Spec is the fleet; required, and valid (fleetspec.Spec.Validate).
	Spec fleetspec.Spec
	// Logger receives the node's own lines and nats-server's. Default: none.
	Logger *zap.Logger
	// StepDownWait bounds how long Stop waits for another node to take each group this
	// node leads. Default 2 s.
	StepDownWait time.Duration
}

// Node is a running log node.
type Node struct {
	cfg  Config
	log  *zap.Logger
	srv  *server.Server
	nc   *nats.Conn // in-process, for the stream's creation and the step-downs
	stop context.CancelFunc
	done sync.WaitGroup // the ensure goroutine

	ready chan struct{} // closed once the stream and the bucket exist
}

// Start starts the node and returns once it takes clients; the stream and the bucket are
// created in the background as soon as the cluster has a meta leader (Ready says when).
func Start(cfg Config) (*Node, error) {
	if err := cfg.Spec.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.StepDownWait <= 0 {
		cfg.StepDownWait = 2 * time.Second
	}
	self := cfg.Spec.SelfHost()
	opts := &server.Options{
		ServerName: self.Name,
		Host:       self.Addr,
		Port:       self.ClientPort,
		Cluster: server.ClusterOpts{
			Name: fleetspec.Cluster,
			Host: self.Addr,
			Port: self.RoutePort,
		},
		JetStream:  true,
		StoreDir:   cfg.Spec.Dir,
		SyncAlways: cfg.Spec.Sync == fleetspec.SyncAlways,
		NoSigs:     true, // the signals are cmd/lognode's: a planned stop steps down first
		// A planned stop ends in lame duck mode: it hands every raft group it leads (the
		// meta group's among them, which a client of the global account may not step
		// down) to another node, waits a second for them to take it, and closes the
		// clients over LameDuckDuration rather than all at once.
		LameDuckDuration:    time.Second,
		LameDuckGracePeriod: 100 * time.Millisecond,
		// Clients (the workers) learn the other nodes from the fleet's list, not gossip.
		// Routes: every other host; a new host joins by naming one that runs.
	}
	for _, h := range cfg.Spec.Hosts {
		if h.Name == self.Name {
			continue
		}
		u, err := url.Parse(h.RouteURL())
		if err != nil {
			return nil, fmt.Errorf("start log node: route to %s: %w", h.Name, err)
		}
		opts.Routes = append(opts.Routes, u)
	}
	if len(opts.Routes) == 0 {
		// A fleet of one: JetStream runs alone, without a cluster.
		opts.Cluster = server.ClusterOpts{}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("start log node: %w", err)
	}
	log := cfg.Logger.With(zap.String("node", self.Name))
	srv.SetLoggerV2(zapLogger{log.Named("nats")}, false, false, false)
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("start log node: not taking clients on %s after 30 s", self.ClientURL())
	}
	nc, err := nats.Connect("", nats.InProcessServer(srv), nats.Name("lognode "+self.Name), nats.MaxReconnects(-1))
	if err != nil {
		srv.Shutdown()
		return nil, fmt.Errorf("start log node: connect in process: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{cfg: cfg, log: log, srv: srv, nc: nc, stop: cancel, ready: make(chan struct{})}
	n.done.Add(1)
	go func() {
		defer n.done.Done()
		if err := n.ensure(ctx); err == nil {
			close(n.ready)
		}
	}()
	log.Info("log node started", zap.String("clients", self.ClientURL()), zap.String("routes", self.RouteURL()),
		zap.Int("replicas", cfg.Spec.Replicas()), zap.String("dir", cfg.Spec.Dir), zap.Bool("sync_always", opts.SyncAlways))
	return n, nil
}

// ClientURL is where the node takes clients.
func (n *Node) ClientURL() string { return n.cfg.Spec.SelfHost().ClientURL() }

// Ready is closed once the stream and the bucket exist (created here or found).
func (n *Node) Ready() <-chan struct{} { return n.ready }

// Stop is the planned stop: it hands away every raft group this node leads, waits (up to
// StepDownWait each) for another node to take it, then shuts the server down. ctx bounds
// the whole step-down; the shutdown follows either way.
func (n *Node) Stop(ctx context.Context) error {
	n.stop()
	n.done.Wait()
	began := time.Now()
	// This host's applier says at once that the host does not serve (the writers stop
	// waiting for it) rather than when its reports stop.
	if err := n.nc.Publish(fleetspec.LeavingSubject+"."+n.cfg.Spec.Self, nil); err == nil {
		n.nc.FlushTimeout(time.Second)
	}
	moved, err := n.stepDown(ctx)
	if moved > 0 || err != nil {
		n.log.Info("log node stepped down", zap.Int("groups", moved), zap.Duration("took", time.Since(began)), zap.Error(err))
	}
	n.nc.Close()
	n.srv.LameDuckShutdown() // the meta group and anything else it leads, then the clients
	n.srv.WaitForShutdown()
	n.log.Info("log node stopped")
	return err
}

// Kill shuts the server down without stepping down (tests: the next best thing to kill -9
// inside one process).
func (n *Node) Kill() {
	n.stop()
	n.done.Wait()
	n.nc.Close()
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}

// stepDown asks each stream this node leads to elect another leader, and waits until it
// has: the write log's first, so that writes pause for this step-down alone. (The meta
// group follows in lame duck mode, Stop.)
func (n *Node) stepDown(ctx context.Context) (moved int, err error) {
	if n.srv.JetStreamEnabled() && len(n.cfg.Spec.Hosts) > 1 {
		streams := []string{fleetspec.Stream, "OBJ_" + fleetspec.SnapshotBucket}
		var errs []error
		for _, st := range streams {
			if !n.srv.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, st) {
				continue
			}
			if err := n.request(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+st, func() bool {
				return !n.srv.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, st)
			}); err != nil {
				errs = append(errs, fmt.Errorf("step down stream %s: %w", st, err))
				continue
			}
			moved++
		}
		err = errors.Join(errs...)
	}
	return moved, err
}

// request sends a JetStream API request and waits until gone reports the leadership moved.
func (n *Node) request(ctx context.Context, subject string, gone func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.StepDownWait)
	defer cancel()
	if _, err := n.nc.RequestWithContext(ctx, subject, nil); err != nil {
		return err
	}
	for !gone() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("still the leader: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}
