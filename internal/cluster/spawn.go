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
// the worker is promoted (a reload's new generation, see separateGenerations). Its steps:
// the socket, our ipc, the command, its environment and descriptors, the start, then the
// worker's registration and goroutines.
func (s *Supervisor) spawn(sl *slot, fresh bool) (*proc, error) {
	sock, err := s.workerSocket(sl, fresh)
	if err != nil {
		return nil, err
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
	cmd := s.workerCommand()
	ch, err := s.prepareEnv(sl, cmd, sock, child)
	if err != nil {
		sup.Close()
		closeFresh()
		return nil, err
	}
	if ch.nodeChild != nil {
		defer ch.nodeChild.Close()
	}
	stdout, stderr, err := startWorker(cmd, s.cfg.Command[0])
	if err != nil {
		sup.Close()
		ch.close()
		closeFresh()
		return nil, err
	}
	var own *os.File // the fresh socket the worker takes to the slot when promoted
	if fresh {
		own = sock
	}
	p := s.enroll(sl, cmd, sup, ch, stdout, stderr, own)
	if !s.cfg.waitReady() && !s.signals && !ch.preloaded {
		// PM2's default: online once started, or, for a Node app under the preload, at
		// 'listening' (readNode), as PM2's cluster mode. (A program known to signal
		// readiness is always waited for: see Config.WaitReady.)
		s.becameReady(p, readyStart)
	}
	return p, nil
}

// workerSocket is the listening socket a new worker of the slot gets (loop only): none when
// workers bind their own, a new one with fresh, else the slot's, reopened if it was closed.
func (s *Supervisor) workerSocket(sl *slot, fresh bool) (*os.File, error) {
	switch {
	case s.ownSockets():
		return nil, nil
	case fresh:
		f, _, err := listen(s.addr)
		if err != nil {
			return nil, err
		}
		return f, nil
	case sl.file == nil:
		if err := s.openSocket(sl); err != nil {
			return nil, err
		}
	}
	return sl.file, nil
}

// workerCommand is the worker's command, not yet started: the program (behind the LISTEN_PID
// shim when it takes our socket), its directory, and how it is stopped.
func (s *Supervisor) workerCommand() *exec.Cmd {
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
	return cmd
}

// workerChannels are the channels a worker gets beside its socket and our ipc: Node's and
// sd_notify's, either nil when it gets none.
type workerChannels struct {
	node      *nodeChannel
	nodeChild *os.File // the worker's end of node, ours to close once it started
	notify    *notifySocket
	preloaded bool // a Node app whose listen(PORT) the preload serves: online at 'listening'
}

// close closes our ends of the channels.
func (c workerChannels) close() {
	if c.node != nil {
		c.node.f.Close()
	}
	if c.notify != nil {
		c.notify.Close()
	}
}

// spawnEnv is a worker's environment being built: the variables it sets, and those of
// our own environment it removes.
type spawnEnv struct {
	set, unset []string
}

// prepareEnv sets cmd's environment and descriptors (loop only), opening the channels it
// names: the app's variables, the descriptors, Node's channel, sd_notify, and the worker's
// identity. On an error nothing it opened is left open.
func (s *Supervisor) prepareEnv(sl *slot, cmd *exec.Cmd, sock, child *os.File) (workerChannels, error) {
	var ch workerChannels
	e := &spawnEnv{set: s.appEnv(sl)}
	s.passFiles(e, cmd, sock, child)
	if err := s.nodeChannelEnv(e, &ch, cmd, sl); err != nil {
		return ch, err
	}
	s.notifyEnv(e, &ch, sl)
	e.set = append(e.set,
		ipc.EnvWorkerID+"="+strconv.Itoa(sl.id), ipc.EnvWorkerCount+"="+strconv.Itoa(s.count),
		"GOMAXPROCS="+strconv.Itoa(s.cfg.WorkerGOMAXPROCS))
	cmd.Env = withoutVars(e.set, e.unset...)
	return ch, nil
}

// appEnv is the app's own environment for the slot's worker: ours, the config's env, and
// PM2's instance_var (a name set: every program gets it; Node's NODE_APP_INSTANCE by
// default comes with nodeEnv) and increment_var (its env value, 0 unset, plus the slot).
func (s *Supervisor) appEnv(sl *slot) []string {
	env := slices.Clone(s.opt.Environ)
	for k, v := range s.cfg.Env {
		env = append(env, k+"="+v)
	}
	if v := s.cfg.InstanceVar; v != "" {
		env = append(env, v+"="+strconv.Itoa(sl.id))
	}
	if v := s.cfg.IncrementVar; v != "" {
		base, _ := strconv.Atoi(s.cfg.Env[v]) // validated a number when set
		env = append(env, v+"="+strconv.Itoa(base+sl.id))
	}
	return env
}

// passFiles gives the worker its descriptors and the variables that name them: the socket
// first (socket activation: fds from 3, LISTEN_FDS of them), then our ipc, and the adoption
// rendezvous. Variables of our own environment that would say otherwise are removed
// (unset), not set empty: gunicorn reads int(os.environ.get('LISTEN_FDS', 0)) and dies on "".
func (s *Supervisor) passFiles(e *spawnEnv, cmd *exec.Cmd, sock, child *os.File) {
	if s.ownSockets() {
		cmd.ExtraFiles = []*os.File{child}
		e.unset = append(e.unset, ipc.EnvListenFDs, "LISTEN_FDNAMES", "LISTEN_PID")
		if s.cfg.SelfBind {
			// The worker binds HOST:PORT itself (with SO_REUSEPORT). (In fork mode the
			// program's own configuration says what it binds, PORT included.)
			host, port, _ := net.SplitHostPort(s.addr)
			e.set = append(e.set, "HOST="+host, "PORT="+port)
		}
	} else {
		cmd.ExtraFiles = []*os.File{sock, child}
		e.set = append(e.set, ipc.EnvListenFDs+"=1", "LISTEN_FDNAMES=http")
		if len(s.opt.ListenPIDShim) == 0 {
			e.unset = append(e.unset, "LISTEN_PID")
		}
	}
	e.set = append(e.set, ipc.EnvFD+"="+strconv.Itoa(2+len(cmd.ExtraFiles)))
	if s.opt.Adopt != "" {
		e.set = append(e.set, ipc.EnvAdopt+"="+s.opt.Adopt, ipc.EnvAdoptWait+"="+strconv.FormatInt(s.cfg.AdoptWait.D().Milliseconds(), 10))
	} else {
		e.unset = append(e.unset, ipc.EnvAdopt, ipc.EnvAdoptWait)
	}
}

// nodeChannelEnv gives a Node program Node's own ipc channel, as the next descriptor, and
// the preload's variables (nodeEnv); any other program has Node's variables removed.
func (s *Supervisor) nodeChannelEnv(e *spawnEnv, ch *workerChannels, cmd *exec.Cmd, sl *slot) error {
	if !isNode(s.cfg.Command[0]) {
		e.unset = append(e.unset, "NODE_CHANNEL_FD", "NODE_CHANNEL_SERIALIZATION_MODE")
		return nil
	}
	nc, childEnd, err := newNodeChannel()
	if err != nil {
		return err
	}
	ch.node, ch.nodeChild = nc, childEnd
	cmd.ExtraFiles = append(cmd.ExtraFiles, childEnd)
	e.set = append(e.set, "NODE_CHANNEL_FD="+strconv.Itoa(2+len(cmd.ExtraFiles)), "NODE_CHANNEL_SERIALIZATION_MODE=json")
	var add []string
	add, ch.preloaded = s.nodeEnv(e.set, sl.id)
	e.set = append(e.set, add...)
	e.unset = append(e.unset, envNodeWorkerPID) // the preload's claim is the worker's to make
	return nil
}

// notifyEnv gives the worker an sd_notify socket of its own when the supervisor has a
// directory for them (a worker that gets none is logged, not refused), and the watchdog's
// interval when one is set.
func (s *Supervisor) notifyEnv(e *spawnEnv, ch *workerChannels, sl *slot) {
	if s.notifyDir != "" {
		s.spawned++
		var err error
		if ch.notify, err = openNotify(s.notifyDir, sl.id, s.spawned); err != nil {
			s.log.Warn("worker gets no sd_notify socket", zap.Int("slot", sl.id), zap.Error(err))
		}
	}
	if ch.notify != nil {
		e.set = append(e.set, "NOTIFY_SOCKET="+ch.notify.path)
	} else {
		e.unset = append(e.unset, "NOTIFY_SOCKET")
	}
	e.unset = append(e.unset, "WATCHDOG_PID")
	if wd := s.cfg.WatchdogSec.D(); wd > 0 {
		e.set = append(e.set, "WATCHDOG_USEC="+strconv.FormatInt(wd.Microseconds(), 10))
	} else {
		e.unset = append(e.unset, "WATCHDOG_USEC")
	}
}

// startWorker starts cmd with its stdout and stderr on pipes of ours and returns their read
// ends. Our own pipes rather than an io.Writer: exec's copy goroutine would make Wait wait
// for every holder of the pipe, and we want the pid in the log fields. Two pipes, so that
// each line keeps its stream (PM2's out and err). name is the program, for the error.
func startWorker(cmd *exec.Cmd, name string) (stdout, stderr *os.File, err error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("create output pipe: %w", err)
	}
	prErr, pwErr, err := os.Pipe()
	if err != nil {
		pr.Close()
		pw.Close()
		return nil, nil, fmt.Errorf("create output pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pwErr
	err = cmd.Start()
	pw.Close()
	pwErr.Close()
	if err != nil {
		pr.Close()
		prErr.Close()
		return nil, nil, fmt.Errorf("start %s: %w", name, err)
	}
	return pr, prErr, nil
}

// enroll makes the started cmd the slot's new worker (loop only): its proc, its output
// forwarded, how it is killed, and the goroutines that own it: the waiter (which posts its
// exit to the loop) and the readers of its channels. socket is the fresh socket it takes to
// the slot when promoted, nil if none.
func (s *Supervisor) enroll(sl *slot, cmd *exec.Cmd, sup *ipc.Conn, ch workerChannels, stdout, stderr, socket *os.File) *proc {
	pid := cmd.Process.Pid
	p := s.newProc(sl.id, pid, sup)
	p.notify, p.node = ch.notify, ch.node
	s.forwardOutput(stdout, p)
	s.forwardStream(stderr, p, StreamErr)
	log := p.log
	if socket != nil {
		p.socket = socket
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
		ch.close()
		s.post(func() { s.exited(p) })
	}()
	go s.read(p)
	go s.poll(p)
	if ch.notify != nil {
		go s.readNotify(p, ch.notify)
	}
	if ch.node != nil {
		go s.readNode(p, ch.node)
	}
	return p
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
