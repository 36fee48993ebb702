// Package cluster is a prefork supervisor in the manner of PM2's cluster mode: it keeps N
// worker processes, one per slot, each serving its own SO_REUSEPORT listening socket that
// the supervisor created and holds, so that no queued connection is reset: a restarted or
// reloaded worker inherits the slot's socket and its queue, or, where the steering program
// can move a closing socket's queue to the live sockets, the slot closes it and the next
// worker gets a fresh one (see below).
//
// The slot table and the restart budgets belong to one goroutine, the loop: every change is
// a function sent to it over a channel, including the events of the workers (ready, stats,
// exit), so there is no lock around the state. Operations that wait (Reload, Scale, Stop)
// run in the caller's goroutine, one at a time, and ask the loop for each step.
//
// Workers speak internal/ipc over a socketpair at fd 4; the listening socket is fd 3.
//
// Which slot's socket gets a new connection is the kernel's choice unless the supervisor
// steers (Config.Steering, internal/steering): then an eBPF program deals connections round
// robin over the slots whose workers are online, a list the loop rewrites after every
// event, and a slot whose worker crashed closes its socket at once so that what was queued
// there moves to the live slots (the slot's next worker gets a fresh socket).
//
// Programs that were not written for it: readiness.go (what they say: sd_notify, Node's
// IPC channel), nodepreload.go (an unmodified Node app's listen(PORT) served from fd 3),
// serving.go (a worker that does not serve its slot's socket is shown not-serving).
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/procstat"
	"github.com/onehost/onehost/internal/sdnotify"
	"github.com/onehost/onehost/internal/steering"
)

// Options are the supervisor's collaborators. The zero value works.
type Options struct {
	// Logger receives the supervisor's logs and the workers' output. Default: none.
	Logger *zap.Logger
	// Environ is the base environment of every worker (e.g. os.Environ()), before
	// Config.Env and the protocol variables. Default: empty.
	Environ []string
	// Dir is the workers' working directory. Default: the supervisor's.
	Dir string
	// WorkerLog, when set, returns where a slot's raw output lines also go (PM2's
	// per-instance log files); it is called once per worker start. Default: nil, only the
	// merged log.
	WorkerLog func(slot int) io.Writer
	// Notify, when set, receives the cluster's life as systemd notifications (sd_notify(3),
	// internal/sdnotify): "READY=1" once every slot is online or errored after Start,
	// "RELOADING=1" and "READY=1" around a rolling reload, "STOPPING=1" once (neither
	// "READY=1" nor "RELOADING=1" after it), a one-line
	// "STATUS=" whenever the summary changes (checked each stats_interval), and
	// "WATCHDOG=1" every Watchdog. Called from the supervisor's goroutines; must not block.
	Notify func(state string)
	// Watchdog is how often the loop itself sends "WATCHDOG=1" (0: never). From the loop,
	// so that a supervisor whose loop no longer runs stops feeding systemd's watchdog and
	// is restarted. Default 0.
	Watchdog time.Duration
	// ListenPIDShim, when set, is an argv prefix that sets LISTEN_PID to its own pid and
	// then executes the rest of its arguments (the pid survives exec): systemd's socket
	// activation rule, which libsystemd, go-systemd, gunicorn, Puma and Unicorn check
	// before they take an inherited socket, and which a Go parent cannot meet itself (no
	// code runs between fork and exec). cmd/supervisor passes itself. Default: none, and
	// LISTEN_PID is not set.
	ListenPIDShim []string
	// Name is the app's name (PM2's name), given in every status row (WorkerStatus.App)
	// so that several clusters of one supervisor can be told apart. Default: none.
	Name string
}

// WorkerStatus is one row of Status, in the JSON shape of `supervisor status -json`.
type WorkerStatus struct {
	// App is the app's name (Options.Name), "" when it has none.
	App         string  `json:"app,omitempty"`
	ID          int     `json:"id"`
	PID         int     `json:"pid"`
	Status      string  `json:"status"`
	UptimeS     int64   `json:"uptime_s"`
	Restarts    int     `json:"restarts"`
	CPUPercent  float64 `json:"cpu_percent"`
	CPUSeconds  float64 `json:"cpu_seconds"` // the process's user+system time so far
	RSSBytes    int64   `json:"rss_bytes"`
	Requests    uint64  `json:"requests"`
	RPS         float64 `json:"rps"`
	Connections int64   `json:"connections"`
	// Health is the worker's own check of what it depends on (the feed worker: its
	// database), as its last stats answer said: HealthOK, HealthUnhealthy (HealthError
	// says why), or "" when the worker reports none. The supervisor shows it and does not act
	// on it: restarting a worker whose database is gone would turn a degraded worker that
	// still serves reads into a crash loop.
	Health      string `json:"health"`
	HealthError string `json:"health_error,omitempty"`
	// Writes is the worker's part in its database's writes as it reports it (the feed
	// worker: "owner" for the one that commits every worker's writes, "follower"), or ""
	// when it reports none. Shown, not acted on.
	Writes string `json:"writes,omitempty"`
	// Note is the worker's own one-line status, as it last sent it with sd_notify's
	// STATUS= ("" when it sends none).
	Note string `json:"note,omitempty"`
	// NotServing says why a worker shown as StateNotServing does not serve its slot
	// (serving.go); "" otherwise.
	NotServing string `json:"not_serving,omitempty"`
	// NoCounters: the worker does not report Requests, RPS and Connections (it speaks no
	// internal/ipc), which are then unknown, not 0: null in JSON (statusjson.go).
	NoCounters bool `json:"-"`
}

// Worker health values (WorkerStatus.Health).
const (
	HealthOK        = "ok"
	HealthUnhealthy = "unhealthy"
)

// healthOf reads the health a stats answer reports (see ipc.Msg): "" when it says nothing.
func healthOf(m ipc.Msg) (health, why string) {
	switch {
	case m.Healthy:
		return HealthOK, ""
	case m.Error != "":
		return HealthUnhealthy, m.Error
	}
	return "", ""
}

// slot is one worker position: a stable index, its socket and its current worker.
type slot struct {
	id       int
	file     *os.File // the listening socket; nil once closed
	steered  bool     // file is in the steering group
	cur      *proc
	state    string // when cur is nil: waiting-restart or errored
	restarts int
	unstable int // consecutive exits within min_uptime
	crashes  int // consecutive crashes, for the backoff
	timer    *time.Timer
}

