// Adoption: the workers of a supervisor that died (kill -9, a crash) or re-executed itself
// keep serving their sockets and wait at the rendezvous socket (Options.Adopt); the next
// supervisor's Start takes them over, sockets, queues and all, before it starts anything.

package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/procstat"
)

// Adoption windows. The waiting workers dial every 50 ms, so all of them are in within a
// few dials of the listen; a new arrival extends the window a little, up to a bound, and it
// ends at once when every slot is taken. Without a stale rendezvous socket (the previous
// supervisor stopped cleanly, or there was none) there is no window at all.
const (
	adoptWindow    = 300 * time.Millisecond
	adoptExtend    = 100 * time.Millisecond
	adoptWindowMax = 2 * time.Second
)

// adoptee is a worker that asked to be adopted: who it is, its socket, its channel.
type adoptee struct {
	hello  ipc.Hello
	socket *os.File
	conn   *net.UnixConn
	pidfd  int
}

// leftBehind reports whether a previous supervisor left its rendezvous socket behind (it
// died without stopping), so that its workers may be waiting there; the error says the
// path is something else, which openRendezvous would not replace.
func (s *Supervisor) leftBehind() (bool, error) {
	if s.opt.Adopt == "" {
		return false, nil
	}
	fi, err := os.Lstat(s.opt.Adopt)
	switch {
	case err != nil:
		return false, nil
	case fi.Mode().Type() != fs.ModeSocket:
		return false, fmt.Errorf("adopt: %s exists and is not a socket: remove it or choose another control socket", s.opt.Adopt)
	}
	return true, nil
}

// openRendezvous listens on Options.Adopt and, when stale (leftBehind), takes in the
// workers waiting there: each checked (its peer credentials are its pid, its start time
// matches, one per slot), by slot. n is the configured slot count (the window ends once
// they are all in).
func (s *Supervisor) openRendezvous(n int, stale bool) (*net.UnixListener, map[int]*adoptee, error) {
	path := s.opt.Adopt
	os.Remove(path)
	ln, err := ipc.ListenPrivate(path) // 0600 from birth: no chmod of a path that could be swapped
	if err != nil {
		return nil, nil, fmt.Errorf("rendezvous socket: %w", err)
	}
	got := map[int]*adoptee{}
	if !stale {
		return ln, got, nil
	}
	begun := time.Now()
	end := begun.Add(adoptWindow)
	for time.Now().Before(end) {
		ln.SetDeadline(end)
		uc, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			continue
		}
		a, err := s.checkAdoptee(uc)
		if err != nil {
			s.log.Warn("adopt: refused a worker", zap.Error(err))
			ipc.Refuse(uc)
			continue
		}
		if a.hello.Proto != ipc.Proto() {
			err := fmt.Errorf("take over worker %d (slot %d): it speaks rendezvous protocol %d, this supervisor %d",
				a.hello.PID, a.hello.Slot, a.hello.Proto, ipc.Proto())
			if s.opt.AdoptAll {
				// Give up without a word to anyone: the workers keep dialling and the
				// rendezvous socket stays, for the binary that can take them.
				a.conn.Close()
				a.socket.Close()
				unix.Close(a.pidfd)
				for _, g := range got {
					g.conn.Close()
					g.socket.Close()
					unix.Close(g.pidfd)
				}
				ln.SetUnlinkOnClose(false)
				ln.Close()
				return nil, nil, err
			}
			s.log.Warn("adopt: refused a worker: it drains, its slot starts anew", zap.Error(err))
			a.release()
			continue
		}
		if prev := got[a.hello.Slot]; prev != nil { // two for one slot: keep the first
			s.log.Warn("adopt: a second worker for the slot: refused", zap.Int("slot", a.hello.Slot), zap.Int("pid", a.hello.PID))
			a.release()
			continue
		}
		got[a.hello.Slot] = a
		if end = end.Add(adoptExtend); end.After(begun.Add(adoptWindowMax)) {
			end = begun.Add(adoptWindowMax)
		}
		if len(got) >= n && allSlots(got, n) {
			break
		}
	}
	ln.SetDeadline(time.Time{})
	// Slots past the configured count are kept only as a scale-up before the previous
	// supervisor died left them: a run of them from n up, each filled. A worker claiming
	// slot 1023 alone would otherwise grow the cluster to 1,024 slots, the empty ones
	// started anew.
	for slot, a := range got {
		if slot < n || contiguous(got, n, slot) {
			continue
		}
		s.log.Warn("adopt: refused a worker: its slot is past the configured count and the slots before it are empty",
			zap.Int("slot", slot), zap.Int("pid", a.hello.PID), zap.Int("instances", n))
		a.release()
		delete(got, slot)
	}
	if len(got) > 0 {
		var pids []int
		for _, a := range got {
			pids = append(pids, a.hello.PID)
		}
		slices.Sort(pids)
		s.log.Info("adopting the workers of the previous supervisor", zap.Int("workers", len(got)), zap.Ints("pids", pids),
			zap.Duration("took", time.Since(begun)))
	} else {
		s.log.Info("the previous supervisor left no worker to adopt")
	}
	return ln, got, nil
}

