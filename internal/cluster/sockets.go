// The slots' sockets: binding them, the steering group's live list, and giving a socket up.

package cluster

import (
	"context"
	"net/netip"
	"os"
	"strings"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/steering"
)

// register puts a slot's new socket in the steering group, reporting whether it is there.
// A socket the group refuses still serves, by the kernel's hash.
func (s *Supervisor) register(id int, f *os.File) bool {
	if s.steer == nil {
		return false
	}
	if err := s.steer.Add(id, f); err != nil {
		s.log.Error("steering: slot's socket left to the kernel's hash", zap.Int("slot", id), zap.Error(err))
		return false
	}
	return true
}

// listen creates one SO_REUSEPORT socket on addr and returns it with its address (the
// real port when addr said 0).
func listen(addr string) (*os.File, string, error) {
	ln, err := steering.Listen(context.Background(), addr)
	if err != nil {
		return nil, "", err
	}
	defer ln.Close() // the duplicate below keeps the socket open
	// Not ln.File: its Fd (os/exec's ExtraFiles calls it) would make the socket blocking
	// under every worker serving it.
	f, err := ipc.SocketFile(ln, "listener")
	if err != nil {
		return nil, "", err
	}
	return f, ln.Addr().String(), nil
}

// openSocket gives a slot a fresh socket on the cluster's address (loop only). The
// address never changes after Start.
func (s *Supervisor) openSocket(sl *slot) error {
	f, _, err := listen(s.addr)
	if err != nil {
		return err
	}
	sl.file, sl.steered = f, s.register(sl.id, f)
	s.storeSocket(sl)
	return nil
}

// updateSteering rewrites the steering program's list of live slots: those whose current
// worker is online on the slot's socket (loop only; the loop calls it after every event).
// Then, while some slot is live, a slot waiting out a restart backoff gives up its socket
// (see giveUpQueue): whether it crashed while others served, failed to start, or was
// the last one up when it crashed and others have come back since.
func (s *Supervisor) updateSteering() {
	if s.steer == nil {
		return
	}
	var live []int
	hashed := false
	for _, id := range s.slotIDs() {
		sl := s.slots[id]
		if sl.file != nil && !sl.steered {
			// A socket the program's map refused would never be chosen: leave them
			// all to the hash until it is gone (register logged why).
			live, hashed = nil, true
			break
		}
		if sl.file != nil && sl.cur != nil && sl.cur.state == StateOnline && sl.cur.says != "stopping" {
			live = append(live, id)
		}
	}
	s.steerHashed.Store(hashed)
	if err := s.steer.SetLive(live); err != nil {
		s.log.Error("steering: update the live slots", zap.Error(err))
		return
	}
	if len(live) == 0 || !s.steer.Migrates() {
		return
	}
	for _, id := range s.slotIDs() {
		if sl := s.slots[id]; sl.cur == nil && sl.state == StateWaitingRestart {
			s.giveUpQueue(sl)
		}
	}
}

// separateGenerations reports whether a reload starts the new worker on a socket of its
// own (loop only): possible where the steering program also places a closing socket's
// queue (select-or-migrate). Then the old worker gets no new connection once the new one is
// promoted, and what it had queued moves to a live socket as its socket closes; otherwise
// both share the slot's socket and its queue.
func (s *Supervisor) separateGenerations() bool {
	return s.steer != nil && s.steer.Migrates() && !s.ownSockets()
}

// ownSockets reports whether the workers hold no socket of the supervisor's: they bind
// their own (self_bind), or fork mode gives them none.
func (s *Supervisor) ownSockets() bool { return s.cfg.SelfBind || s.cfg.Fork() }

// giveUpQueue closes the socket of a slot whose worker is gone (loop only, from
// updateSteering, which has just taken the slot off the live list and found another slot
// live): the steering program moves what is queued there to a live slot as it closes,
// where otherwise those connections would wait out the restart backoff, seconds once
// crashes repeat. The slot's next worker gets a fresh socket. While no slot is live the
// socket stays: its queue has nowhere else to go.
func (s *Supervisor) giveUpQueue(sl *slot) {
	if sl.file == nil {
		return
	}
	sl.file.Close()
	sl.file, sl.steered = nil, false
	s.storeSocket(sl)
	s.log.Info("slot's socket closed: its queued connections move to the live slots", zap.Int("slot", sl.id))
}

// closeSocket closes the supervisor's copy of the slot's socket, and its app ports (loop
// only).
func (s *Supervisor) closeSocket(sl *slot) {
	s.closeAppPorts(sl)
	if sl.file == nil {
		return
	}
	enableMigrateReq(s.log)
	sl.file.Close()
	sl.file = nil
	s.storeSocket(sl)
}

// migrateReqPath is the sysctl that moves a closing listener's queue to another socket of
// its SO_REUSEPORT group instead of resetting it (Linux 5.14+, per network namespace).
const migrateReqPath = "/proc/sys/net/ipv4/tcp_migrate_req"

func enableMigrateReq(log *zap.Logger) {
	b, err := os.ReadFile(migrateReqPath)
	if err != nil {
		log.Warn("tcp_migrate_req unavailable: connections queued on a closing socket are reset", zap.Error(err))
		return
	}
	if strings.TrimSpace(string(b)) == "1" {
		log.Info("tcp_migrate_req is on: the closing socket's queue moves to the other slots")
		return
	}
	if err := os.WriteFile(migrateReqPath, []byte("1\n"), 0o644); err != nil {
		log.Warn("cannot set tcp_migrate_req: connections queued on a closing socket are reset", zap.Error(err))
		return
	}
	log.Info("set net.ipv4.tcp_migrate_req=1: the closing socket's queue moves to the other slots")
}

// storeSocket tells Options.SocketStore the slot's socket as it is now (loop only).
func (s *Supervisor) storeSocket(sl *slot) {
	if s.opt.SocketStore != nil {
		s.opt.SocketStore(sl.id, sl.file)
	}
}

// inherited takes slot i's socket from Options.Inherited when it listens on the cluster's
// address (any port when the configuration said 0, which the first one then fixes), and
// closes it otherwise, saying why (Start only). name is its address.
func (s *Supervisor) inherited(i int) (f *os.File, name string) {
	f = s.opt.Inherited[i]
	if f == nil {
		return nil, ""
	}
	delete(s.opt.Inherited, i)
	name = sockName(f)
	want, werr := netip.ParseAddrPort(s.addr)
	got, gerr := netip.ParseAddrPort(name)
	same := werr == nil && gerr == nil && want.Addr().Unmap() == got.Addr().Unmap() &&
		(want.Port() == 0 || want.Port() == got.Port())
	if t, err := unix.GetsockoptInt(int(f.Fd()), unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || t != 1 || !same {
		s.log.Warn("an inherited socket is not the slot's: closed, a new one bound", zap.Int("slot", i), zap.String("inherited", name), zap.String("addr", s.addr))
		f.Close()
		return nil, ""
	}
	s.log.Info("slot serves the socket kept across the restart (its queue too)", zap.Int("slot", i), zap.String("addr", name))
	return f, name
}

// closeInherited closes the inherited sockets no slot took (Start only).
func (s *Supervisor) closeInherited() {
	for i, f := range s.opt.Inherited {
		s.log.Info("an inherited socket beyond the slots: closed", zap.Int("slot", i))
		f.Close()
		delete(s.opt.Inherited, i)
	}
}

// sockName is the local address of a socket file, "" when it cannot be read.
func sockName(f *os.File) string {
	sa, err := unix.Getsockname(int(f.Fd()))
	if err != nil {
		return ""
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)).String()
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)).String()
	}
	return ""
}
