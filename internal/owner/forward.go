package owner

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

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
