// What a balancer in front of this host needs (cmd/supervisor's agent): how many workers
// serve out of how many wanted, read without waiting for the loop, and the host's drain,
// which has the workers close each kept-alive connection after its next response.

package cluster

import (
	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/ipc"
)

// Serving is a snapshot of the cluster's capacity: Online workers serve (online, and
// serving their slot's socket) out of Desired slots (every slot, an errored or restarting
// one included: it is capacity the host should have).
type Serving struct {
	Online, Desired int
}

// Serving returns the capacity as the loop last published it: it never waits for the loop,
// so a balancer's health check is answered at once however busy the cluster is (and after
// Stop, the last state). Safe from any goroutine.
func (s *Supervisor) Serving() Serving {
	v := s.serving.Load()
	return Serving{Online: int(v >> 32), Desired: int(uint32(v))}
}

// publishServing stores the capacity for Serving (loop only): after every event, so that
// a crash or a worker coming online shows at the next check. One pass over the slots.
func (s *Supervisor) publishServing() {
	online := 0
	for _, sl := range s.slots {
		if p := sl.cur; p != nil && p.state == StateOnline && p.serve.notServing == "" {
			online++
		}
	}
	s.serving.Store(uint64(online)<<32 | uint64(uint32(len(s.slots))))
}

// SetHostDrained marks the host drained from its balancer (true) or back in (false): every
// worker that speaks our ipc is told to close each kept-alive connection after its next
// response (or to keep them alive again), and so is each worker that comes online while
// the host is drained. The workers serve on either way: a balancer that drains the host
// sends it no new connection, and a client kept alive across it reconnects and is sent to
// another host. Programs that do not speak our ipc are not told. It waits for nothing but
// the messages' writes. Safe from any goroutine.
func (s *Supervisor) SetHostDrained(on bool) error {
	s.hostDrainMu.Lock()
	defer s.hostDrainMu.Unlock()
	s.hostDrained.Store(on)
	var conns []*ipc.Conn
	if !s.call(func() {
		for p := range s.procs {
			if p.speaksIPC && (p.state == StateOnline || p.state == StateLaunching) {
				conns = append(conns, p.conn)
			}
		}
	}) {
		return ErrStopped
	}
	for _, c := range conns {
		c.Send(keepAliveMsg(on)) // an error means the worker is exiting: nothing to tell it
	}
	s.log.Info("host drain", zap.Bool("drained", on), zap.Int("workers_told", len(conns)))
	return nil
}

// HostDrained reports whether SetHostDrained(true) is in force.
func (s *Supervisor) HostDrained() bool { return s.hostDrained.Load() }

func keepAliveMsg(drained bool) ipc.Msg {
	return ipc.Msg{Type: ipc.TypeKeepAlive, CloseAfterResponse: drained}
}

// tellHostDrain gives a worker that just came online the host's drain (loop only): while
// drained, or always when it was adopted (a previous supervisor may have drained it). The
// write happens outside the loop, under the lock SetHostDrained holds, and sends the state
// of that moment, so that the last message a worker gets is always the latest state.
func (s *Supervisor) tellHostDrain(p *proc, adopted bool) {
	if !p.speaksIPC || (!adopted && !s.hostDrained.Load()) {
		return
	}
	go func() {
		s.hostDrainMu.Lock()
		defer s.hostDrainMu.Unlock()
		p.conn.Send(keepAliveMsg(s.hostDrained.Load()))
	}()
}
