package owner

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

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
