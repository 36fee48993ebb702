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
// nodelisten.go (its listen on a port the configuration did not name, bound and handed over),
// serving.go (a worker that does not serve its slot's socket is shown not-serving). In
// fork mode (Config.ExecMode) the workers get no socket at all.
//
// The files: supervisor.go (the state, the loop, Start), stop.go (Stop, Kill: ending the
// workers and their process groups), status.go (Status and the
// systemd notifications), sockets.go (the slots' sockets and the steering's live list),
// spawn.go (starting a worker), health.go (its messages, stats polls, heartbeats and
// deadlines), restart.go (exits, crash restarts with backoff, draining), reload.go (Reload,
// Restart, Scale), adopt.go (taking over the workers of a supervisor that died or
// re-executed itself), stall.go (the supervisor's own stalls), config.go and ecosystem.go
// (what to run), proc.go (a worker process).
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/ipc"
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
	// Output, when set, receives every line a worker writes, as written, instead of
	// Logger's "worker output" entries (and a JSON line's re-logging as an entry):
	// cmd/supervisor prints them as PM2 does, `ID|APP | line`, so that an app's output
	// stays its own text (a stack trace its lines). Called from the stream's reading
	// goroutine, in order within a stream; must not block long nor keep Text. Default: nil.
	Output func(OutputLine)
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
	// Adopt, when set, is the path of the rendezvous socket through which workers outlive
	// the supervisor (adopt.go), given to them in ipc.EnvAdopt: a worker that can rejoin
	// clears its own parent-death signal (ipc.OutliveParent), says so in its ready message
	// (ipc.Msg.Rejoin), and when it loses its supervisor keeps serving and waits there for
	// the next one, at most adopt_wait; Start takes over the workers found waiting. Other
	// programs keep the parent-death signal every worker gets and die with the supervisor,
	// so it is safe for any program. Default: none, and every worker dies with it.
	Adopt string
	// NotifyDir is where Start makes the directory of the workers' sd_notify sockets.
	// cmd/supervisor gives one beside its control socket, in its own runtime directory,
	// and empties it at start, so that a crash leaves nothing behind for long. Default:
	// os.TempDir().
	NotifyDir string
	// AdoptAll makes Start take over every worker waiting at the rendezvous or fail,
	// leaving them waiting there: an upgrade's new image (cmd/supervisor), whose failure
	// gives the previous binary back, which takes them. Otherwise a worker that cannot be
	// taken (it speaks another ipc.Proto) is told to drain and its slot starts anew.
	AdoptAll bool
	// SharePort lets Start join an address another process listens on already (with
	// SO_REUSEPORT, the kernel then spreads the connections over both); otherwise Start
	// refuses it with ErrPortServed, naming the process.
	SharePort bool
	// SocketStore, when set, is told every slot's socket as it changes (from the loop: it
	// must not block): the slot and its socket, nil when the slot gives it up (scale-down,
	// errored). Not at Stop: a restarted supervisor takes them back (Inherited).
	// cmd/supervisor keeps them in systemd's file descriptor store (FDSTORE=1), so that a
	// restart of the unit refuses no connection: they wait in the sockets' queues.
	SocketStore func(slot int, f *os.File)
	// Inherited are sockets to serve instead of binding new ones, by slot (systemd's file
	// descriptor store gives them back as LISTEN_FDS): each must listen on the configured
	// address (any port when it says 0); others are closed. Start takes ownership.
	Inherited map[int]*os.File
}

// WorkerStatus is one row of Status. The control protocol carries it as its own type
// (internal/control's Worker, which writes the counters a worker does not report as null).
type WorkerStatus struct {
	// App is the app's name (Options.Name), "" when it has none.
	App         string
	ID          int
	PID         int
	Status      string
	UptimeS     int64
	Restarts    int
	CPUPercent  float64
	CPUSeconds  float64 // the process's user+system time so far
	RSSBytes    int64
	Requests    uint64
	RPS         float64
	Connections int64
	// LoopConnections is a worker's open connections per event loop, as it reported them
	// (the feed worker's loop transport: one loop per GOMAXPROCS); absent when it reports none.
	LoopConnections []int64
	// Health is the worker's own check of what it depends on (the feed worker: its
	// database), as its last stats answer said: HealthOK, HealthUnhealthy (HealthError
	// says why), or "" when the worker reports none. The supervisor shows it and does not act
	// on it: restarting a worker whose database is gone would turn a degraded worker that
	// still serves reads into a crash loop.
	Health      string
	HealthError string
	// Role is the worker's own word for its part in its app as it reports it (the feed
	// worker: "owner" for the one that commits every worker's writes, "follower"), or ""
	// when it reports none. Shown, not acted on.
	Role string
	// Report is the rest of what the worker said of itself in its last stats answer
	// (ipc.Msg.Report: the feed worker's write-path counters, which the ceiling sweep
	// reads), as it said it, or nil. The supervisor never reads it.
	Report json.RawMessage
	// Note is the worker's own one-line status, as it last sent it with sd_notify's
	// STATUS= ("" when it sends none).
	Note string
	// NotServing says why a worker shown as StateNotServing does not serve its slot
	// (serving.go); "" otherwise.
	NotServing string
	// Adopted: the worker was started by a previous supervisor and taken over at Start
	// (adopt.go).
	Adopted bool
	// NoCounters: the worker does not report Requests, RPS and Connections (it speaks no
	// internal/ipc), which are then unknown, not 0: null in JSON (statusjson.go).
	NoCounters bool
}

// Worker health values (WorkerStatus.Health).
const (
	HealthOK        = "ok"
	HealthUnhealthy = "unhealthy"
)

