package http1

import (
	"syscall"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// mayBlock reports whether r must run off the loop.
func (l *loop) mayBlock(r *Request) bool { return l.blocker != nil && l.blocker.MayBlock(r) }

// ready handles epoll's news of one connection.
func (l *loop) ready(c *conn, ev uint32) {
	if c.busy {
		// Its handler runs. A hang-up or an error: the response will not reach the
		// client, close (the buffers wait for the handler). Input (pipelined behind the
		// request): it waits in the socket, and the connection leaves epoll's interest so
		// level-triggered readiness does not spin the loop; only a hang-up or an error
		// is reported then. Taken out only now, not at every deferred request: a client
		// waiting for its answer sends nothing, and two epoll_ctl calls per write are saved.
		if ev&(unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			l.close(c)
		} else {
			l.interest(c, 0)
		}
		return
	}
	if c.lingering {
		l.discard(c)
		return
	}
	if len(c.out) > 0 {
		if ev&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			l.advance(c)
		}
		return
	}
	if ev&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR|unix.EPOLLRDHUP) == 0 {
		return
	}
	// Readable: now, and only now, a buffer.
	if c.buf == nil {
		c.buf = l.getBuf()
		c.r, c.w, c.scan = 0, 0, 0
	} else if c.w == len(c.buf) && !c.makeRoom() {
		l.refuse(c, errBodyTooLarge)
		l.advance(c)
		return
	}
	n, e := sysRead(c.fd, c.buf[c.w:])
	switch {
	case e == syscall.EAGAIN:
		if c.r == c.w {
			l.putBuf(c)
		}
		return
	case e != 0 || n == 0:
		l.close(c) // the client closed (or reset) its side
		return
	}
	c.w += n
	l.advance(c)
}

// advance drives a connection as far as it goes without waiting: write what is queued,
// parse and answer what is buffered, and settle into the next wait.
func (l *loop) advance(c *conn) {
	s := l.srv
	for {
		if c.fd < 0 {
			return
		}
		if len(c.out) > 0 {
			if !l.write(c) {
				l.close(c)
				return
			}
			if len(c.out) > 0 {
				// The socket is full: go on when epoll says there is room, for at most
				// WriteTimeout from now (not re-armed by the partial writes after).
				if c.events != unix.EPOLLOUT {
					c.due = l.now + int64(s.writeTO())
					l.interest(c, unix.EPOLLOUT)
				}
				return
			}
			c.releaseOut()
		}
		if c.closeAfter {
			l.close(c)
			return
		}
		if c.lingerThen {
			l.linger(c)
			return
		}
		// Parse and answer the buffered requests; pipelined responses leave together, or
		// at flushThreshold.
		for c.r < c.w && len(c.out) < flushThreshold && !c.closeAfter && !c.lingerThen {
			if c.x == nil {
				c.x = l.getX()
			}
			res, perr := c.parse()
			if perr != nil {
				l.refuse(c, perr)
				break
			}
			if res == deferred {
				l.putOff(c)
				return
			}
			if res == closeNow {
				c.closeAfter = true
			}
			if res == needMore {
				break
			}
		}
		if len(c.out) > 0 || c.closeAfter || c.lingerThen {
			continue
		}
		l.putX(c)
		if c.r == c.w {
			// Idle: the buffers go back to the pools.
			l.putBuf(c)
			c.reqBy = 0
			c.due = l.now + int64(s.idle())
			if l.draining {
				l.idleWhileDraining(c)
			}
		} else {
			if c.reqBy == 0 {
				c.reqBy = l.now + int64(s.readTO())
			}
			c.due = c.reqBy
		}
		l.interest(c, unix.EPOLLIN)
		return
	}
}

// putOff runs a request that may block on a goroutine of its own; the loop reads nothing
// more of the connection until the handler returns (woken), see ready.
func (l *loop) putOff(c *conn) {
	c.busy = true
	c.due = 0
	l.busyN++
	go func() {
		c.runHandler()
		l.complete(c)
	}()
}

// complete hands a deferred request back to the loop. The wake-up is written under mu, so
// the loop (which ends only once every deferred request came back) is still there for it.
func (l *loop) complete(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.completed = append(l.completed, c)
	l.signalLocked()
}

