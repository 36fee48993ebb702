package cluster

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/procstat"
)

// A program that was not written for the supervisor may ignore the socket it was given
// and bind a port of its own (a Node app run without the preload, a server with its port
// in its own configuration): it then looks alive while the connections sent to its slot
// wait in the slot's queue, never accepted. The supervisor watches for it in the workers
// that do not speak our ipc (ours serve the slot's socket by construction):
//   - their own listening TCP sockets, from /proc (procstat.Listeners), every few stats
//     rounds: a listener that is none of the supervisor's sockets is logged once;
//   - the slot socket's accept queue, every stats round: on a Linux listener TCP_INFO's
//     tcpi_unacked is the accept queue's length (tcp_get_info: sk_ack_backlog). A queue that
//     is never empty and never shrinks for notServingAfter, while the worker holds a port of
//     its own or uses little CPU (a worker that is merely saturated keeps a full queue too,
//     and burns its CPU), is a worker that does not accept from its slot.
// Such a worker shows as not-serving in status, with the reason and what to do, and is
// logged once; it is not killed (a restart would not change its code) nor taken out of the
// steering (a false verdict must not cost a serving worker its traffic).

// StateNotServing is how status shows an online worker that does not serve its slot.
const StateNotServing = "not-serving"

const (
	// notServingAfter is how long a slot's queue must stay unaccepted.
	notServingAfter = 5 * time.Second
	// notServingCPU: below this CPU share a worker with a stuck queue is not merely busy.
	notServingCPU = 20.0
	// listenersEvery is how many stats rounds pass between readings of a worker's sockets.
	listenersEvery = 3
)

// servingWatch is the loop's record of one worker's serving (proc.serve).
type servingWatch struct {
	own        []string  // its own listening addresses, none of the supervisor's sockets
	ownLogged  bool      // the first sight of them was logged
	queue      uint32    // the slot queue's last length
	stuckSince time.Time // since when the queue has been non-empty and not shrinking; zero: it drains
	notServing string    // why it does not serve its slot ("": it does, as far as seen)
}

// socketInode returns the inode of a socket file (0 when it cannot be read).
func socketInode(f *os.File) uint64 {
	if f == nil {
		return 0
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	var st syscall.Stat_t
	var serr error
	if rc.Control(func(fd uintptr) { serr = syscall.Fstat(int(fd), &st) }) != nil || serr != nil {
		return 0
	}
	return st.Ino
}

// acceptQueue returns the length of a listening socket's accept queue.
func acceptQueue(f *os.File) (uint32, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var info *unix.TCPInfo
	var gerr error
	if err := rc.Control(func(fd uintptr) { info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
		return 0, err
	}
	if gerr != nil {
		return 0, gerr
	}
	return info.Unacked, nil
}

// readListeners is poll's part, for a worker that does not speak ipc: every listenersEvery
// rounds, its listening sockets.
func (s *Supervisor) readListeners(p *proc, round int) {
	if s.ownSockets() || round%listenersEvery != 0 { // self_bind, fork: its own socket is the one it serves
		return
	}
	ls, err := procstat.Listeners("", p.pid)
	if err != nil {
		return // exited, or not ours to read
	}
	s.post(func() { s.sawListeners(p, ls) })
}

// sawListeners records a worker's own listeners (loop only): those that are none of the
// supervisor's sockets.
func (s *Supervisor) sawListeners(p *proc, ls []procstat.Listener) {
	if _, live := s.procs[p]; !live || p.speaksIPC {
		return
	}
	ours := map[uint64]bool{}
	for _, sl := range s.slots {
		ours[socketInode(sl.file)] = true
	}
	for q := range s.procs {
		ours[socketInode(q.socket)], ours[socketInode(q.retired)] = true, true
	}
	if sl := s.slots[p.slot]; sl != nil {
		for _, ap := range sl.ports {
			ours[socketInode(ap.f)] = true
		}
	}
	var own []string
	for _, l := range ls {
		if !ours[l.Inode] {
			own = append(own, l.Addr.String())
		}
	}
	p.serve.own = own
	if len(own) > 0 && !p.serve.ownLogged {
		p.serve.ownLogged = true
		p.log.Warn("worker listens on a port of its own, not on its slot's socket: connections to the cluster's address reach it only if it accepts from fd 3 too",
			zap.Strings("own", own), zap.String("slot_socket", s.addr), zap.String("fix", s.servingFix(p)))
	}
}

// servingFix says what to do about a worker that does not serve its slot.
func (s *Supervisor) servingFix(p *proc) string {
	fix := "make it serve the socket it inherits at fd 3 (LISTEN_FDS=1, as systemd's socket activation), or set self_bind: true if it binds " +
		s.addr + " itself with SO_REUSEPORT"
	if isNode(s.cfg.Command[0]) {
		fix = "let the supervisor's Node preload give it the slot's socket (listen on process.env.PORT; not with " + envNodePreload + "=0; run node itself, not npm), or " + fix
	} else {
		fix += ", or run it with node so that the preload applies, if it is a Node app"
	}
	return fix
}

// checkServing samples the slot queues of the online workers that do not speak ipc and
// judges them (loop only, each stats round).
func (s *Supervisor) checkServing(now time.Time) {
	for _, sl := range s.slots {
		p := sl.cur
		if p == nil || sl.file == nil || p.speaksIPC || p.state != StateOnline {
			continue
		}
		if len(p.appPorts) > 0 && !p.slotTaken {
			continue // it serves the app ports its listen asked for, and the log said so (appServing)
		}
		q, err := acceptQueue(sl.file)
		if err != nil {
			continue
		}
		w := &p.serve
		if q == 0 || q < w.queue {
			w.stuckSince = time.Time{}
		} else if w.stuckSince.IsZero() {
			w.stuckSince = now
		}
		w.queue = q
		stuck := !w.stuckSince.IsZero() && now.Sub(w.stuckSince) >= notServingAfter
		why := ""
		switch {
		case stuck && len(w.own) > 0:
			why = fmt.Sprintf("it listens on %s itself and has not accepted from its slot's socket on %s for %v (%d connections waiting)",
				strings.Join(w.own, ", "), s.addr, now.Sub(w.stuckSince).Round(time.Second), q)
		case stuck && p.cpuPercent < notServingCPU:
			why = fmt.Sprintf("it has not accepted from its slot's socket on %s for %v (%d connections waiting) and is idle",
				s.addr, now.Sub(w.stuckSince).Round(time.Second), q)
		}
		switch {
		case why != "" && w.notServing == "":
			p.log.Error("worker does not serve its slot: status shows it not-serving", zap.String("why", why), zap.String("fix", s.servingFix(p)))
		case why == "" && w.notServing != "":
			p.log.Info("worker accepts from its slot's socket again")
		}
		w.notServing = why
	}
}
