package owner

import (
	"net"
	"sync"
	"time"
)

// writeTimeout bounds one write to a peer that does not read (stopped, or stuck): past it
// the connection is treated as dead.
const writeTimeout = 5 * time.Second

// sender is the writing half of a connection: frames are queued by any goroutine and
// written by the sender's own goroutine (run), everything queued in one system call. Under
// load that coalesces: the owner answers a whole batch with one write per follower, and a
// follower's requests that arrive while a write is under way go out together.
type sender struct {
	c *net.UnixConn

	mu   sync.Mutex
	buf  []byte
	fin  bool // no more frames: after the last write, finish (see run)
	dead bool // a write failed: drop what is queued
	kick chan struct{}
}

func newSender(c *net.UnixConn) *sender {
	return &sender{c: c, kick: make(chan struct{}, 1)}
}

// queue appends a frame and wakes the writer; false when the sender has finished.
func (s *sender) queue(kind byte, id uint64, payload []byte) bool {
	s.mu.Lock()
	if s.fin {
		s.mu.Unlock()
		return false
	}
	s.buf = appendFrame(s.buf, kind, id, payload)
	s.mu.Unlock()
	s.wake()
	return true
}

func (s *sender) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// finish makes run return once everything queued so far is written.
func (s *sender) finish() {
	s.mu.Lock()
	s.fin = true
	s.mu.Unlock()
	s.wake()
}

// run writes queued frames until finish, then calls last (which closes or half-closes the
// connection). quit ends it at once (the connection is being closed by force).
func (s *sender) run(quit <-chan struct{}, last func()) {
	defer last()
	var spare []byte
	for {
		select {
		case <-s.kick:
		case <-quit:
			return
		}
		s.mu.Lock()
		buf, fin, dead := s.buf, s.fin, s.dead
		s.buf = spare[:0]
		s.mu.Unlock()
		if len(buf) > 0 && !dead {
			s.c.SetWriteDeadline(time.Now().Add(writeTimeout))
			if _, err := s.c.Write(buf); err != nil {
				s.mu.Lock()
				s.dead = true
				s.mu.Unlock()
			}
		}
		spare = buf
		if fin {
			s.mu.Lock()
			empty := len(s.buf) == 0
			s.mu.Unlock()
			if empty {
				return
			}
			s.wake() // frames queued before finish, after the swap
		}
	}
}