// slot is one worker position: a stable index, its socket and its current worker.
type slot struct {
	id       int
	file     *os.File // the listening socket; nil once closed
	steered  bool     // file is in the steering group
	cur      *proc
	state    string // when cur is nil: waiting-restart or errored
	restarts int
	// ports are the slot's sockets on the ports its app's own listen asked for, by the
	// address bound (nodelisten.go); nil for most apps.
	ports    map[string]*appPort
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

	dateFmt dateFormat // log_date_format compiled; nil: none
	// The watch and cron_restart goroutines (watch.go): stopped and waited for by stop.
	bgStop context.CancelFunc
	bg     sync.WaitGroup

	reloads, reloadsAborted, scales atomic.Int64 // for Counters

	serving     atomic.Uint64            // online<<32 | desired, published by the loop (hostdrain.go)
	appPorts    atomic.Pointer[[]string] // the app ports' addresses, published by the loop (AppPorts)
	hostDrained atomic.Bool              // SetHostDrained
	hostDrainMu sync.Mutex               // orders the keepalive messages (hostdrain.go)

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
	appPortSaid     bool          // the log said once that the app serves a port of its own (nodelisten.go)
	lastStatus      string        // the last STATUS= sent
	slots           map[int]*slot
	procs           map[*proc]struct{} // every live process, current or not
	rendezvous      *net.UnixListener  // where late rejoiners are refused (adopt.go); nil without Options.Adopt
	stopping        bool
	count           int // the slot count workers are told

	// nodeHostSaid holds the app hosts already logged (nodestats.go; loop-owned).
	nodeHostSaid map[string]bool
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
	s0 := &Supervisor{cfg: cfg, opt: opt}
	if err := s0.checkWatch(); err != nil {
		return nil, err
	}
	var df dateFormat
	if cfg.LogDateFormat != "" {
		df, _ = parseDateFormat(cfg.LogDateFormat) // validated
	}
	return &Supervisor{cfg: cfg, opt: opt, log: opt.Logger, calls: make(chan func()), dateFmt: df,
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
	stale, staleErr := s.leftBehind()
	switch {
	case s.cfg.Fork():
		// Nothing to bind or to check: the programs bind what they want themselves.
	case len(s.opt.Inherited) > 0 || stale:
		// The address is ours already: sockets kept across a restart, or workers of a
		// previous supervisor waiting to be adopted.
	case s.opt.SharePort:
		s.checkAddrFree()
	default:
		if err := s.checkPortFree(); err != nil {
			return err
		}
	}
	if err := s.setupSteering(); err != nil {
		return err
	}
	var adopted map[int]*adoptee
	if s.opt.Adopt != "" && !s.ownSockets() {
		err := staleErr // a path that is no socket is not replaced
		var rv *net.UnixListener
		var got map[int]*adoptee
		if err == nil {
			rv, got, err = s.openRendezvous(n, stale)
		}
		if err != nil {
			if s.steer != nil {
				s.steer.Close()
			}
			return err
		}
		s.rendezvous, adopted = rv, got
		for id := range adopted {
			n = max(n, id+1) // slots a scale-up had added before the supervisor died
		}
	}
	files := make([]*os.File, n)
	steered := make([]bool, n)
	for i := range n {
		if s.ownSockets() {
			break
		}
		if a := adopted[i]; a != nil { // the very socket the worker serves, and its queue
			files[i] = a.socket
			steered[i] = s.register(i, a.socket)
			continue
		}
		if f, name := s.inherited(i); f != nil { // a socket kept across a restart, and its queue
			files[i] = f
			s.addr = name
			steered[i] = s.register(i, f)
			continue
		}
		// The first socket fixes the port when the configuration asked for port 0.
		f, addr, err := listen(s.addr)
		if err != nil {
			for _, f := range files[:i] {
				f.Close()
			}
			for _, a := range adopted {
				ipc.Refuse(a.conn)
			}
			if s.rendezvous != nil {
				s.rendezvous.Close()
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
	s.closeInherited()
	s.ctx = ctx
	s.count = n
	s.clock = newStallClock(stallAllowance(s.cfg.StatsInterval.D()), time.Now())
	notifyIn, pattern := s.opt.NotifyDir, ""
	if notifyIn == "" {
		notifyIn, pattern = os.TempDir(), "onehost-notify-"
	}
	if dir, err := os.MkdirTemp(notifyIn, pattern); err != nil {
		s.log.Warn("no sd_notify sockets for the workers: READY=1 will not be heard", zap.Error(err))
	} else {
		s.notifyDir = dir
	}
	go s.loop()
	s.call(func() {
		for i, f := range files {
			sl := &slot{id: i, file: f, steered: steered[i]}
			s.slots[i] = sl
			s.storeSocket(sl)
			if a := adopted[i]; a != nil {
				s.adoptWorker(sl, a)
				continue
			}
			s.launch(sl)
		}
	})
	if s.rendezvous != nil {
		go s.refuseLate(s.rendezvous)
	}
	s.log.Info("cluster started", zap.String("addr", s.addr), zap.Int("instances", n),
		zap.Strings("command", s.cfg.Command), zap.String("steering", s.steerKind))
	s.startBackground(ctx)
	return nil
}

// checkAddrFree warns when another process listens on the address already (Start with
// SharePort): SO_REUSEPORT lets us join its group, as asked, and the log says so.
func (s *Supervisor) checkAddrFree() {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.log.Warn("another process already listens on the address; it will share the connections if it uses SO_REUSEPORT too",
			zap.String("addr", s.addr), zap.Error(err))
		return
	}
	ln.Close()
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
		s.publishServing()
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

// Done is closed once the supervisor has stopped.
func (s *Supervisor) Done() <-chan struct{} { return s.quit }