// Supervisor runs a cluster. Create it with New, then Start; stop it with Stop or Kill.
type Supervisor struct {
	cfg  Config
	opt  Options
	log  *zap.Logger
	addr string // resolved at Start

	calls chan func()
	quit  chan struct{} // closed when the loop ends
	ops   sync.Mutex    // one Reload, Scale or Stop at a time
	ctx   context.Context

	steer     *steering.Group // nil: the kernel's hash
	steerKind string          // steering.KindRoundRobin or KindHash; fixed at Start
	// steerHashed: the program is attached but its live list is empty because a socket
	// could not join its map, so the kernel's hash decides (updateSteering).
	steerHashed atomic.Bool

	clock *stallClock // the supervisor's own absences (stall.go); set at Start

	reloads, reloadsAborted, scales atomic.Int64 // for Counters

	// loop-owned
	lastSilenceKill time.Time     // the last worker killed for silence
	lastAllSilent   time.Time     // the last "every worker silent" log line
	hush            *hush         // a whole-cluster silence the cluster is waking from; nil: none
	stallSeen       time.Duration // the stall clock's total the loop has reacted to
	readySent       bool          // READY=1 went out after Start
	stopAnnounced   bool          // STOPPING=1 went out: no READY=1 or RELOADING=1 after it
	signals         bool          // some worker signalled readiness: wait for every later one
	spawned         uint64        // workers started, for unique notify socket names
	notifyDir       string        // the workers' sd_notify sockets live here; "" if none
	preload         string        // the Node preload's path once written (nodepreload.go)
	preloadFailed   bool          // its write failed (logged once)
	lastStatus      string        // the last STATUS= sent
	slots           map[int]*slot
	procs           map[*proc]struct{} // every live process, current or not
	stopping        bool
	count           int // the slot count workers are told
}

// New checks cfg (applying defaults) and returns a supervisor that has not started.
func New(cfg Config, opt Options) (*Supervisor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if len(cfg.Command) == 0 {
		return nil, errors.New("command: no worker program given")
	}
	// Fail now rather than after max_restarts failed starts.
	if _, err := exec.LookPath(cfg.Command[0]); err != nil {
		return nil, fmt.Errorf("command: %w", err)
	}
	if cfg.Cwd != "" {
		if fi, err := os.Stat(cfg.Cwd); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("cwd: %q is not a directory the workers can start in", cfg.Cwd)
		}
	}
	if opt.Logger == nil {
		opt.Logger = zap.NewNop()
	}
	return &Supervisor{cfg: cfg, opt: opt, log: opt.Logger, calls: make(chan func()),
		quit: make(chan struct{}), slots: map[int]*slot{}, procs: map[*proc]struct{}{}}, nil
}

// Addr is the address the cluster serves, known after Start (the real port when the
// configuration said 0).
func (s *Supervisor) Addr() string { return s.addr }

// Start binds one socket per slot and launches the workers; it does not wait for them to
// be ready (see WaitOnline). When ctx ends the workers get SIGTERM, then SIGKILL after
// kill_timeout; call Stop for a graceful end.
func (s *Supervisor) Start(ctx context.Context) error {
	n := s.cfg.Instances.Count()
	s.addr = s.cfg.Listen
	if s.cfg.Fork() {
		// Nothing to bind or to check: the programs bind what they want themselves.
	} else if ln, err := net.Listen("tcp", s.addr); err != nil {
		// SO_REUSEPORT would let us join a stranger's group silently; say so.
		s.log.Warn("another process already listens on the address; it will share the connections if it uses SO_REUSEPORT too",
			zap.String("addr", s.addr), zap.Error(err))
	} else {
		ln.Close()
	}
	if err := s.setupSteering(); err != nil {
		return err
	}
	files := make([]*os.File, n)
	steered := make([]bool, n)
	for i := range n {
		if s.ownSockets() {
			break
		}
		// The first socket fixes the port when the configuration asked for port 0.
		f, addr, err := listen(s.addr)
		if err != nil {
			for _, f := range files[:i] {
				f.Close()
			}
			if s.steer != nil {
				s.steer.Close()
			}
			return fmt.Errorf("start slot %d: %w", i, err)
		}
		files[i] = f
		s.addr = addr
		steered[i] = s.register(i, f)
	}
	s.ctx = ctx
	s.count = n
	s.clock = newStallClock(stallAllowance(s.cfg.StatsInterval.D()), time.Now())
	if dir, err := os.MkdirTemp("", "onehost-notify-"); err != nil {
		s.log.Warn("no sd_notify sockets for the workers: READY=1 will not be heard", zap.Error(err))
	} else {
		s.notifyDir = dir
	}
	go s.loop()
	s.call(func() {
		for i, f := range files {
			sl := &slot{id: i, file: f, steered: steered[i]}
			s.slots[i] = sl
			s.launch(sl)
		}
	})
	s.log.Info("cluster started", zap.String("addr", s.addr), zap.Int("instances", n),
		zap.Strings("command", s.cfg.Command), zap.String("steering", s.steerKind))
	return nil
}

// setupSteering loads the steering program when the configuration wants it and the kernel
// allows it (Start only). Where it cannot, auto says why once and leaves the hash.
func (s *Supervisor) setupSteering() error {
	s.steerKind = steering.KindHash
	switch {
	case s.cfg.Fork():
		s.log.Info("exec_mode fork: no shared socket, every instance a process of its own")
		return nil
	case s.cfg.SelfBind:
		s.log.Info("steering: the kernel's hash (self_bind: the workers bind their own sockets)")
		return nil
	case s.cfg.Steering == SteeringHash:
		s.log.Info("steering: the kernel's hash, as configured")
		return nil
	}
	g, err := steering.NewGroup(MaxInstances)
	if err != nil {
		if s.cfg.Steering == SteeringRoundRobin {
			return fmt.Errorf("steering: %s: %w (steering: auto falls back to the kernel's hash)", SteeringRoundRobin, err)
		}
		s.log.Warn("steering: the kernel's hash, not round robin", zap.Error(err))
		return nil
	}
	s.steer, s.steerKind = g, steering.KindRoundRobin
	s.log.Info("steering: round robin over the online workers (eBPF)", zap.Bool("moves_closing_queues", g.Migrates()))
	return nil
}

