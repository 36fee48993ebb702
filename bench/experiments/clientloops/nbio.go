package main

import (
	"fmt"
	"io"
	"net"
	"time"

	"github.com/lesismal/nbio"
	"github.com/lesismal/nbio/logging"
)

type nbioConn = nbio.Conn

// nbioEngine is nbio's engine with one poller (NPoller 1), level-triggered, reading in
// the poller. nbio's timer is Engine.AfterFunc, in v1.6.8 time.AfterFunc with a recover
// around the callback: a runtime timer per user, whose callback runs on a goroutine of its
// own and sends there with Conn.Write (nbio locks the connection and writes to the socket
// from the calling goroutine; what the socket does not take it queues for the poller).
// Reads: OnData gets the poller's shared read buffer, valid only during the call, so an
// incomplete response's tail is copied into the user's pend, as the epoll engine does.
type nbioEngine struct {
	r      *runner
	stderr io.Writer
	eng    *nbio.Engine
}

func newNbioEngine(r *runner, stderr io.Writer) *nbioEngine {
	return &nbioEngine{r: r, stderr: stderr}
}

func (e *nbioEngine) timers() string {
	return "Engine.AfterFunc per user (runtime timer; callback on its own goroutine writes)"
}

func (e *nbioEngine) start() error {
	logging.SetLogger(nbioLogger{e.stderr}) // its default logger writes to stdout
	e.eng = nbio.NewEngine(nbio.Config{Name: "clientloops", NPoller: 1, ReadBufferSize: readBufSize})
	e.eng.OnData(e.onData)
	e.eng.OnClose(e.onClose)
	return e.eng.Start()
}

// add converts c (nbio duplicates its descriptor and closes c), names its user and
// registers it with the poller; then arms the user's timer.
func (e *nbioEngine) add(u *user, c net.Conn) error {
	nc, err := nbio.NBConn(c)
	if err != nil {
		return err
	}
	nc.SetSession(u)
	u.nc.Store(nc)
	if _, err := e.eng.AddConn(nc); err != nil {
		return err
	}
	t := e.eng.AfterFunc(time.Duration(u.due.Load()-e.r.now()), func() { e.send(u) })
	u.timer.Store(t)
	if u.closed.Load() { // closed before the timer was stored: onClose could not stop it
		t.Stop()
	}
	return nil
}

func (e *nbioEngine) stop() {
	e.eng.Stop()
}

// send runs on the timer's goroutine.
func (e *nbioEngine) send(u *user) {
	if u.closed.Load() {
		return
	}
	u.sent.Store(e.r.now())
	u.inflight.Store(true)
	u.nc.Load().Write(e.r.req) // on an error nbio closes the connection: onClose counts it
}

// onData runs on the poller.
func (e *nbioEngine) onData(c *nbio.Conn, data []byte) {
	u := c.Session().(*user)
	done, kind := e.r.consume(u, data)
	switch {
	case kind >= 0:
		e.r.broken(u, kind)
		c.Close()
	case done:
		u.timer.Load().Reset(time.Duration(u.due.Load() - e.r.now()))
	}
}

// onClose runs on whichever goroutine closed the connection.
func (e *nbioEngine) onClose(c *nbio.Conn, _ error) {
	u, ok := c.Session().(*user)
	if !ok {
		return
	}
	e.r.broken(u, errClosed) // a no-op when onData already counted why
	if t := u.timer.Load(); t != nil {
		t.Stop()
	}
}

// nbioLogger drops nbio's debug and info lines and writes the rest to stderr.
type nbioLogger struct{ w io.Writer }

func (nbioLogger) Debug(string, ...any) {}
func (nbioLogger) Info(string, ...any)  {}
func (l nbioLogger) Warn(f string, a ...any) {
	fmt.Fprintf(l.w, "nbio: warning: "+f+"\n", a...)
}
func (l nbioLogger) Error(f string, a ...any) { fmt.Fprintf(l.w, "nbio: "+f+"\n", a...) }
