package daemon

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/onehost/onehost/internal/agent"
	"github.com/onehost/onehost/internal/applog"
	"github.com/onehost/onehost/internal/appspec"
	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/monit"
	"github.com/onehost/onehost/internal/pageserver"
	"github.com/onehost/onehost/internal/procstat"
	"github.com/onehost/onehost/internal/registry"
	"github.com/onehost/onehost/internal/safepath"
	"github.com/onehost/onehost/internal/subreaper"
	"github.com/onehost/onehost/internal/systemd"
)

// selfExe names the running supervisor's own binary whatever happened to its file since
// it started (see the shim in runCluster).
const selfExe = "/proc/self/exe"

// runImage runs one supervisor image: the steps below in order, each a method of image
// (the state they share). What a step opens it hands to im.onClose, which closes it when
// runImage returns, last opened first, as the defers it replaces did.
func runImage(ctx context.Context, cfg Config, fb *fallback) error {
	im, err := newImage(cfg, fb)
	if err != nil {
		return err
	}
	defer im.close()
	if err := im.openLog(); err != nil {
		return err
	}
	if err := im.lockRuntimeDir(); err != nil {
		return err
	}
	opts, err := im.clusterOptions()
	if err != nil {
		return err
	}
	if err := im.buildRegistry(opts); err != nil {
		return err
	}
	if err := im.listenControl(); err != nil {
		return err
	}
	if err := im.listenTCP(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	im.onClose(cancel)
	if err := im.adoptOrphans(); err != nil {
		return err
	}
	if err := im.start(ctx); err != nil {
		return err
	}
	im.startAgent()
	im.serveControl()
	im.serveMetrics()
	im.serveDashboard(ctx)
	return im.wait(ctx)
}

// newImage reads the env file and the configuration into the apps to run, and checks the
// log settings: what every image does before it opens anything.
func newImage(cfg Config, fb *fallback) (*image, error) {
	cfg = cfg.withDefaults()
	im := &image{cfg: cfg, fb: fb, getenv: cfg.Getenv, stderr: cfg.Stderr}
	if err := im.loadApps(); err != nil {
		return nil, err
	}
	if err := im.logSettings(); err != nil {
		return nil, err
	}
	return im, nil
}

// image is what runImage's steps share, in the order they set it.
type image struct {
	cfg     Config
	getenv  func(string) string
	stderr  io.Writer
	fb      *fallback
	closers []func() // see onClose
	// tasks are the goroutines the signal loop starts (a reload on HUP, the stop): waited
	// for before what they use (the log, the clusters) is closed.
	tasks sync.WaitGroup

	// loadApps
	fileEnv    []string
	environ    []string // the workers' environment, less the upgrade's variables
	specs      []cluster.App
	agentAddr  string
	logPath    string // cfg.LogFile, or the one app's out_file
	configPath string // cfg.Apps.Path, absolute ("" for none)
	cwd        string // the working directory: the configuration's relative paths resolve here
	// logSettings
	level  zap.AtomicLevel
	format string // console or json, what the workers are told (ipc.EnvLogFormat)
	// openLog
	lf     *applog.File
	newEnc func() zapcore.Encoder
	ring   *applog.Ring
	appOut *applog.Output
	log    *zap.Logger
	// lockRuntimeDir
	notifyDir string
	// clusterOptions
	notifier *systemd.Notifier
	// buildRegistry
	wl       *applog.WorkerLogs
	reg      *registry.Registry
	appFiles []*applog.File
	// listenControl, listenTCP, then the servers
	ctl       net.Listener
	agentLn   net.Listener
	metrics   *pageserver.Server
	dashboard *pageserver.Server
	ag        *agent.Server
	stopReq   chan struct{}
	up        *upgrader
	prom      *prometheus.Registry
}

// onClose has fn run when runImage returns: the functions given run last first, each
// whatever the others do (deferred, as runImage's own defers were).
func (im *image) onClose(fn func()) { im.closers = append(im.closers, fn) }

func (im *image) close() {
	for _, fn := range im.closers {
		defer fn()
	}
}

// openLog opens -log-file and builds the supervisor's logger, which also feeds the ring
// `supervisor logs` reads.
func (im *image) openLog() error {
	if im.logPath != "" {
		lf, err := applog.OpenFile(im.logPath, im.cfg.Rotation)
		if err != nil {
			return err
		}
		im.lf = lf
		im.onClose(func() { lf.Close() })
	}
	format := im.format
	// One timestamp format everywhere, the workers' too (ipc.NewLogEncoder); no sampling,
	// since every worker line matters. The ring keeps the last lines for `supervisor logs`.
	newEnc := func() zapcore.Encoder { return ipc.NewLogEncoder(format) }
	sink := zapcore.AddSync(im.stderr)
	if im.lf != nil {
		sink = im.lf
	}
	// The apps' lines (logprint.go) go to the same sink between the entries: one write
	// at a time.
	sink = zapcore.Lock(sink)
	im.newEnc = newEnc
	im.ring = applog.NewRing(2000)
	im.appOut = applog.NewOutput(im.ring, sink, format == "json", im.level)
	log := zap.New(zapcore.NewTee(zapcore.NewCore(newEnc(), sink, im.level), applog.NewCore(newEnc(), im.level, im.ring)))
	if len(im.specs) == 1 && im.specs[0].Name != "" {
		log = log.With(zap.String("app", im.specs[0].Name))
	}
	im.log = log
	im.onClose(func() { log.Sync() })
	im.onClose(im.tasks.Wait)     // before the log closes: they log
	for _, sp := range im.specs { // what the file says that means nothing here (PM2's deploy, PM2 Plus's fields)
		for _, w := range sp.Warnings {
			log.Warn("configuration: ignored", zap.String("app", sp.Name), zap.String("why", w))
		}
	}
	return nil
}

// lockRuntimeDir takes the control socket's lock and makes the workers' notify directory.
func (im *image) lockRuntimeDir() error {
	socket := im.cfg.Socket
	if err := control.CheckSocketPath(socket); err != nil {
		return err
	}
	// The lock comes before any bind: a second supervisor must not join the port group.
	if err := control.PrepareDir(filepath.Dir(socket), socket == control.DefaultSocket(im.getenv)); err != nil {
		return err
	}
	lock, err := cluster.AcquireLock(socket + ".lock")
	if err != nil {
		return err
	}
	im.onClose(func() { lock.Release() })
	// The workers' sd_notify sockets, in the runtime directory rather than /tmp; what a
	// crash left there goes now (the lock says no other supervisor uses it).
	notifyDir := socket + ".n"
	if len(notifyDir)+len("/1234567890/w999-9999999") > control.MaxSocketPath {
		notifyDir = "" // too long for the sockets' paths: os.TempDir()
	} else if err := os.RemoveAll(notifyDir); err != nil {
		return fmt.Errorf("remove the previous notify directory: %w", err)
	} else if err := os.Mkdir(notifyDir, 0o700); err != nil {
		return fmt.Errorf("create the notify directory: %w", err)
	} else {
		im.onClose(func() { os.Remove(notifyDir) }) // the clusters remove what they made in it at stop
	}
	im.notifyDir = notifyDir
	return nil
}

// clusterOptions is what every app's cluster is given, systemd's notifications included.
func (im *image) clusterOptions() (cluster.Options, error) {
	log, getenv := im.log, im.getenv
	// The shim is this very binary, named by /proc/self/exe rather than by its path: the
	// kernel resolves that link to the running image, so a restart hours later still starts
	// through it after bin/ was rebuilt or removed (the path would name the new binary, or
	// nothing). The exec happens in the forked child, still a copy of the supervisor, so
	// its /proc/self/exe is the supervisor's image too. (Linux only, as the rest of this is.)
	//
	// Under systemd (Type=notify): readiness, reloads, stopping, a status line and the
	// watchdog go to NOTIFY_SOCKET. The workers do not inherit it (nor WATCHDOG_*): the
	// cluster gives each its own or none, since with NotifyAccess=main systemd would drop
	// their messages anyway, and they must not speak for the service.
	//
	// The workers are told the log's form (ipc.EnvLogFormat), so that ours prints readable
	// lines after `ID|APP |` here and JSON under -log-format json; the env file and the
	// app's env come after, and may say otherwise.
	environ := append(slices.Clone(im.environ), ipc.EnvLogFormat+"="+im.format)
	opts := cluster.Options{Logger: log, Environ: append(environ, im.fileEnv...),
		ListenPIDShim: []string{selfExe, systemd.ListenPIDShim, "--"},
		// An upgrade's new image takes every waiting worker or none, and then gives
		// the previous binary back (fallback), which can.
		AdoptAll: im.fb != nil, NotifyDir: im.notifyDir, SharePort: im.cfg.SharePort}
	if im.fb != nil {
		im.fb.log = log
	}
	notifier, err := systemd.NewNotifier(getenv("NOTIFY_SOCKET"))
	if err != nil {
		log.Warn("systemd notifications off", zap.Error(err))
	}
	im.notifier = notifier
	im.onClose(func() { notifier.Close() })
	if notifier != nil {
		var failed atomic.Bool
		opts.Notify = func(state string) {
			if err := notifier.Notify(state); err != nil && !failed.Swap(true) {
				log.Warn("systemd notification failed (later failures are not logged)", zap.Error(err))
			}
		}
		wd, err := systemd.Watchdog(getenv("WATCHDOG_USEC"), getenv("WATCHDOG_PID"), os.Getpid())
		if err != nil {
			return opts, err
		}
		opts.Watchdog = wd
		log.Info("systemd notifications on", zap.String("socket", getenv("NOTIFY_SOCKET")), zap.Duration("watchdog_every", wd))
	}
	return opts, nil
}

// buildRegistry opens -log-dir and makes one cluster per app, each with its own logger (its
// name on every line), per-worker files and, with several apps, its own out_file beside
// the merged log.
func (im *image) buildRegistry(opts cluster.Options) error {
	log := im.log
	if dir := im.cfg.LogDir; dir != "" {
		if err := safepath.MkdirAll(dir); err != nil {
			return fmt.Errorf("log-dir: %w", err)
		}
		if err := applog.CheckDir(dir); err != nil {
			return err
		}
		wl := applog.NewWorkerLogs(dir, im.cfg.Rotation, log)
		im.wl = wl
		im.onClose(func() { wl.Close() })
	}
	// Sockets systemd kept for us across a restart (FDSTORE), by app and slot.
	kept, err := systemd.ListenFDs(im.getenv)
	if err != nil {
		return err
	}
	setup := registry.Setup{Options: opts, Rotation: im.cfg.Rotation, MainLog: im.lf, WorkerLogs: im.wl, Output: im.appOut, Socket: im.cfg.Socket,
		NewCore: func(w zapcore.WriteSyncer) zapcore.Core { return zapcore.NewCore(im.newEnc(), w, im.level) }}
	if len(kept) > 0 {
		setup.Inherited = func(app string, multi bool) map[int]*os.File { return systemd.TakeInherited(kept, app, multi) }
	}
	if n := im.notifier; n != nil {
		setup.SocketStore = func(app string, multi bool, log *zap.Logger) func(int, *os.File) {
			return systemd.FDStore(n, app, multi, log)
		}
	}
	if im.cfg.Apps.Path != "" { // reload -update-env reads it again
		setup.Reread = im.cfg.Apps.Load
	}
	reg, appFiles, err := registry.New(im.specs, setup)
	im.appFiles = appFiles
	im.onClose(func() {
		for _, f := range appFiles {
			f.Close()
		}
	})
	if err != nil {
		return err
	}
	im.reg = reg
	for name, f := range kept { // claimed by no app
		log.Info("a descriptor systemd passed is no slot's: closed", zap.String("name", name))
		f.Close()
	}
	return nil
}

// listenControl binds the control socket (served by serveControl once the apps started).
func (im *image) listenControl() error {
	ctl, err := listenControl(im.cfg.Socket, im.log)
	if err != nil {
		return err
	}
	im.ctl = ctl
	socket := im.cfg.Socket
	im.onClose(func() { os.Remove(socket) })
	return nil
}

// adoptOrphans makes the supervisor the subreaper of its workers' descendants: one that
// forks twice to leave its worker stays the supervisor's (a child of it, refused the
// commands that change the cluster: operatorOnly) instead of becoming init's.
func (im *image) adoptOrphans() error {
	r, err := subreaper.Start(subreaper.Config{Logger: im.log})
	if err != nil {
		return err
	}
	im.onClose(r.Close)
	return nil
}

// listenTCP binds the TCP ports of -agent, -metrics and -dashboard, so that a port another
// program holds is refused before any app starts (a squatter on the agent port, which
// HAProxy would believe, once made run exit after the apps had started). They are served
// once the apps run: the agent's first answer is then their state, adopted workers
// included (during an upgrade's adoption, "down" would take a serving host out).
func (im *image) listenTCP() error {
	f := im.cfg
	if im.agentAddr != "" {
		ln, err := net.Listen("tcp", im.agentAddr)
		if err != nil {
			return fmt.Errorf("agent: listen on %s: %w (another program holds the port: the balancer would believe its answers; stop it, or give -agent another port)", im.agentAddr, err)
		}
		im.agentLn = ln
		im.onClose(func() { ln.Close() })
	}
	for _, p := range []struct {
		name, addr string
		to         **pageserver.Server
	}{{"metrics", f.Metrics, &im.metrics}, {"dashboard", f.Dashboard, &im.dashboard}} {
		if p.addr == "" {
			continue
		}
		s, err := pageserver.Listen(p.addr, pageserver.Config{Name: p.name, Logger: im.log, AllowedHosts: f.AllowedHosts})
		if err != nil {
			return err
		}
		*p.to = s
		im.onClose(func() { s.Close() })
	}
	return nil
}

// start starts the apps, adopting the workers a previous image left (adopt.go); an
// upgrade's new image that fails here gives the previous binary back.
func (im *image) start(ctx context.Context) error {
	held, heldRaw, err := takeHeldApps(im.getenv)
	if im.fb != nil {
		im.fb.held = heldRaw
	}
	if err != nil {
		im.ctl.Close()
		return im.fb.restore(err)
	}
	if err := im.reg.Start(ctx, held); err != nil {
		im.ctl.Close()
		// At once, before the deferred cancel would stop what this image started: the
		// previous binary takes every worker over, those it started included.
		return im.fb.restore(err)
	}
	im.fb.commit()
	return nil
}

// startAgent answers HAProxy's agent-check on the port listenTCP bound. It comes after the
// workers' start, so its first answer is their state (down until one is online), and goes
// last (agentStopGrace).
func (im *image) startAgent() {
	if im.agentLn == nil {
		return
	}
	ag := agent.Serve(im.agentLn, agent.Config{State: im.reg.AgentState, Logger: im.log})
	im.ag = ag
	im.onClose(func() { ag.Close() })
	im.log.Info("agent", zap.String("addr", ag.Addr().String()))
}

// controlDrain bounds how long a closing supervisor waits for the control answers being
// written: they are small, and a stream's context has ended by then.
const controlDrain = 2 * time.Second

// serveControl serves the control socket's API (control.go).
func (im *image) serveControl() {
	log := im.log
	im.stopReq = make(chan struct{}, 1)
	im.up = &upgrader{reg: im.reg, log: log, defaultBinary: im.cfg.Binary, allowed: im.cfg.UpgradeBinaries, args: im.cfg.Args,
		environ: im.environ, req: make(chan string, 1)}
	failed := takeUpgradeFailure(im.getenv)
	im.up.failed.Store(failed)
	if failed != "" {
		log.Error("upgrade failed: its new binary gave this one back, which serves on", zap.String("error", failed))
	}
	im.prom = metricsRegistry(im.reg, log)
	// Every request's context ends when the supervisor closes: the streams (logs -f) end
	// then rather than hold the drain below to its deadline.
	base, cancelBase := context.WithCancel(context.Background())
	srv := &http.Server{Handler: im.controlHandler(), ReadHeaderTimeout: 10 * time.Second, ConnContext: controlConnContext,
		BaseContext: func(net.Listener) context.Context { return base }, ErrorLog: zap.NewStdLog(log)}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(im.ctl)
	}()
	im.onClose(func() {
		// Stop accepting, then let the answers being written go out, the stop command's
		// own 202 first: a supervisor with no app left stops within microseconds of that
		// request, and a Close at once cut its answer (kill saw EOF). Then force.
		cancelBase()
		ctx, cancel := context.WithTimeout(context.Background(), controlDrain)
		defer cancel()
		srv.Shutdown(ctx)
		srv.Close()
		<-served
	})
	log.Info("control socket", zap.String("path", im.cfg.Socket))
}