// Counters are the cluster's events since Start: rolling reloads begun and aborted, and
// scale operations.
type Counters struct {
	Reloads, ReloadsAborted, Scales int64
}

// Counters returns the cluster's event counts; safe from any goroutine.
func (s *Supervisor) Counters() Counters {
	return Counters{Reloads: s.reloads.Load(), ReloadsAborted: s.reloadsAborted.Load(), Scales: s.scales.Load()}
}

// Steering says how new connections are steered: steering.KindRoundRobin ("bpf-rr") or
// steering.KindHash ("hash"). Fixed once Start returned.
// A socket the program's map refused leaves every connection to the hash (see
// updateSteering): then it says so, though the program stays attached.
func (s *Supervisor) Steering() string {
	if s.steerHashed.Load() {
		return steering.KindHash
	}
	return s.steerKind
}

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
	f, err := ln.File()
	if err != nil {
		return nil, "", fmt.Errorf("duplicate socket: %w", err)
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

// loop owns the state: it runs the functions sent to it and the periodic health checks.
func (s *Supervisor) loop() {
	tick := time.NewTicker(s.cfg.StatsInterval.D())
	defer tick.Stop()
	var watchdog <-chan time.Time
	if s.opt.Watchdog > 0 {
		wt := time.NewTicker(s.opt.Watchdog)
		defer wt.Stop()
		watchdog = wt.C
		s.notify("WATCHDOG=1")
	}
	for {
		select {
		case f := <-s.calls:
			if f == nil {
				close(s.quit)
				return
			}
			f()
		case <-tick.C:
			s.check()
			s.checkServing(time.Now())
			s.notifyStatus()
		case <-watchdog:
			s.notify("WATCHDOG=1")
		}
		s.updateSteering()
		s.notifyReady()
	}
}

// notify passes a systemd notification to Options.Notify.
func (s *Supervisor) notify(state string) {
	if s.opt.Notify != nil {
		s.opt.Notify(state)
	}
}

// summary is the one-line state of the cluster for STATUS= (loop only).
func (s *Supervisor) summary() string {
	online, errored := 0, 0
	rps := 0.0
	for _, sl := range s.slots {
		switch {
		case sl.cur != nil && sl.cur.state == StateOnline:
			online++
			rps += sl.cur.rps
		case sl.state == StateErrored:
			errored++
		}
	}
	return fmt.Sprintf("%d/%d online, %d errored, %s req/s", online, len(s.slots), errored, groupThousands(int64(rps+0.5)))
}

// groupThousands writes n as 14,200.
func groupThousands(n int64) string {
	d := strconv.FormatInt(n, 10)
	for i := len(d) - 3; i > 0 && d[i-1] != '-'; i -= 3 {
		d = d[:i] + "," + d[i:]
	}
	return d
}

// notifyReady sends READY=1 once every slot's first worker is online or its slot errored
// (loop only).
func (s *Supervisor) notifyReady() {
	if s.readySent || s.stopping || s.stopAnnounced || len(s.slots) == 0 {
		return
	}
	for _, sl := range s.slots {
		online := sl.cur != nil && sl.cur.state == StateOnline
		if !online && sl.state != StateErrored {
			return
		}
	}
	s.readySent = true
	s.lastStatus = s.summary()
	s.notify("READY=1\n" + sdnotify.Status(s.lastStatus))
}

// notifyStatus sends STATUS= when the summary changed (loop only).
func (s *Supervisor) notifyStatus() {
	if !s.readySent || s.stopping {
		return
	}
	if st := s.summary(); st != s.lastStatus {
		s.lastStatus = st
		s.notify(sdnotify.Status(st))
	}
}

// call runs f in the loop and waits for it. It reports false when the loop has ended.
func (s *Supervisor) call(f func()) bool {
	done := make(chan struct{})
	select {
	case s.calls <- func() { f(); close(done) }:
		<-done
		return true
	case <-s.quit:
		return false
	}
}

// post hands f to the loop without waiting (for events from other goroutines).
func (s *Supervisor) post(f func()) {
	select {
	case s.calls <- f:
	case <-s.quit:
	}
}

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
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	env := slices.Clone(s.opt.Environ)
	for k, v := range s.cfg.Env {
		env = append(env, k+"="+v)
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
	pr, pw, err := os.Pipe()
	if err != nil {
		sup.Close()
		closeChannels()
		closeFresh()
		return nil, fmt.Errorf("create output pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		sup.Close()
		closeChannels()
		closeFresh()
		return nil, fmt.Errorf("start %s: %w", s.cfg.Command[0], err)
	}
	log := s.log.With(zap.Int("slot", sl.id), zap.Int("pid", cmd.Process.Pid))
	ll := &lineLogger{log: log}
	if s.opt.WorkerLog != nil {
		ll.raw = s.opt.WorkerLog(sl.id)
	}
	go copyLines(pr, ll)
	now := time.Now()
	_, stalls := s.clock.observe(now)
	pid := cmd.Process.Pid
	p := &proc{slot: sl.id, pid: pid, started: now, startClock: now, stallsAtStart: stalls, conn: sup, log: log,
		notify: notify, node: node,
		ready: make(chan struct{}), exited: make(chan struct{}), state: StateLaunching}
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
		p.readyOnce.Do(func() { close(p.ready) })
		s.becameReady(p, readyStart)
	}
	return p, nil
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

// read forwards the worker's messages to the loop.
func (s *Supervisor) read(p *proc) {
	for {
		m, err := p.conn.Recv()
		if err != nil {
			return
		}
		if m.Type == ipc.TypeReady {
			p.readyOnce.Do(func() { close(p.ready) })
		}
		// (the loop marks it online, message below)
		s.post(func() { s.message(p, m) })
	}
}

// poll asks the worker for its counters and samples /proc every stats_interval.
func (s *Supervisor) poll(p *proc) {
	t := time.NewTicker(s.cfg.StatsInterval.D())
	defer t.Stop()
	var tree *procstat.Tree // this goroutine's; made at the first tick
	for round := 1; ; round++ {
		select {
		case <-p.exited:
			return
		case <-t.C:
		}
		// Start the silence clock before the request leaves, so that the answer always
		// finds it started and stops it.
		speaks := false
		if !s.call(func() {
			if speaks = p.speaksIPC; speaks && p.askedAt.IsZero() {
				p.askedAt = time.Now()
			}
		}) {
			return
		}
		if speaks { // a program that never spoke ipc is not asked (nor judged): it may not read it
			p.conn.Send(ipc.Msg{Type: ipc.TypeStats}) // an error means it is exiting: waiter handles it
		} else {
			s.readListeners(p, round) // does it serve its slot? (serving.go)
		}
		// The worker's whole process tree, not the main process alone: a gunicorn's forked
		// workers are most of its CPU and memory, and max_memory_restart must see them.
		// Tree rescans all of /proc only every few readings, so this stays cheap.
		if tree == nil {
			var err error
			if tree, err = procstat.NewTree(procstat.TreeConfig{PID: p.pid}); err != nil {
				continue // gone before its first reading: its waiter reports the exit
			}
		}
		u, err := tree.Read()
		if err != nil {
			continue
		}
		ticks, rss := uint64(u.CPU/(time.Second/clockTicks)), u.RSS
		now := time.Now()
		s.post(func() { s.sample(p, now, ticks, rss) })
	}
}

// message handles one ipc message (loop only).
func (s *Supervisor) message(p *proc, m ipc.Msg) {
	now := time.Now()
	p.lastHeard, p.askedAt = now, time.Time{}
	p.speaksIPC = true
	switch m.Type {
	case ipc.TypeReady:
		s.becameReady(p, readyIPC)
	case ipc.TypeStats:
		if !p.prevReqAt.IsZero() && m.Requests >= p.prevReq {
			if dt := now.Sub(p.prevReqAt).Seconds(); dt > 0 {
				p.rps = float64(m.Requests-p.prevReq) / dt
			}
		}
		p.requests, p.prevReq, p.prevReqAt = m.Requests, m.Requests, now
		p.connections = m.Connections
		if m.Writes != p.writes && m.Writes != "" {
			// Logged as said, whatever the words: the supervisor does not interpret them.
			p.log.Info("worker's write role changed", zap.String("writes", m.Writes), zap.String("was", p.writes))
			p.writes = m.Writes
		}
		if h, why := healthOf(m); h != "" && (h != p.health || why != p.healthErr) {
			// Log changes only, as the worker does.
			if h == HealthUnhealthy {
				p.log.Error("worker reports itself unhealthy", zap.String("error", why))
			} else if p.health != "" {
				p.log.Info("worker healthy again")
			}
			p.health, p.healthErr = h, why
		}
	}
}

// sample records CPU and memory (loop only) and starts a memory restart when due.
func (s *Supervisor) sample(p *proc, now time.Time, ticks uint64, rss int64) {
	if !p.cpuAt.IsZero() && ticks >= p.cpuTicks {
		if dt := now.Sub(p.cpuAt).Seconds(); dt > 0 {
			p.cpuPercent = float64(ticks-p.cpuTicks) / clockTicks / dt * 100
		}
	}
	p.cpuTicks, p.cpuAt, p.rss = ticks, now, rss
	lim := int64(s.cfg.MaxMemoryRestart)
	sl := s.slots[p.slot]
	if lim > 0 && rss > lim && sl != nil && sl.cur == p && p.state == StateOnline && !s.stopping {
		p.log.Warn("worker over max_memory_restart: reloading its slot", zap.Int64("rss_bytes", rss), zap.Int64("limit", lim))
		go func() {
			if !s.ops.TryLock() {
				return // another operation runs; the next sample retries
			}
			defer s.ops.Unlock()
			if err := s.reloadSlot(s.ctx, p.slot, p); err != nil {
				s.log.Error("memory restart", zap.Int("slot", p.slot), zap.Error(err))
			}
		}()
	}
}

// stallAllowance is the longest gap between the loop's observations of the stall clock
// that is not a stall: one stats_interval late, at least a quarter of a second.
func stallAllowance(statsInterval time.Duration) time.Duration {
	return statsInterval + max(statsInterval/2, 250*time.Millisecond)
}

// check kills workers that missed their heartbeat or their start deadline (loop only).
//
// Silence is judged from stats requests actually sent and left unanswered for
// heartbeat_timeout, and never right after the supervisor itself was away (stallClock):
// then every clock restarts. At most one worker is killed for silence per
// heartbeat_timeout, and none when every worker of two or more is silent at once: that is
// the host's or the supervisor's trouble, and killing them all would turn it into an
// outage. Nor while the cluster wakes from such a silence, one worker after another (hush).
func (s *Supervisor) check() {
	now := time.Now()
	// Another judge (a reload) may have observed the stall first: react to the total.
	if _, total := s.clock.observe(now); total > s.stallSeen {
		stall := total - s.stallSeen
		s.stallSeen = total
		s.log.Warn("supervisor was not running (stopped, paused VM, swap storm?): heartbeat and start clocks restarted, nothing judged",
			zap.Duration("away", stall))
		for p := range s.procs {
			p.askedAt = time.Time{}
			p.startClock = p.startClock.Add(stall)
			if !p.lastWatchdog.IsZero() {
				p.lastWatchdog = now
			}
		}
		return
	}
	var silent []*proc
	silence := map[*proc]time.Time{} // since when each silent one is silent
	online := 0
	for p := range s.procs {
		switch {
		case p.state == StateOnline:
			online++
			if !p.askedAt.IsZero() && now.Sub(p.askedAt) > s.cfg.HeartbeatTimeout.D() {
				silent, silence[p] = append(silent, p), p.askedAt
			} else if wd := s.cfg.WatchdogSec.D(); wd > 0 && !p.lastWatchdog.IsZero() && now.Sub(p.lastWatchdog) > wd {
				silent, silence[p] = append(silent, p), p.lastWatchdog
			}
		case p.state == StateLaunching && !p.candidate && now.Sub(p.startClock) > s.cfg.ListenTimeout.D():
			if !s.signals {
				// PM2's wait_ready: a program that says nothing is online after the wait.
				p.log.Warn("worker said nothing within listen_timeout: online anyway", zap.Duration("listen_timeout", s.cfg.ListenTimeout.D()))
				p.readyOnce.Do(func() { close(p.ready) })
				s.becameReady(p, readyLate)
				break
			}
			p.log.Error("worker not ready within listen_timeout: killing it", zap.Duration("listen_timeout", s.cfg.ListenTimeout.D()))
			p.state = StateStopping
			p.kill()
		}
	}
	hb := s.cfg.HeartbeatTimeout.D()
	if online >= 2 && len(silent) == online {
		if s.hush == nil {
			s.hush = newHush(now)
		}
		s.hush.silent(silent)
		if now.Sub(s.lastAllSilent) >= hb {
			s.lastAllSilent = now
			s.log.Error("every worker is silent at once: the host or the supervisor is in trouble, not the workers; killing none",
				zap.Int("workers", online), zap.Duration("heartbeat_timeout", hb))
		}
		return
	}
	// After a whole-cluster silence the workers wake one after another, and the first to
	// answer would make the rest look like a partial silence: judge none until each has
	// been heard from again, or until they stopped waking (hush.over).
	if s.hush != nil {
		if !s.hush.over(now, hb, func(p *proc) bool { _, live := s.procs[p]; return live && p.state == StateOnline }) {
			return
		}
		s.log.Info("the cluster woke from its silence: judging heartbeats again", zap.Int("still_silent", len(s.hush.members)-s.hush.woken),
			zap.Duration("silence_began", now.Sub(s.hush.since)))
		s.hush = nil
	}
	if len(silent) == 0 {
		return
	}
	if online >= 2 && !s.othersHeard(silent, now, hb/2) {
		// At the onset of a whole-cluster silence the workers cross heartbeat_timeout one
		// stats round apart (each is asked on its own ticker), and the first would look
		// silent alone. A worker is silent on its own only while others answer: wait until
		// one is heard, or the next check finds them all silent.
		return
	}
	if now.Sub(s.lastSilenceKill) < hb {
		return // one at a time: the next one, if still silent, after another heartbeat_timeout
	}
	p := slices.MinFunc(silent, func(a, b *proc) int { return silence[a].Compare(silence[b]) })
	p.log.Error("worker missed its heartbeat: killing it", zap.Duration("silent", now.Sub(silence[p])))
	s.lastSilenceKill = now
	p.state = StateStopping
	p.kill()
}

// othersHeard reports whether an online worker outside silent was heard from within
// recent of now (loop only).
func (s *Supervisor) othersHeard(silent []*proc, now time.Time, recent time.Duration) bool {
	for p := range s.procs {
		if p.state == StateOnline && !slices.Contains(silent, p) && now.Sub(p.lastHeard) < recent {
			return true
		}
	}
	return false
}

// exited handles the end of a process (loop only).
func (s *Supervisor) exited(p *proc) {
	delete(s.procs, p)
	// Its sockets: the slot's previous one, retired by a reload (what is still queued there
	// moves to the live slots as it closes), or a new generation's own that was never
	// promoted.
	for _, f := range []*os.File{p.retired, p.socket} {
		if f != nil {
			f.Close()
		}
	}
	p.retired, p.socket = nil, nil
	if p.drainTimer == nil {
		// It exited unasked (a crash) or was killed: what it forked and left in its group
		// would serve on beside its successor, holding the socket; it is stopped as systemd
		// stops the rest of a service whose main process exited: kill_signal now, SIGKILL
		// after kill_timeout. (A drained worker's timer does this at its kill_timeout.)
		sig, _ := parseSignal(s.cfg.KillSignal) // validated
		if syscall.Kill(-p.pid, sig) == nil {
			p.log.Warn("worker exited leaving processes in its group: kill_signal to them", zap.String("signal", s.cfg.KillSignal))
			time.AfterFunc(s.cfg.KillTimeout.D(), func() { syscall.Kill(-p.pid, syscall.SIGKILL) })
		}
	}
	// Uptime as the restart budgets see it: the time the supervisor itself ran while the
	// worker lived, so that its own stalls meanwhile do not make a worker that crashed young
	// look stable. A worker that died during a stall is seen dead only after it, and the
	// whole stall is left out: its uptime is understated by the part it lived through (wait
	// tells no time of death), which errs toward unstable, as the stall hides whether it
	// crashed young (TestUptimeAcrossStall).
	_, stalls := s.clock.observe(time.Now())
	up := time.Since(p.started) - (stalls - p.stallsAtStart)
	sl := s.slots[p.slot]
	if sl == nil || sl.cur != p {
		p.log.Info("worker exited", zap.Duration("uptime", up), zap.NamedError("status", p.exitErr))
		return
	}
	sl.cur = nil
	if s.stopping {
		p.log.Info("worker exited", zap.Duration("uptime", up), zap.NamedError("status", p.exitErr))
		return
	}
	p.log.Warn("worker crashed", zap.Duration("uptime", up), zap.NamedError("status", p.exitErr))
	s.crashed(sl, up) // the loop's updateSteering then gives up the slot's queue
}

// crashed schedules the slot's restart with backoff, or marks it errored (loop only).
func (s *Supervisor) crashed(sl *slot, up time.Duration) {
	if up < s.cfg.MinUptime.D() {
		sl.unstable++
	} else {
		sl.unstable = 0
	}
	if up >= BackoffReset {
		sl.crashes = 0
	}
	sl.crashes++
	if sl.unstable > s.cfg.MaxRestarts {
		sl.state = StateErrored
		// Connections hashed to a socket nobody accepts on would wait forever: close it
		// (its queue is reset, or migrated where tcp_migrate_req is set).
		s.closeSocket(sl)
		s.log.Error("slot errored: too many unstable restarts; no more restarts", zap.Int("slot", sl.id),
			zap.Int("max_restarts", s.cfg.MaxRestarts), zap.Duration("min_uptime", s.cfg.MinUptime.D()))
		return
	}
	d := s.backoff(sl.crashes)
	sl.state = StateWaitingRestart
	sl.restarts++
	s.log.Info("restarting worker", zap.Int("slot", sl.id), zap.Duration("delay", d), zap.Int("restarts", sl.restarts))
	sl.timer = time.AfterFunc(d, func() {
		s.post(func() {
			if s.slots[sl.id] == sl && sl.cur == nil && sl.state == StateWaitingRestart && !s.stopping {
				s.launch(sl)
			}
		})
	})
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
	s.log.Info("slot's socket closed: its queued connections move to the live slots", zap.Int("slot", sl.id))
}

// backoff is the delay before the n-th consecutive restart (n from 1).
func (s *Supervisor) backoff(n int) time.Duration {
	base := s.cfg.ExpBackoffRestartDelay.D()
	if base == 0 {
		return s.cfg.RestartDelay.D()
	}
	d := float64(base)
	for i := 1; i < n && d < float64(MaxBackoff); i++ {
		d *= 1.5
	}
	return min(time.Duration(d), MaxBackoff)
}

// drain asks p to stop gracefully and arms its SIGKILL (loop only).
func (s *Supervisor) drain(p *proc) { s.drainAfter(p, 0) }

// retireGrace is how long a worker whose socket no longer gets new connections (a reload
// with separate generations) keeps running before it is asked to stop, when it does not
// speak our ipc: a program may stop by closing connections it accepted and had not yet
// read (uvicorn does), and in this time it reads them. Ipc speakers drain at once: our
// drain answers what is accepted.
const retireGrace = 500 * time.Millisecond

// drainAfter is drain, the stop request of a worker that does not speak our ipc delayed by
// grace (loop only).
func (s *Supervisor) drainAfter(p *proc, grace time.Duration) {
	p.state = StateStopping
	switch {
	case p.node != nil && s.cfg.ShutdownWithMessage:
		go p.node.send(`"shutdown"`) // never block the loop on a stopped worker
	case p.speaksIPC:
		go p.conn.Send(ipc.Msg{Type: ipc.TypeDrain})
		grace = 0
	default:
		sig, _ := parseSignal(s.cfg.KillSignal) // validated
		stop := func() {
			select {
			case <-p.exited:
			default:
				if err := syscall.Kill(p.pid, sig); err != nil {
					p.log.Warn("send kill_signal", zap.String("signal", s.cfg.KillSignal), zap.Error(err))
				}
			}
		}
		if grace > 0 {
			time.AfterFunc(grace, stop)
		} else {
			stop()
		}
	}
	// Left armed when the worker exits (exited does not stop it): at kill_timeout it also
	// kills what the worker forked and left behind in its group.
	p.drainTimer = time.AfterFunc(grace+s.cfg.KillTimeout.D(), func() {
		select {
		case <-p.exited:
			if syscall.Kill(-p.pid, syscall.SIGKILL) == nil {
				p.log.Warn("worker's children still running after kill_timeout: SIGKILL to its process group")
			}
		default:
			p.log.Warn("worker still running after kill_timeout: SIGKILL")
			p.kill()
		}
	})
}

// closeSocket closes the supervisor's copy of the slot's socket (loop only).
func (s *Supervisor) closeSocket(sl *slot) {
	if sl.file == nil {
		return
	}
	enableMigrateReq(s.log)
	sl.file.Close()
	sl.file = nil
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

// Status returns one row per slot, in slot order.
func (s *Supervisor) Status() []WorkerStatus {
	var rows []WorkerStatus
	s.call(func() {
		now := time.Now()
		for _, id := range s.slotIDs() {
			sl := s.slots[id]
			r := WorkerStatus{App: s.opt.Name, ID: id, Status: sl.state, Restarts: sl.restarts}
			if p := sl.cur; p != nil {
				r.PID, r.Status = p.pid, p.state
				r.UptimeS = int64(now.Sub(p.started).Seconds())
				r.CPUPercent, r.RSSBytes = p.cpuPercent, p.rss
				r.CPUSeconds = float64(p.cpuTicks) / clockTicks
				r.Requests, r.RPS, r.Connections = p.requests, p.rps, p.connections
				r.Health, r.HealthError = p.health, p.healthErr
				r.Writes = p.writes
				r.Note = p.statusText
				r.NoCounters = !p.speaksIPC
				if p.state == StateOnline && p.serve.notServing != "" {
					r.Status, r.NotServing = StateNotServing, p.serve.notServing
				}
				if p.says != "" { // what it said of its state, then its STATUS=
					r.Note = strings.TrimSuffix(p.says+": "+p.statusText, ": ")
				}
			}
			rows = append(rows, r)
		}
	})
	return rows
}

// slotIDs lists the slots in order (loop only).
func (s *Supervisor) slotIDs() []int {
	ids := make([]int, 0, len(s.slots))
	for id := range s.slots {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// WaitOnline waits until every slot's worker is online, or ctx ends.
func (s *Supervisor) WaitOnline(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		rows := s.Status()
		ok := len(rows) > 0
		for _, r := range rows {
			ok = ok && r.Status == StateOnline
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for workers online: %w (status %+v)", ctx.Err(), rows)
		case <-t.C:
		}
	}
}

// ErrStopped is returned by operations on a supervisor that has stopped.
var ErrStopped = errors.New("supervisor stopped")

// Reload replaces every worker, one slot at a time: a new worker on the slot's socket,
// wait until it is ready (listen_timeout), then drain the old one (SIGKILL after
// kill_timeout). If a new worker exits or is not ready in time, it is killed, the roll
// stops, the remaining old workers keep serving, and Reload returns the reason. Errored
// slots get a fresh worker too.
func (s *Supervisor) Reload(ctx context.Context) error {
	if s.cfg.Fork() {
		// PM2 too restarts fork-mode processes on reload: no shared socket keeps serving
		// while a successor starts, and a program that binds its own port could not start
		// beside its predecessor.
		return s.Restart(ctx)
	}
	s.ops.Lock()
	defer s.ops.Unlock()
	var ids []int
	stopped := true
	s.call(func() {
		// A stop already announced (it may wait for ops too) refuses the reload, so that
		// systemd hears no RELOADING=1 after STOPPING=1.
		if stopped = s.stopping || s.stopAnnounced; !stopped {
			ids = s.slotIDs()
			s.notify(sdnotify.Reloading())
		}
	})
	if stopped {
		return ErrStopped
	}
	s.log.Info("rolling reload", zap.Ints("slots", ids))
	s.reloads.Add(1)
	for i, id := range ids {
		if err := s.reloadSlot(ctx, id, nil); err != nil {
			s.log.Error("reload aborted: the remaining workers keep serving", zap.Int("slot", id), zap.Error(err))
			err = fmt.Errorf("reload aborted at slot %d (%d of %d slots replaced): %w", id, i, len(ids), err)
			s.reloadsAborted.Add(1)
			s.notifyReloaded("reload aborted, the previous workers serve: " + err.Error())
			return err
		}
	}
	s.log.Info("reload done", zap.Int("slots", len(ids)))
	s.notifyReloaded("")
	return nil
}

// Restart replaces every worker, one slot at a time, as `pm2 restart` does: the slot's
// worker is stopped (drained, SIGKILL after kill_timeout) before its successor starts,
// so the two never run at once; Restart waits for each new worker to be ready (at most
// listen_timeout) before the next slot. Other slots serve meanwhile (with round-robin
// steering the stopped slot gets no new connection; with the hash its queue waits for
// the successor). Unlike Reload it never aborts for a successor that is not ready: it
// is started, and the slot's restart rules take it from there.
func (s *Supervisor) Restart(ctx context.Context) error {
	s.ops.Lock()
	defer s.ops.Unlock()
	var ids []int
	stopped := true
	s.call(func() {
		if stopped = s.stopping || s.stopAnnounced; !stopped {
			ids = s.slotIDs()
		}
	})
	if stopped {
		return ErrStopped
	}
	s.log.Info("restart", zap.Ints("slots", ids))
	for _, id := range ids {
		if err := s.restartSlot(ctx, id); err != nil {
			return fmt.Errorf("restart slot %d: %w", id, err)
		}
	}
	s.log.Info("restart done", zap.Int("slots", len(ids)))
	return nil
}

// restartSlot stops the slot's worker, then starts its successor and waits (at most
// listen_timeout) for it to be ready. The caller holds ops.
func (s *Supervisor) restartSlot(ctx context.Context, id int) error {
	var old *proc
	found := false
	s.call(func() {
		sl := s.slots[id]
		if sl == nil || s.stopping {
			return
		}
		found = true
		if sl.timer != nil { // a pending crash restart is this restart now
			sl.timer.Stop()
		}
		old = sl.cur
		sl.cur, sl.state = nil, StateStopping // exited then sees a retired worker, not a crash
		if old != nil {
			s.drain(old)
		}
	})
	if !found {
		return nil
	}
	if old != nil {
		<-old.exited // bounded by kill_timeout
	}
	var np *proc
	s.call(func() {
		sl := s.slots[id]
		if sl == nil || s.stopping || sl.cur != nil {
			return
		}
		sl.unstable, sl.crashes = 0, 0 // a deliberate new start gets a fresh restart budget
		sl.restarts++
		s.launch(sl)
		np = sl.cur
	})
	if np == nil {
		return nil // stopping, scaled away, or its start failed (launch logged why and scheduled a retry)
	}
	t := time.NewTimer(s.cfg.ListenTimeout.D())
	defer t.Stop()
	select {
	case <-np.ready:
	case <-np.exited:
		return fmt.Errorf("new worker (pid %d) exited at start: %v", np.pid, np.exitErr)
	case <-t.C:
		np.log.Warn("restarted worker not ready within listen_timeout: going on", zap.Duration("listen_timeout", s.cfg.ListenTimeout.D()))
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// notifyReloaded ends a reload for systemd: READY=1 (the service serves either way) with
// the summary, or why the reload was aborted. Not after STOPPING=1 (a stop that waited
// for this reload): systemd would take the service for running again.
func (s *Supervisor) notifyReloaded(aborted string) {
	s.call(func() {
		if s.stopAnnounced {
			return
		}
		st := aborted
		if st == "" {
			st = s.summary()
		}
		s.lastStatus = st
		s.notify("READY=1\n" + sdnotify.Status(st))
	})
}

// reloadSlot replaces the slot's worker (if only is not nil, only while it is still the
// current one). The caller holds ops.
func (s *Supervisor) reloadSlot(ctx context.Context, id int, only *proc) error {
	var np *proc
	var err error
	s.call(func() {
		sl := s.slots[id]
		if sl == nil || s.stopping || (only != nil && sl.cur != only) {
			return
		}
		np, err = s.spawn(sl, s.separateGenerations())
		if np != nil {
			np.candidate = true // its start deadline is ours to enforce, gracefully
		}
	})
	if err != nil {
		return err
	}
	if np == nil {
		return nil // slot gone or already replaced
	}
	t := time.NewTimer(s.cfg.ListenTimeout.D())
	defer t.Stop()
	// A worker may accept on the shared socket before it says ready, so even a failed
	// one is drained (SIGKILL after kill_timeout) rather than killed: what it accepted
	// gets answered.
	fail := func(why error) error {
		s.call(func() { s.drain(np) })
		<-np.exited
		return why
	}
	_, away := s.clock.observe(time.Now())
wait:
	for {
		select {
		case <-np.ready:
			break wait
		case <-np.exited:
			return fmt.Errorf("new worker (pid %d) exited before it was ready: %v", np.pid, np.exitErr)
		case <-t.C:
			select { // a ready message read after a stall of ours counts
			case <-np.ready:
				break wait
			default:
			}
			// The supervisor's own stalls do not count against the new worker.
			if _, total := s.clock.observe(time.Now()); total > away {
				t.Reset(total - away)
				away = total
				continue
			}
			// Nor does the time it asked for (EXTEND_TIMEOUT_USEC moves its start clock, as
			// for a worker started outside a reload).
			var left time.Duration
			s.call(func() { left = time.Until(np.startClock.Add(s.cfg.ListenTimeout.D())) })
			if left > 0 {
				t.Reset(left)
				continue
			}
			strict := true
			s.call(func() { strict = s.signals })
			if !strict { // a program that never signals: PM2's reload goes on after the wait
				np.log.Warn("new worker said nothing within listen_timeout: taking it as ready", zap.Duration("listen_timeout", s.cfg.ListenTimeout.D()))
				break wait
			}
			return fail(fmt.Errorf("new worker (pid %d) not ready within listen_timeout %v", np.pid, s.cfg.ListenTimeout.D()))
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	promoted := false
	s.call(func() {
		sl := s.slots[id]
		if sl == nil || s.stopping {
			return
		}
		old := sl.cur
		if sl.timer != nil {
			sl.timer.Stop()
		}
		sl.cur, sl.state, promoted = np, "", true
		grace := time.Duration(0)
		if np.socket != nil { // the new generation's socket takes the slot's turns
			prev := sl.file
			sl.file, sl.steered = np.socket, s.register(id, np.socket)
			np.socket = nil
			s.updateSteering()
			switch {
			case old != nil:
				old.retired = prev // closed when it exits: what is still queued there moves
				grace = retireGrace
			case prev != nil:
				prev.Close()
			}
		}
		np.candidate = false
		sl.unstable, sl.crashes = 0, 0 // a deliberate new start gets a fresh restart budget
		sl.restarts++
		if np.state == StateLaunching { // ready arrived but its event is still queued
			np.state, np.readyAt, np.lastHeard, np.prevReqAt = StateOnline, time.Now(), time.Now(), time.Now()
			np.askedAt = time.Time{}
		}
		if old != nil {
			s.drainAfter(old, grace)
		}
	})
	if !promoted {
		return fail(ErrStopped)
	}
	return nil
}

// ParseScale parses `scale` arguments: N sets the count, +N and -N change it.
func ParseScale(arg string) (n int, relative bool, err error) {
	relative = strings.HasPrefix(arg, "+") || strings.HasPrefix(arg, "-")
	n, err = strconv.Atoi(arg)
	if err != nil || (!relative && n < 1) {
		return 0, false, fmt.Errorf("scale: %q is not N (1 to %d), +N or -N", arg, MaxInstances)
	}
	return n, relative, nil
}

// Scale sets the number of slots to n, or changes it by n when relative. New slots get
// the lowest free indexes and Scale waits for them to be ready; removed slots (the highest
// indexes) are drained before their sockets close.
func (s *Supervisor) Scale(ctx context.Context, n int, relative bool) error {
	s.ops.Lock()
	defer s.ops.Unlock()
	var cur int
	if !s.call(func() { cur = len(s.slots) }) || s.stopping {
		return ErrStopped
	}
	target := n
	if relative {
		target = cur + n
	}
	if target < 1 || target > MaxInstances {
		return fmt.Errorf("scale: %d workers is out of range: want 1 to %d", target, MaxInstances)
	}
	s.log.Info("scaling", zap.Int("from", cur), zap.Int("to", target))
	s.scales.Add(1)
	var added []*proc
	var err error
	for id := cur; id < target; id++ {
		s.call(func() {
			sl := &slot{id: id}
			if !s.ownSockets() {
				if err = s.openSocket(sl); err != nil {
					return
				}
			}
			s.count = target
			s.slots[id] = sl
			s.launch(sl)
			if sl.cur != nil {
				added = append(added, sl.cur)
			}
		})
		if err != nil {
			return fmt.Errorf("scale up slot %d: %w", id, err)
		}
	}
	for _, p := range added {
		select {
		case <-p.ready:
		case <-p.exited:
			return fmt.Errorf("scale: new worker in slot %d (pid %d) exited before it was ready", p.slot, p.pid)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for id := cur - 1; id >= target; id-- {
		var p *proc
		s.call(func() {
			sl := s.slots[id]
			delete(s.slots, id)
			s.count = target
			if sl.timer != nil {
				sl.timer.Stop()
			}
			// Out of the steering first, then close our copy, so that the socket closes
			// as soon as the worker stops accepting, and no new connection is sent to it
			// meanwhile.
			s.updateSteering()
			s.closeSocket(sl)
			if p = sl.cur; p != nil {
				s.drain(p)
			}
		})
		if p != nil {
			<-p.exited // bounded by kill_timeout
		}
	}
	return nil
}

// Stop drains every worker, waits for them (SIGKILL after kill_timeout), closes the
// sockets and ends the loop.
func (s *Supervisor) Stop(ctx context.Context) error { return s.stop(ctx, false) }

// Kill ends every worker at once with SIGKILL, closes the sockets and ends the loop.
func (s *Supervisor) Kill() error { return s.stop(context.Background(), true) }

func (s *Supervisor) stop(ctx context.Context, now bool) error {
	s.call(func() {
		// STOPPING=1 once, however many stops are asked for (a second signal means now),
		// and in the loop, which sends every READY=1: none can follow it.
		if !s.stopAnnounced {
			s.stopAnnounced = true
			s.notify("STOPPING=1")
		}
		if now {
			// Do not wait for a running Reload or Scale: killing its workers ends it.
			s.stopping = true
			for p := range s.procs {
				p.kill()
			}
		}
	})
	s.ops.Lock()
	defer s.ops.Unlock()
	begun := time.Now()
	var procs []*proc
	if !s.call(func() {
		s.stopping = true
		for _, sl := range s.slots {
			if sl.timer != nil {
				sl.timer.Stop()
			}
		}
		for p := range s.procs {
			procs = append(procs, p)
			if now {
				p.kill()
			} else if p.state != StateStopping {
				s.drain(p)
			}
		}
	}) {
		return ErrStopped
	}
	var err error
	for _, p := range procs {
		select {
		case <-p.exited:
		case <-ctx.Done():
			p.kill()
			<-p.exited
			err = ctx.Err()
		}
	}
	s.endGroups(procs, begun.Add(s.cfg.KillTimeout.D()))
	s.call(func() {
		for _, sl := range s.slots {
			if sl.file != nil {
				sl.file.Close()
				sl.file = nil
			}
		}
		if s.steer != nil {
			s.steer.Close()
			s.steer = nil // the loop's last updateSteering must not touch it
		}
		if s.notifyDir != "" {
			os.RemoveAll(s.notifyDir)
		}
	})
	s.log.Info("cluster stopped")
	s.post(nil)
	<-s.quit
	return err
}

// endGroups waits until deadline for what the stopped workers forked and left in their
// process groups (the leaders have exited), then SIGKILLs what remains, as systemd ends a
// stopped service's remaining processes after TimeoutStopSec: else they would outlive
// the supervisor and hold the port.
func (s *Supervisor) endGroups(procs []*proc, deadline time.Time) {
	// waitGone polls until the groups of procs are gone or until, and returns those left.
	waitGone := func(procs []*proc, until time.Time, every time.Duration) []*proc {
		for {
			left := procs[:0:0]
			for _, p := range procs {
				if syscall.Kill(-p.pid, 0) == nil {
					left = append(left, p)
				}
			}
			if len(left) == 0 || !time.Now().Before(until) {
				return left
			}
			procs = left
			time.Sleep(every)
		}
	}
	left := waitGone(procs, deadline, 50*time.Millisecond)
	for _, p := range left {
		p.log.Warn("worker's children still running after kill_timeout: SIGKILL to its process group")
		syscall.Kill(-p.pid, syscall.SIGKILL)
	}
	// SIGKILL is delivered, not yet done: a process dies when it next runs in the kernel,
	// which on a busy machine can be milliseconds later. Stop returns once the groups are
	// gone, so that nothing it killed still holds the port; bounded, because an orphan
	// whose new parent never reaps it stays a group member as a zombie.
	waitGone(left, time.Now().Add(time.Second), 10*time.Millisecond)
}

// Done is closed once the supervisor has stopped.
func (s *Supervisor) Done() <-chan struct{} { return s.quit }