// refuse queues the answer to a refused request; the connection closes after a linger.
func (l *loop) refuse(c *conn, perr *protoError) {
	if perr.status == 0 {
		c.closeAfter = true
		return
	}
	if c.x == nil {
		c.x = l.getX()
	}
	c.queueError(perr)
	c.lingerThen = true
}

// linger shuts the write side and discards the client's input for a moment before the
// close, as conn.fail does, so the error response is not destroyed by a reset.
func (l *loop) linger(c *conn) {
	unix.Shutdown(c.fd, unix.SHUT_WR)
	c.lingering, c.lingerThen = true, false
	c.lingerLeft = lingerBytes
	c.due = l.now + int64(lingerTimeout)
	l.putX(c)
	l.putBuf(c)
	l.interest(c, unix.EPOLLIN)
}

func (l *loop) discard(c *conn) {
	if l.scratch == nil {
		l.scratch = make([]byte, 16<<10)
	}
	n, e := sysRead(c.fd, l.scratch)
	if e == syscall.EAGAIN {
		return
	}
	if c.lingerLeft -= n; e != 0 || n == 0 || c.lingerLeft <= 0 {
		l.close(c)
	}
}

// write writes the queued output until done or the socket is full. It returns false when
// the connection is dead.
func (l *loop) write(c *conn) bool {
	for c.woff < len(c.out) {
		n, e := sysWrite(c.fd, c.out[c.woff:])
		switch e {
		case 0:
			c.woff += n
		case syscall.EINTR:
		case syscall.EAGAIN:
			return true
		default:
			return false
		}
	}
	c.out, c.woff = c.out[:0], 0
	return true
}

func (l *loop) interest(c *conn, ev uint32) {
	if c.events == ev {
		return
	}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: ev, Fd: int32(c.fd), Pad: c.gen}); err != nil {
		l.srv.log().Warn("epoll modify connection", zap.Error(err))
	}
	c.events = ev
}

// close closes a connection; a busy one's buffers wait for its handler to return.
func (l *loop) close(c *conn) {
	if c.fd < 0 {
		return
	}
	l.conns[c.fd] = nil
	unix.Close(c.fd) // also takes it out of the epoll set
	c.fd = -1
	l.n--
	l.load.Add(-1)
	if c.busy {
		c.dead = true
	} else {
		l.release(c)
	}
	l.srv.untrack(c)
}

func (l *loop) release(c *conn) {
	l.putX(c)
	l.putBuf(c)
	c.releaseOut()
}

func (l *loop) getBuf() []byte {
	if n := len(l.freeBufs); n > 0 {
		b := l.freeBufs[n-1]
		l.freeBufs = l.freeBufs[:n-1]
		return b
	}
	return make([]byte, initialBuf)
}

// putBuf takes c's read buffer back; one grown past initialBuf is left to the GC.
func (l *loop) putBuf(c *conn) {
	if c.buf == nil {
		return
	}
	if len(c.buf) == initialBuf && len(l.freeBufs) < loopFreeBufs {
		l.freeBufs = append(l.freeBufs, c.buf)
	}
	c.buf, c.r, c.w, c.scan = nil, 0, 0, 0
}

func (l *loop) getX() *exchange {
	if n := len(l.freeX); n > 0 {
		x := l.freeX[n-1]
		l.freeX = l.freeX[:n-1]
		return x
	}
	return new(exchange)
}

func (l *loop) putX(c *conn) {
	x := c.x
	if x == nil {
		return
	}
	c.x = nil
	if len(l.freeX) < loopFreeX && cap(x.resp.Body) <= 256<<10 {
		// Drop the slices into the connection's buffer (the header table's stale ones are
		// bounded by the free list and overwritten by the next parse).
		x.req.Method, x.req.Path, x.req.Query, x.req.Body = nil, nil, nil, nil
		l.freeX = append(l.freeX, x)
	}
}

func sysRead(fd int, b []byte) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		if e != syscall.EINTR {
			return int(n), e
		}
	}
}

func sysWrite(fd int, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}
