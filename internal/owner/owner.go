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
package owner

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
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

// elect binds the name (and owns the key) or connects to whoever has bound it.
func (n *Node) elect() (*net.UnixListener, *link, error) {
	n.elections.Add(1)
	addr := &net.UnixAddr{Name: "@" + n.cfg.Key, Net: "unix"}
	var lastErr error
	for attempt := range 100 {
		if attempt > 0 {
			// The owner has just gone (connect refused) or is between bind and listen:
			// another process is about to win. Wait a little and try again.
			select {
			case <-n.quit:
				return nil, nil, ErrNoOwner
			case <-time.After(time.Duration(attempt) * 200 * time.Microsecond):
			}
		}
		ln, err := net.ListenUnix("unix", addr)
		if err == nil {
			return ln, nil, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, nil, fmt.Errorf("bind %s: %w", addr.Name, err)
		}
		c, err := net.DialUnix("unix", nil, addr)
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EAGAIN) {
				lastErr = err
				continue
			}
			return nil, nil, fmt.Errorf("connect to the owner at %s: %w", addr.Name, err)
		}
		pid, err := trustedPeer(c)
		if err != nil {
			c.Close()
			return nil, nil, fmt.Errorf("connect to the owner at %s: %w", addr.Name, err)
		}
		// Wait for the owner's hello: a connection completes in the listener's backlog
		// even when the owner is dying (its peers' sockets may close before its listener)
		// or stopped, and a request sent there would be lost as undecided, though never
		// read. After the hello, the owner has accepted: it reads what is sent.
		br := bufio.NewReaderSize(c, headerLen+MaxPayload)
		c.SetReadDeadline(time.Now().Add(helloTimeout))
		kind, _, _, err := readFrame(br)
		c.SetReadDeadline(time.Time{})
		if err != nil || kind != kindHello {
			c.Close()
			if err == nil {
				err = fmt.Errorf("first frame %q, want a hello", kind)
			}
			lastErr = fmt.Errorf("owner pid %d did not greet: %w", pid, err)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil, nil, lastErr // stopped or hung: try again later, write here meanwhile
			}
			continue
		}
		return nil, n.newLink(c, br, pid), nil
	}
	return nil, nil, fmt.Errorf("elect an owner of %s: no process could bind the name or be reached: %w", addr.Name, lastErr)
}

// trustedPeer returns the pid of the process at the other end of c, and an error unless it
// runs as this process's user or as root (SO_PEERCRED: given by the kernel, not the peer).
func trustedPeer(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("read peer credentials: %w", cerr)
	}
	if me := os.Geteuid(); int(cred.Uid) != me && cred.Uid != 0 {
		return int(cred.Pid), fmt.Errorf("peer pid %d runs as uid %d, not %d: refused", cred.Pid, cred.Uid, me)
	}
	return int(cred.Pid), nil
}

