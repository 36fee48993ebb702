package http1

import (
	"strconv"
	"time"
)

func (c *conn) appendResponse(keepAlive, head bool) {
	s := c.srv
	w := &c.x.resp
	status := w.Status
	if status == 0 {
		status = 200
	}
	out := statusLine(c.out, status)
	if status != 204 && status != 304 {
		ct := w.ContentType
		if ct == "" {
			ct = "application/json"
		}
		out = append(out, "Content-Type: "...)
		out = append(out, ct...)
		out = append(out, "\r\nContent-Length: "...)
		out = strconv.AppendInt(out, int64(len(w.Body)), 10)
		out = append(out, "\r\n"...)
	}
	out = append(out, s.dateHeader(time.Now())...)
	out = append(out, w.header...)
	if !keepAlive {
		out = append(out, "Connection: close\r\n"...)
	} else if c.x.req.Minor == 0 {
		out = append(out, "Connection: keep-alive\r\n"...)
	}
	out = append(out, "\r\n"...)
	if !head && status != 204 && status != 304 {
		out = append(out, w.Body...)
	}
	c.out = out
	if !w.Probe {
		s.requests.Add(1)
	}
}

// flush writes the queued responses. It returns false when the connection is dead.
func (c *conn) flush() bool {
	if len(c.out) == 0 {
		return true
	}
	if c.lp != nil {
		// The loop never waits: what the socket does not take now stays queued, and the
		// loop goes on when epoll says there is room (see loop.advance).
		return c.lp.write(c)
	}
	var err error
	if c.raw != nil {
		_, err = c.raw.write(c.out, c.srv.writeTO())
	} else {
		now := time.Now()
		if wt := c.srv.writeTO(); c.wdlAt.Sub(now) < wt/2 {
			c.wdlAt = now.Add(wt)
			c.nc.SetWriteDeadline(c.wdlAt)
		}
		_, err = c.nc.Write(c.out)
	}
	c.out = c.out[:0]
	return err == nil
}

func (c *conn) releaseOut() {
	if c.outP == nil {
		c.out = nil
		return
	}
	if cap(c.out) <= 256<<10 {
		*c.outP = c.out[:0]
		bufPool.Put(c.outP)
	}
	c.out, c.outP = nil, nil
}
