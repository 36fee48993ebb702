// Package owner elects one owner among the processes of a host that name the same key, and
// carries requests from the others (the followers) to it.
//
// The election is a Linux abstract unix socket name. The process that binds "@"+Key first
// owns the key and accepts the followers' connections on that socket; binding it again fails
// with EADDRINUSE while the owner lives, and the kernel frees the name the moment the
// owner's listening socket closes, whatever the reason, kill -9 included. One name is so both
// the lock and the meeting point; no file is left behind, nothing else takes part (no
// supervisor: processes started by hand elect the same way), and a follower learns of its
// owner's death as EOF on its connection, at once, and elects again: the first to bind wins,
// the rest connect to it. Connections from other users are refused (SO_PEERCRED), both ways.
//
// What an owner serializes must stay correct without it: abstract names belong to a network
// namespace, so processes in different namespaces elect one owner each; and while there is
// no usable owner (the election is under way, or the owner has stopped answering), Forward
// returns ErrNoOwner and the caller does the work itself. The feed store, the one user, keeps
// SQLite's own locking for that; the owner is there to make writes cheap (one committer,
// group commit), not to make them safe.
//
// Requests in flight when the owner dies are undecided (it may have done the work before it
// died). They fail with ErrOwnerLost and are never sent again: the caller must say so to its
// client, since repeating, say, a new post could store it twice. A graceful Close of the
// owner loses nothing: it frees the name (a follower takes over), tells each follower to send
// nothing more (goaway), answers everything already sent, and closes each connection once
// the follower has closed its side.
//
// Non-goals: owners across hosts, persistence of requests, retries.
//
// Wire: frames on a stream socket, length u32 (big endian, of the rest), kind byte, id u64,
// payload; see wire.go. Each connection has one writer goroutine per side, which writes all
// frames queued since its last write in one system call (sender.go): the owner answers a
// batch with one write per follower.
//
// Files: owner.go holds the configuration, Join, the node's state and Close; election.go
// the election (binding the name, the peer check, the manager that elects again when the
// owner goes); peer.go the owner's side, which accepts followers and answers their
// requests (Peer); forward.go the follower's side, which forwards requests and matches
// the answers (Forward, link); wire.go the frame format; sender.go the writer goroutine of
// each connection.
package owner

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Errors of Forward.
var (
	// ErrNoOwner: there is no owner to send to right now (this process is the owner, an
	// election is under way, the owner has stopped answering, or the node is closed); the
	// request was not sent, and the caller should do the work itself.
	ErrNoOwner = errors.New("no write owner to send to")
	// ErrOwnerLost: the owner went away after the request was sent and before it answered.
	// The request may or may not have been carried out.
	ErrOwnerLost = errors.New("the write owner went away before answering; the write may or may not have been saved")
	// ErrOwnerTimeout: the owner did not answer within CallTimeout. The request may still
	// be carried out later.
	ErrOwnerTimeout = errors.New("the write owner did not answer in time; the write may or may not have been saved")
)

// helloTimeout bounds the wait for a new owner's hello; an owner that does not greet in
// time is stopped or hung: the election is tried again a second later.
const helloTimeout = time.Second

// Roles (Stats.Role).
const (
	RoleNone     = "none" // no owner known: an election is under way or failed
	RoleOwner    = "owner"
	RoleFollower = "follower"
)

// Config configures Join. Key and Serve are required.
type Config struct {
	// Key names what is owned: processes with the same Key elect one owner. It becomes the
	// abstract socket name "@"+Key, so it must fit in 107 bytes.
	Key string

	// Serve runs on the owner for each request a follower sends, in that follower's reader
	// goroutine. payload is valid only until Serve returns. Each request must be answered
	// exactly once, with p.Reply(id, ...), from any goroutine, now or later: Close waits for
	// the answers.
	Serve func(p *Peer, id uint64, payload []byte)

	// Logger receives role changes. Default: no logs.
	Logger *zap.Logger

	// CallTimeout bounds how long Forward waits for an answer before it fails with
	// ErrOwnerTimeout. Default 5 s.
	CallTimeout time.Duration

	// SuspectAfter: once a request has waited this long while nothing at all came from the
	// owner, Forward stops sending to it (ErrNoOwner: callers do the work themselves) until
	// the owner is heard from again. Default 1 s.
	SuspectAfter time.Duration

	// HandoverTimeout bounds how long Close, on the owner, waits for followers to close
	// their side after the goaway. Default 1 s.
	HandoverTimeout time.Duration

	// OnRole, when set, is called with RoleOwner or RoleFollower each time this node takes
	// that role, and with RoleNone when its owner has gone (not at Close). It runs in the
	// node's own goroutine (in Join's, the first time): it must not block for long.
	OnRole func(role string)
}