// run is the node's manager: it serves as owner, or follows until the owner goes away and
// elects again, until Close.
func (n *Node) run(ln *net.UnixListener, l *link) {
	defer close(n.runDone)
	for {
		switch {
		case ln != nil:
			n.accept(ln) // until Close
			return
		case l != nil:
			select {
			case <-l.gone:
				n.link.CompareAndSwap(l, nil)
				n.role.Store(RoleNone)
				n.ownerPID.Store(0)
				n.log.Info("write owner: gone, electing again", zap.Int("owner_pid", l.pid), zap.String("why", l.why()))
				if n.cfg.OnRole != nil {
					n.cfg.OnRole(RoleNone)
				}
			case <-n.quit:
				return
			}
		default: // Join's election failed
			select {
			case <-n.quit:
				return
			case <-time.After(time.Second):
			}
		}
		for failures := 0; ; failures++ {
			var err error
			ln, l, err = n.elect()
			if err == nil && n.adopt(ln, l) {
				break
			}
			if err == nil || errors.Is(err, ErrNoOwner) { // closing
				return
			}
			lvl := zap.WarnLevel
			if failures > 0 {
				lvl = zap.DebugLevel // said once; a hung owner would repeat it every second
			}
			n.log.Log(lvl, "write owner election failed: this process writes itself; trying again in 1s", zap.Error(err))
			select {
			case <-n.quit:
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// adopt takes the role an election gave: the listener of an owner or the link of a
// follower. It returns false, and closes what it was given, when the node is closing.
func (n *Node) adopt(ln *net.UnixListener, l *link) bool {
	n.mu.Lock()
	if n.closing {
		n.mu.Unlock()
		if ln != nil {
			ln.Close()
		}
		if l != nil {
			l.abort()
		}
		return false
	}
	role := RoleFollower
	if ln != nil {
		role = RoleOwner
		n.ln = ln
		n.ownerPID.Store(int64(os.Getpid()))
		n.role.Store(RoleOwner)
		n.log.Info("write owner: this process", zap.String("key", n.cfg.Key))
	} else {
		n.link.Store(l)
		n.ownerPID.Store(int64(l.pid))
		n.role.Store(RoleFollower)
		n.log.Info("write owner: following", zap.Int("owner_pid", l.pid), zap.String("key", n.cfg.Key))
	}
	n.mu.Unlock()
	if n.cfg.OnRole != nil {
		n.cfg.OnRole(role)
	}
	return true
}

// accept takes followers' connections until the listener is closed.
func (n *Node) accept(ln *net.UnixListener) {
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors, most likely: followers write themselves meanwhile.
			n.log.Warn("write owner: accept follower", zap.Error(err))
			select {
			case <-n.quit:
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		pid, err := trustedPeer(c)
		if err != nil {
			n.log.Warn("write owner: refused a connection", zap.Error(err))
			c.Close()
			continue
		}
		p := &Peer{n: n, c: c, pid: pid, out: newSender(c), quit: make(chan struct{})}
		p.out.queue(kindHello, 0, nil)
		n.mu.Lock()
		n.peers[p] = struct{}{}
		n.peersWG.Add(1)
		n.mu.Unlock()
		n.log.Debug("write owner: follower connected", zap.Int("follower_pid", pid))
		n.wg.Add(2)
		go p.read()
		go func() {
			defer n.wg.Done()
			p.out.run(p.quit, p.closed)
		}()
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

// Peer is a follower's connection, on the owner.
type Peer struct {
	n    *Node
	c    *net.UnixConn
	pid  int
	out  *sender
	quit chan struct{} // closed by abort

	outstanding atomic.Int64 // requests served and not yet answered
	readDone    atomic.Bool
	finishOnce  sync.Once
	abortOnce   sync.Once
}

// Reply answers the request id. Each request is answered exactly once.
func (p *Peer) Reply(id uint64, payload []byte) {
	p.out.queue(kindAnswer, id, payload)
	if p.outstanding.Add(-1) == 0 && p.readDone.Load() {
		p.finish()
	}
}

// read serves the follower's requests until it closes its side or the connection fails.
func (p *Peer) read() {
	defer p.n.wg.Done()
	br := bufio.NewReaderSize(p.c, headerLen+MaxPayload)
	for {
		kind, id, payload, err := readFrame(br)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
				p.n.log.Debug("write owner: follower connection ended", zap.Int("follower_pid", p.pid), zap.Error(err))
			}
			break
		}
		if kind != kindRequest {
			p.n.log.Warn("write owner: follower sent an unexpected frame; closing", zap.Int("follower_pid", p.pid),
				zap.String("kind", string(kind)))
			break
		}
		p.outstanding.Add(1)
		p.n.served.Add(1)
		p.n.cfg.Serve(p, id, payload)
	}
	p.readDone.Store(true)
	if p.outstanding.Load() == 0 {
		p.finish()
	}
}

// finish lets the sender close the connection once the answers are written.
func (p *Peer) finish() { p.finishOnce.Do(p.out.finish) }

// abort closes the connection now.
func (p *Peer) abort() {
	p.abortOnce.Do(func() {
		close(p.quit)
		p.c.Close()
	})
}

// closed runs when the sender is done: the connection closes and leaves the peer set.
func (p *Peer) closed() {
	p.c.Close()
	p.n.mu.Lock()
	delete(p.n.peers, p)
	p.n.mu.Unlock()
	p.n.peersWG.Done()
}

// link is a follower's connection to the owner.
type link struct {
	n   *Node
	c   *net.UnixConn
	br  *bufio.Reader
	pid int
	out *sender

	mu       sync.Mutex
	pending  map[uint64]*call
	nextID   uint64
	draining bool // goaway received, or the connection ended: no new requests
	reason   string

	lastHeard atomic.Int64 // unix nanoseconds of the last frame from the owner
	suspect   atomic.Bool  // the owner has not answered for SuspectAfter

	gone     chan struct{} // closed when the link takes no more requests
	goneOnce sync.Once
	quit     chan struct{} // closed when the connection has ended
}

// call is one forwarded request waiting for its answer.
type call struct {
	done chan struct{} // capacity 1
	resp []byte
	err  error
	sent int64 // unix nanoseconds
}

var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func (n *Node) newLink(c *net.UnixConn, br *bufio.Reader, pid int) *link {
	l := &link{n: n, c: c, br: br, pid: pid, out: newSender(c), pending: map[uint64]*call{},
		gone: make(chan struct{}), quit: make(chan struct{})}
	l.lastHeard.Store(time.Now().UnixNano())
	n.wg.Add(3)
	go l.read()
	go func() {
		defer n.wg.Done()
		// After a goaway: everything queued is written, then the write side is closed,
		// which tells the owner that nothing more comes.
		l.out.run(l.quit, func() { l.c.CloseWrite() })
	}()
	go l.sweep()
	return l
}

// Forward sends req to the owner and appends its answer to dst. ErrNoOwner means it was not
// sent (do the work here); ErrOwnerLost and ErrOwnerTimeout mean it is undecided.
func (n *Node) Forward(req, dst []byte) ([]byte, error) {
	l := n.link.Load()
	if l == nil || l.suspect.Load() {
		return dst, ErrNoOwner
	}
	if len(req) > MaxPayload {
		return dst, fmt.Errorf("forward request: %d bytes, more than %d", len(req), MaxPayload)
	}
	c := calls.Get().(*call)
	c.sent = time.Now().UnixNano()
	l.mu.Lock()
	if l.draining {
		l.mu.Unlock()
		calls.Put(c)
		return dst, ErrNoOwner
	}
	l.nextID++
	id := l.nextID
	l.pending[id] = c
	l.out.queue(kindRequest, id, req)
	l.mu.Unlock()
	n.forwarded.Add(1)
	<-c.done
	dst = append(dst, c.resp...)
	err := c.err
	c.resp, c.err = c.resp[:0], nil
	calls.Put(c)
	return dst, err
}

// read takes the owner's answers until the connection ends, then fails what is still
// waiting with ErrOwnerLost.
func (l *link) read() {
	defer l.n.wg.Done()
	defer close(l.quit)
	why := "the owner closed the connection"
	for {
		kind, id, payload, err := readFrame(l.br)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				why = err.Error()
			}
			break
		}
		l.lastHeard.Store(time.Now().UnixNano())
		if l.suspect.Swap(false) {
			l.n.log.Info("write owner: answers again", zap.Int("owner_pid", l.pid))
		}
		switch kind {
		case kindAnswer:
			l.mu.Lock()
			c := l.pending[id]
			delete(l.pending, id)
			l.mu.Unlock()
			if c != nil { // else it timed out already
				c.resp = append(c.resp[:0], payload...)
				c.done <- struct{}{}
			}
		case kindGoaway:
			l.mu.Lock()
			l.draining = true
			l.reason = "handed over (the owner is stopping)"
			l.mu.Unlock()
			l.markGone()
			l.out.finish()
		default:
			why = fmt.Sprintf("the owner sent an unexpected frame %q", kind)
			l.c.Close()
		}
	}
	l.c.Close()
	l.mu.Lock()
	l.draining = true
	if l.reason == "" {
		l.reason = why
	}
	lost := len(l.pending)
	for id, c := range l.pending {
		delete(l.pending, id)
		c.err = ErrOwnerLost
		c.done <- struct{}{}
	}
	l.mu.Unlock()
	if lost > 0 {
		l.n.lost.Add(uint64(lost))
		l.n.log.Warn("write owner: gone with requests in flight; they fail as undecided", zap.Int("owner_pid", l.pid),
			zap.Int("requests", lost), zap.String("why", why))
	}
	l.markGone()
}

// sweep fails requests that waited longer than CallTimeout, and marks the owner suspect
// when one has waited SuspectAfter without a word from it. One timer per link instead of
// one per request: the bound is kept to within a tick.
func (l *link) sweep() {
	defer l.n.wg.Done()
	tick := min(l.n.cfg.CallTimeout/10, l.n.cfg.SuspectAfter/4, 100*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	timeout, suspectAfter := l.n.cfg.CallTimeout.Nanoseconds(), l.n.cfg.SuspectAfter.Nanoseconds()
	for {
		select {
		case <-l.quit:
			return
		case <-t.C:
		}
		now := time.Now().UnixNano()
		stale, expired := false, 0
		l.mu.Lock()
		for id, c := range l.pending {
			switch age := now - c.sent; {
			case age > timeout:
				delete(l.pending, id)
				c.err = ErrOwnerTimeout
				c.done <- struct{}{}
				expired++
			case age > suspectAfter:
				stale = true
			}
		}
		l.mu.Unlock()
		if expired > 0 {
			l.n.timeouts.Add(uint64(expired))
			l.n.log.Warn("write owner: requests timed out; they fail as undecided", zap.Int("owner_pid", l.pid),
				zap.Int("requests", expired), zap.Duration("timeout", l.n.cfg.CallTimeout))
		}
		if (stale || expired > 0) && now-l.lastHeard.Load() > suspectAfter && !l.suspect.Swap(true) {
			l.n.log.Warn("write owner: not answering; this process writes itself until it does",
				zap.Int("owner_pid", l.pid), zap.Duration("silent_for", time.Duration(now-l.lastHeard.Load())))
		}
	}
}

func (l *link) markGone() { l.goneOnce.Do(func() { close(l.gone) }) }

func (l *link) why() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reason
}

// drain sends nothing more on the link and closes its write side once what is queued is
// written; the answers to what was sent still come.
func (l *link) drain() {
	l.stopSending()
	l.out.finish()
}

// abort closes the connection now; read fails what is waiting with ErrOwnerLost.
func (l *link) abort() {
	l.stopSending()
	l.c.Close()
}

// stopSending makes Forward refuse the link (ErrNoOwner): this process is leaving.
func (l *link) stopSending() {
	l.mu.Lock()
	l.draining = true
	if l.reason == "" {
		l.reason = "this process is stopping"
	}
	l.mu.Unlock()
}