// serveMetrics serves -metrics on the port listenTCP bound.
func (im *image) serveMetrics() {
	if im.metrics == nil {
		return
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(im.prom, promhttp.HandlerOpts{ErrorLog: zap.NewStdLog(im.log)}))
	im.metrics.Serve(mux)
	im.log.Info("metrics", zap.String("url", "http://"+im.metrics.Addr().String()+"/metrics"))
}

// serveDashboard serves -dashboard (dashboard.go) on the port listenTCP bound.
func (im *image) serveDashboard(ctx context.Context) {
	if im.dashboard == nil {
		return
	}
	f := im.cfg
	im.onClose(startDashboard(ctx, im.dashboard, monit.CeilingDir(f.DashboardCeiling), im.reg, im.log))
}

// loadApps reads -env-file and the configuration into the apps to run.
func (im *image) loadApps() error {
	cfg := im.cfg
	if cfg.EnvFile != "" {
		var err error
		if im.fileEnv, err = systemd.ReadEnvFile(cfg.EnvFile); err != nil {
			return err
		}
	}
	// The workers' environment: the supervisor's, less what only an upgrade's images pass
	// each other (upgrade.go), the env file's over it.
	im.environ = withoutUpgradeVars(cfg.Environ)
	var err error
	if im.specs, err = cfg.Apps.Load(); err != nil {
		return err
	}
	if im.agentAddr, err = appspec.AgentAddress(cfg.Agent, im.specs); err != nil {
		return err
	}
	if cfg.Apps.Path != "" {
		if im.configPath, err = filepath.Abs(cfg.Apps.Path); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	if im.cwd, err = os.Getwd(); err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	im.logPath = cfg.LogFile
	if len(im.specs) == 1 && im.logPath == "" {
		im.logPath = im.specs[0].LogFile // the app's out_file: the whole log, as before
	}
	return nil
}

// logSettings checks -log-level and -log-format.
func (im *image) logSettings() error {
	level, err := zap.ParseAtomicLevel(im.cfg.LogLevel)
	if err != nil {
		return fmt.Errorf("log-level: %w", err)
	}
	switch f := im.cfg.LogFormat; f {
	case "json", "console":
		im.format = f
	case "auto":
		// Console wherever the log goes (a terminal, the journal, a file, a pipe), as
		// PM2's: JSON only when asked for, for a collector.
		im.format = "console"
	default:
		return errLogFormat(f)
	}
	im.level = level
	return nil
}

// check is run -check: everything that can be judged without binding or starting
// anything, what an upgrade asks of the new binary before it gives the running image up.
func (im *image) check() error {
	if err := control.CheckSocketPath(im.cfg.Socket); err != nil {
		return err
	}
	// What would have every worker die at start and be restarted until errored (under
	// systemd: a unit that crash-loops): appspec's launch checks.
	if err := appspec.CheckLaunch(im.specs, im.getenv, im.environ, im.fileEnv, im.cfg.Apps.Ours, im.cfg.Apps.Path); err != nil {
		return err
	}
	for _, sp := range im.specs {
		if _, err := cluster.New(sp.Config, cluster.Options{}); err != nil {
			return fmt.Errorf("app %s: %w", sp.Name, err)
		}
	}
	for _, sp := range im.specs {
		for _, w := range sp.Warnings {
			fmt.Fprintln(im.stderr, "supervisor: warning:", w)
		}
	}
	fmt.Fprintf(im.stderr, "supervisor: configuration ok: %d app(s)\n", len(im.specs))
	return nil
}

// startDashboard serves the dashboard on ps until the returned stop is called, reading
// the apps' status from reg and, when ceilingDir is not "", a ceiling sweep's progress and
// plots from that directory. Its figures are monit's: the same sampler (monitor) reads
// the supervisor's status and the host. (ps answers only requests for its own address,
// localhost, an IP address or one of -allowed-hosts: pageserver's HostCheck.)
func startDashboard(ctx context.Context, ps *pageserver.Server, ceilingDir string, reg *registry.Registry, log *zap.Logger) (stop func()) {
	m := &monit.Monitor{
		Status:   func(context.Context) (control.Status, error) { return reg.Status("") },
		ReadHost: func() (procstat.Host, error) { return procstat.ReadHost("") },
		Now:      time.Now,
		Interval: time.Second,
	}
	d := monit.NewDashboard(m.Sample, ceilingDir)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Run(ctx)
	}()
	ps.Serve(d.Handler())
	log.Info("dashboard", zap.String("url", "http://"+ps.Addr().String()+"/"), zap.String("ceiling", ceilingDir))
	return func() {
		ps.Close() // ends the streams too: their requests' contexts are cancelled
		cancel()
		<-done
	}
}