// Node is this process's part in the election of one key. Its methods are safe for
// concurrent use.
type Node struct {
	cfg Config
	log *zap.Logger

	role atomic.Value         // string: RoleNone, RoleOwner, RoleFollower
	link atomic.Pointer[link] // the connection to the owner, while following

	mu      sync.Mutex
	ln      *net.UnixListener // while owning
	peers   map[*Peer]struct{}
	peersWG sync.WaitGroup // one per peer: done when its connection is closed
	closing bool

	quit      chan struct{} // closed by Close
	runDone   chan struct{} // closed when run returns
	wg        sync.WaitGroup
	closeOnce sync.Once

	forwarded, served, timeouts, lost, elections atomic.Uint64
	ownerPID                                     atomic.Int64
}

// Join takes part in the election for cfg.Key: it owns the key, or connects to the owner,
// before it returns (when no owner answers, it starts without one, role RoleNone, and tries
// again each second), and elects again whenever the owner goes away, until Close. It fails
// only on a bad Config.
func Join(cfg Config) (*Node, error) {
	if cfg.Key == "" || len(cfg.Key) > 107 {
		return nil, fmt.Errorf("join election: key %q: want 1 to 107 bytes", cfg.Key)
	}
	if cfg.Serve == nil {
		return nil, errors.New("join election: Serve is nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 5 * time.Second
	}
	if cfg.SuspectAfter <= 0 {
		cfg.SuspectAfter = time.Second
	}
	if cfg.HandoverTimeout <= 0 {
		cfg.HandoverTimeout = time.Second
	}
	n := &Node{
		cfg:   cfg,
		log:   cfg.Logger,
		peers: map[*Peer]struct{}{},
		quit:  make(chan struct{}),

		runDone: make(chan struct{}),
	}
	n.role.Store(RoleNone)
	ln, l, err := n.elect()
	if err != nil {
		// No owner now (it does not answer, say): this process writes itself, and run
		// tries again.
		n.log.Warn("write owner election failed: this process writes itself; trying again in 1s", zap.Error(err))
	} else {
		n.adopt(ln, l)
	}
	go n.run(ln, l)
	return n, nil
}

// Role is RoleOwner, RoleFollower or RoleNone.
func (n *Node) Role() string { return n.role.Load().(string) }

// Stats are a Node's counters since Join.
type Stats struct {
	Role string
	// OwnerPID is the owner's process id (this process's own when it owns the key), or 0.
	OwnerPID int
	// Followers is how many followers are connected (owner only).
	Followers int
	// Forwarded counts requests sent to an owner; Served, requests served for followers;
	// Timeouts and Lost, forwarded requests that failed with ErrOwnerTimeout and
	// ErrOwnerLost; Elections, how many elections this node ran.
	Forwarded, Served, Timeouts, Lost, Elections uint64
}

// Stats returns the counters.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	followers := len(n.peers)
	n.mu.Unlock()
	return Stats{
		Role: n.Role(), OwnerPID: int(n.ownerPID.Load()), Followers: followers,
		Forwarded: n.forwarded.Load(), Served: n.served.Load(), Timeouts: n.timeouts.Load(),
		Lost: n.lost.Load(), Elections: n.elections.Load(),
	}
}

// Close leaves the election. An owner frees the name (a follower takes over at once), tells
// its followers to send nothing more, and waits up to HandoverTimeout for them to close
// their side once their requests are answered; so the Serve function must keep answering
// until Close returns. A follower sends nothing more and waits (up to CallTimeout) for the
// answers to what it sent. Forward returns ErrNoOwner from the start of Close on.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.mu.Lock()
		n.closing = true
		ln := n.ln
		l := n.link.Swap(nil)
		n.mu.Unlock()
		close(n.quit)
		if ln != nil {
			ln.Close() // accept returns; no peer is added after this
		}
		n.role.Store(RoleNone)
		if l != nil {
			// A follower that leaves lets its requests in flight finish: it sends nothing
			// more, closes its write side, and the owner closes the connection once it has
			// answered them.
			l.drain()
			select {
			case <-l.quit:
			case <-time.After(n.cfg.CallTimeout):
				l.abort()
			}
		}
		<-n.runDone // accept has returned: the peer set is final; hand over
		n.mu.Lock()
		peers := make([]*Peer, 0, len(n.peers))
		for p := range n.peers {
			peers = append(peers, p)
		}
		n.mu.Unlock()
		for _, p := range peers {
			p.out.queue(kindGoaway, 0, nil)
		}
		handed := make(chan struct{})
		go func() {
			n.peersWG.Wait()
			close(handed)
		}()
		select {
		case <-handed:
		case <-time.After(n.cfg.HandoverTimeout):
			n.mu.Lock()
			left := len(n.peers)
			for p := range n.peers {
				p.abort()
			}
			n.mu.Unlock()
			n.log.Warn("write owner: followers did not finish the handover in time; closed", zap.Int("followers", left),
				zap.Duration("waited", n.cfg.HandoverTimeout))
			<-handed
		}
		n.wg.Wait()
	})
	return nil
}
