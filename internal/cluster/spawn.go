// Starting a worker: its descriptors, its environment and its goroutines.

package cluster

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/ipc"
)

// launch starts a worker as the slot's current one (loop only). A failure to start counts
// as a crash.
func (s *Supervisor) launch(sl *slot) {
	p, err := s.spawn(sl, false)
	if err != nil {
		s.log.Error("start worker", zap.Int("slot", sl.id), zap.Error(err))
		s.crashed(sl, 0)
		return
	}
	sl.cur, sl.state = p, ""
}

// spawn starts a worker process on the slot's socket (loop only), reopening the socket if
// the slot had closed it; with fresh, on a socket of its own that the slot takes over when
// the worker is promoted (a reload's new generation, see separateGenerations).
func (s *Supervisor) spawn(sl *slot, fresh bool) (*proc, error) {
	sock := sl.file
	switch {
	case s.ownSockets():
		sock = nil
	case fresh:
		f, _, err := listen(s.addr)
		if err != nil {
			return nil, err
		}
		sock = f
	case sl.file == nil:
		if err := s.openSocket(sl); err != nil {
			return nil, err
		}
		sock = sl.file
	}
	closeFresh := func() {
		if fresh && sock != nil {
			sock.Close()
		}
	}
	sup, child, err := ipc.Pair()
	if err != nil {
		closeFresh()
		return nil, err
	}
	defer child.Close() // the worker has its copy after Start
	argv := s.cfg.Command
	if !s.ownSockets() && len(s.opt.ListenPIDShim) > 0 {
		argv = append(slices.Clone(s.opt.ListenPIDShim), argv...)
	}
	cmd := exec.CommandContext(s.ctx, argv[0], argv[1:]...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = s.cfg.KillTimeout.D()
	cmd.Dir = s.opt.Dir
	if s.cfg.Cwd != "" {
		cmd.Dir = s.cfg.Cwd
	}
	// Its own process group, so that SIGKILL after kill_timeout reaches the children it
	// forked too (gunicorn's, for one), and a terminal's ^C reaches the supervisor alone,
	// which stops its workers in order. Outside our group nothing kills it when the
	// supervisor is killed -9, so it gets SIGKILL when we die (PR_SET_PDEATHSIG, kept across
	// the shim's exec): else a program that does not speak our ipc would serve on and hold
	// the port. The kernel sends it when the forking *thread* ends, which a Go thread does
	// only when a goroutine locked to it (runtime.LockOSThread) returns without unlocking:
	// nothing in the supervisor does (cilium/ebpf unlocks after its syscalls), so the
	// thread lives as long as the process and no LockOSThread is needed here. The leader
	// alone gets it: children it forked go with it only if they watch it (gunicorn's do).
	//
	// Every program gets it, with or without Options.Adopt: one that can rejoin a new
	// supervisor (adopt.go) knows it and clears its own (cmd/worker does, seeing
	// ipc.EnvAdopt: ipc.OutliveParent), and says so in its ready message (ipc.Msg.Rejoin);
	// the supervisor no longer guesses it from the program's path.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	env := slices.Clone(s.opt.Environ)
	for k, v := range s.cfg.Env {
		env = append(env, k+"="+v)
	}
	// PM2's instance_var (a name set: every program gets it; Node's NODE_APP_INSTANCE by
	// default comes with nodeEnv) and increment_var (its env value, 0 unset, plus the slot).
	if v := s.cfg.InstanceVar; v != "" {
		env = append(env, v+"="+strconv.Itoa(sl.id))
	}
	if v := s.cfg.IncrementVar; v != "" {
		base, _ := strconv.Atoi(s.cfg.Env[v]) // validated a number when set
		env = append(env, v+"="+strconv.Itoa(base+sl.id))
	}
	// The descriptors: the socket first (socket activation: fds from 3, LISTEN_FDS of
	// them), then our ipc, then Node's channel. Variables of our own environment that
	// would say otherwise are removed (unset), not set empty: gunicorn reads
	// int(os.environ.get('LISTEN_FDS', 0)) and dies on "".
	var unset []string
	if s.ownSockets() {
		cmd.ExtraFiles = []*os.File{child}
		unset = append(unset, ipc.EnvListenFDs, "LISTEN_FDNAMES", "LISTEN_PID")
		if s.cfg.SelfBind {
			// The worker binds HOST:PORT itself (with SO_REUSEPORT). (In fork mode the
			// program's own configuration says what it binds, PORT included.)
			host, port, _ := net.SplitHostPort(s.addr)
			env = append(env, "HOST="+host, "PORT="+port)
		}
	} else {
		cmd.ExtraFiles = []*os.File{sock, child}
		env = append(env, ipc.EnvListenFDs+"=1", "LISTEN_FDNAMES=http")
		if len(s.opt.ListenPIDShim) == 0 {
			unset = append(unset, "LISTEN_PID")
		}
	}
	env = append(env, ipc.EnvFD+"="+strconv.Itoa(2+len(cmd.ExtraFiles)))
	if s.opt.Adopt != "" {
		env = append(env, ipc.EnvAdopt+"="+s.opt.Adopt, ipc.EnvAdoptWait+"="+strconv.FormatInt(s.cfg.AdoptWait.D().Milliseconds(), 10))
	} else {
		unset = append(unset, ipc.EnvAdopt, ipc.EnvAdoptWait)
	}
	var node *nodeChannel
	preloaded := false // a Node app whose listen(PORT) the preload serves: online at 'listening'
	if isNode(s.cfg.Command[0]) {
		nc, childEnd, err := newNodeChannel()
		if err != nil {
			sup.Close()
			closeFresh()
			return nil, err
		}
		defer childEnd.Close()
		node = nc
		cmd.ExtraFiles = append(cmd.ExtraFiles, childEnd)
		env = append(env, "NODE_CHANNEL_FD="+strconv.Itoa(2+len(cmd.ExtraFiles)), "NODE_CHANNEL_SERIALIZATION_MODE=json")
		var add []string
		add, preloaded = s.nodeEnv(env, sl.id)
		env = append(env, add...)
		unset = append(unset, envNodeWorkerPID) // the preload's claim is the worker's to make
	} else {
		unset = append(unset, "NODE_CHANNEL_FD", "NODE_CHANNEL_SERIALIZATION_MODE")
	}
	var notify *notifySocket
	if s.notifyDir != "" {
		s.spawned++
		if notify, err = openNotify(s.notifyDir, sl.id, s.spawned); err != nil {
			s.log.Warn("worker gets no sd_notify socket", zap.Int("slot", sl.id), zap.Error(err))
		}
	}
	if notify != nil {
		env = append(env, "NOTIFY_SOCKET="+notify.path)
	} else {
		unset = append(unset, "NOTIFY_SOCKET")
	}
	unset = append(unset, "WATCHDOG_PID")
	if wd := s.cfg.WatchdogSec.D(); wd > 0 {
		env = append(env, "WATCHDOG_USEC="+strconv.FormatInt(wd.Microseconds(), 10))
	} else {
		unset = append(unset, "WATCHDOG_USEC")
	}
	env = append(env,
		ipc.EnvWorkerID+"="+strconv.Itoa(sl.id), ipc.EnvWorkerCount+"="+strconv.Itoa(s.count),
		"GOMAXPROCS="+strconv.Itoa(s.cfg.WorkerGOMAXPROCS))
	cmd.Env = withoutVars(env, unset...)
	closeChannels := func() {
		if node != nil {
			node.f.Close()
		}
		if notify != nil {
			notify.Close()
		}
	}

	// Our own pipe rather than an io.Writer: exec's copy goroutine would make Wait wait for
	// every holder of the pipe, and we want the pid in the log fields.
	// Two pipes, so that each line keeps its stream (PM2's out and err).
	pr, pw, err := os.Pipe()
	if err != nil {
		sup.Close()
		closeChannels()
		closeFresh()
		return nil, fmt.Errorf("create output pipe: %w", err)
	}
	prErr, pwErr, err := os.Pipe()
	if err != nil {
		pr.Close()
		pw.Close()
		sup.Close()
		closeChannels()
		closeFresh()
		return nil, fmt.Errorf("create output pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pwErr
	err = cmd.Start()
	pw.Close()
	pwErr.Close()
	if err != nil {
		pr.Close()
		prErr.Close()
		sup.Close()
		closeChannels()
		closeFresh()
		return nil, fmt.Errorf("start %s: %w", s.cfg.Command[0], err)
	}
	pid := cmd.Process.Pid
	p := s.newProc(sl.id, pid, sup)
	p.notify, p.node = notify, node
	s.forwardOutput(pr, p)
	s.forwardStream(prErr, p, StreamErr)
	log := p.log
	if fresh {
		p.socket = sock
	}
	// SIGKILL to the process (a no-op once it was reaped: os.Process knows) and to its
	// whole group, even after the leader exited: the group, and its id, live on while any
	// member does (a child it forked and left behind), and Linux gives no new process a pid
	// still in use as a group's id. Once the group is empty the signal finds nobody (the
	// id could be reused by a new group leader only after the pids wrapped around).
	p.kill = func() {
		cmd.Process.Kill()
		syscall.Kill(-pid, syscall.SIGKILL)
	}
	s.procs[p] = struct{}{}
	log.Info("worker started")
	go func() { // waiter
		p.exitErr = cmd.Wait()
		close(p.exited)
		sup.Close()
		closeChannels()
		s.post(func() { s.exited(p) })
	}()
	go s.read(p)
	go s.poll(p)
	if notify != nil {
		go s.readNotify(p, notify)
	}
	if node != nil {
		go s.readNode(p, node)
	}
	if !s.cfg.waitReady() && !s.signals && !preloaded {
		// PM2's default: online once started, or, for a Node app under the preload, at
		// 'listening' (readNode), as PM2's cluster mode. (A program known to signal
		// readiness is always waited for: see Config.WaitReady.)
		s.becameReady(p, readyStart)
	}
	return p, nil
}

// newProc is a worker just started or adopted in slot (loop only): launching, its clocks
// at now.
func (s *Supervisor) newProc(slot, pid int, conn *ipc.Conn) *proc {
	now := time.Now()
	_, stalls := s.clock.observe(now)
	return &proc{slot: slot, pid: pid, started: now, startClock: now, stallsAtStart: stalls, conn: conn,
		log:   s.log.With(zap.Int("slot", slot), zap.Int("pid", pid)),
		ready: make(chan struct{}), exited: make(chan struct{}), state: StateLaunching}
}

// forwardOutput logs the worker's output lines from r (and copies them to its slot's
// WorkerLog file), until r ends.
func (s *Supervisor) forwardOutput(r *os.File, p *proc) { s.forwardStream(r, p, StreamOut) }

// forwardStream is forwardOutput for one stream of the worker's, StreamOut or StreamErr.
func (s *Supervisor) forwardStream(r *os.File, p *proc, stream string) {
	ll := &lineLogger{log: p.log, stamp: s.dateFmt, out: s.opt.Output, slot: p.slot, pid: p.pid, stream: stream}
	if s.opt.WorkerLog != nil {
		ll.raw = s.opt.WorkerLog(p.slot)
	}
	go copyLines(r, ll)
}

// withoutVars returns env without the variables named (every entry KEY=... of those keys).
func withoutVars(env []string, keys ...string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains(keys, k) {
			out = append(out, kv)
		}
	}
	return out
}