// contiguous reports whether every slot from n up to slot has an adoptee.
func contiguous(got map[int]*adoptee, n, slot int) bool {
	for i := n; i < slot; i++ {
		if got[i] == nil {
			return false
		}
	}
	return true
}

func allSlots(got map[int]*adoptee, n int) bool {
	for i := range n {
		if got[i] == nil {
			return false
		}
	}
	return true
}

// checkAdoptee reads a rendezvous hello and checks the worker: the kernel's credentials of
// the connection name its pid and a user allowed to run our cluster, the pid's start time
// is the one it claims (no reused pid), and it is still alive once a pidfd holds it.
func (s *Supervisor) checkAdoptee(uc *net.UnixConn) (*adoptee, error) {
	h, sock, err := ipc.AcceptRejoin(uc)
	if err != nil {
		return nil, err
	}
	a := &adoptee{hello: h, socket: sock, conn: uc, pidfd: -1}
	fail := func(err error) (*adoptee, error) {
		if a.socket != nil {
			a.socket.Close()
		}
		if a.pidfd >= 0 {
			unix.Close(a.pidfd)
		}
		return nil, err
	}
	cred, err := ipc.PeerCred(uc)
	switch {
	case err != nil:
		return fail(err)
	case int(cred.Pid) != h.PID:
		return fail(fmt.Errorf("pid %d says it is %d", cred.Pid, h.PID))
	case !ipc.TrustedUID(cred.Uid):
		// This supervisor's user or root: a root supervisor once took any user's worker
		// (and its socket) into its cluster.
		return fail(fmt.Errorf("pid %d belongs to uid %d, neither this supervisor's (%d) nor root", cred.Pid, cred.Uid, os.Geteuid()))
	case h.Slot < 0 || h.Slot >= MaxInstances:
		return fail(fmt.Errorf("pid %d: slot %d is out of range", h.PID, h.Slot))
	case a.socket == nil:
		return fail(fmt.Errorf("pid %d passed no listening socket", h.PID))
	}
	if a.pidfd, err = unix.PidfdOpen(h.PID, 0); err != nil {
		return fail(fmt.Errorf("pidfd_open %d: %w", h.PID, err))
	}
	if st, err := procstat.StartTime("", h.PID); err != nil || st != h.Started {
		return fail(fmt.Errorf("pid %d: start time %d, it says %d (%v): not the worker", h.PID, st, h.Started, err))
	}
	if t, err := unix.GetsockoptInt(int(a.socket.Fd()), unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || t != 1 {
		return fail(fmt.Errorf("pid %d: the socket it passed is not listening", h.PID))
	}
	return a, nil
}

// release refuses an adoptee and closes what it holds.
func (a *adoptee) release() {
	ipc.Refuse(a.conn)
	a.socket.Close()
	unix.Close(a.pidfd)
}

// adoptWorker makes an adopted worker the slot's current one (loop only, at Start): online
// (it has been serving all along), its exit watched through its pidfd since it is not our
// child, its output through a new pipe.
func (s *Supervisor) adoptWorker(sl *slot, a *adoptee) {
	pid := a.hello.PID
	log := s.log.With(zap.Int("slot", sl.id), zap.Int("pid", pid))
	pr, pw, err := os.Pipe()
	if err != nil {
		log.Warn("adopt: no output pipe for the worker", zap.Error(err))
	}
	conn, err := ipc.Answer(a.conn, pw)
	if pw != nil {
		pw.Close()
	}
	if err != nil {
		log.Error("adopt: the worker did not take the answer: it will be replaced", zap.Error(err))
		if pr != nil {
			pr.Close()
		}
		unix.Close(a.pidfd)
		syscall.Kill(pid, syscall.SIGKILL)
		s.crashed(sl, 0)
		return
	}
	p := s.newProc(sl.id, pid, conn)
	p.adopted = true
	if pr != nil {
		s.forwardOutput(pr, p)
	}
	p.kill = func() {
		unix.PidfdSendSignal(a.pidfd, unix.SIGKILL, nil, 0)
		syscall.Kill(-pid, syscall.SIGKILL)
	}
	p.speaksIPC = true
	s.procs[p] = struct{}{}
	sl.cur, sl.state = p, ""
	s.signals = true // it spoke ipc: its successors are waited for
	s.becameReady(p, readyAdopted)
	go func() { // waiter: not our child, so no wait(2); its pidfd becomes readable at exit
		fds := []unix.PollFd{{Fd: int32(a.pidfd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				break
			}
		}
		unix.Close(a.pidfd)
		// After an upgrade in place the worker is still our child: reap it, and its status
		// is known; after a kill -9 of the previous supervisor it is not (init reaps it).
		var ws syscall.WaitStatus
		if wp, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err == nil && wp == pid {
			p.exitErr = exitStatus(ws)
		} else {
			p.exitErr = errors.New("exited (adopted from a supervisor that died: status unknown)")
		}
		close(p.exited)
		conn.Close()
		s.post(func() { s.exited(p) })
	}()
	go s.read(p)
	go s.poll(p)
}

// refuseLate answers workers that come to the rendezvous after the window: their slot has
// a worker of this supervisor by now, so they drain and exit. It ends when Stop closes ln.
func (s *Supervisor) refuseLate(ln *net.UnixListener) {
	for {
		uc, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go func() {
			h, sock, err := ipc.AcceptRejoin(uc)
			if sock != nil {
				sock.Close()
			}
			s.log.Warn("adopt: a worker came after the window: asked to drain", zap.Int("pid", h.PID), zap.Int("slot", h.Slot), zap.Error(err))
			ipc.Refuse(uc)
		}()
	}
}

// exitStatus describes a reaped worker's end as os/exec would (nil for a clean exit).
func exitStatus(ws syscall.WaitStatus) error {
	switch {
	case ws.Signaled():
		return fmt.Errorf("signal: %v", ws.Signal())
	case ws.ExitStatus() != 0:
		return fmt.Errorf("exit status %d", ws.ExitStatus())
	}
	return nil
}

// CanRejoin says whether every current worker outlives this supervisor and rejoins the
// next (an upgrade in place needs it): each said so in its greeting (ipc.Msg.Rejoin), or
// was adopted (it rejoined). The error names the first that did not.
func (s *Supervisor) CanRejoin() error {
	var err error
	s.call(func() {
		for _, id := range s.slotIDs() {
			p := s.slots[id].cur
			if p == nil || p.rejoins || p.adopted {
				continue
			}
			err = fmt.Errorf("the worker of slot %d (pid %d, %s) did not say it can rejoin a new supervisor", id, p.pid, s.cfg.Command[0])
			return
		}
	})
	if err == nil && s.opt.Adopt == "" {
		err = errors.New("no rendezvous socket for its workers")
	}
	return err
}
