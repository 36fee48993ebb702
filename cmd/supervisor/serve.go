package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/onehost/onehost/internal/agent"
	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/sdnotify"
)

// defaultConfig is loaded when -config is not given and the file exists.
const defaultConfig = "configs/cluster.yaml"

// selfExe names the running supervisor's own binary whatever happened to its file since
// it started (see the shim in runCluster).
const selfExe = "/proc/self/exe"

// runCluster is `supervisor run`. An upgrade's new image (fallback) that fails before it
// has taken the cluster over gives the previous binary back.
func runCluster(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fb := takeFallback(getenv)
	return fb.restore(runImage(ctx, args, getenv, stderr, fb))
}

func runImage(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, fb *fallback) error {
	fs := flag.NewFlagSet("supervisor run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML configuration (default "+defaultConfig+" when it exists), or a PM2 ecosystem file (JSON or YAML with apps: [...])")
	envName := fs.String("env", "", "with an ecosystem file: merge the app's env_NAME over its env (pm2 start --env NAME)")
	check := fs.Bool("check", false, "check the flags, the configuration and the programs, then exit without starting (upgrade runs the new binary so first)")
	only := fs.String("only", "", "with an ecosystem file: run only the app of this name (pm2 start --only NAME)")
	instances := fs.String("instances", "", "max, -1 (all CPUs but one) or N; overrides the config")
	listen := fs.String("listen", "", "HOST:PORT to serve; overrides the config")
	steer := fs.String("steering", "", "auto, hash or round-robin: which worker gets each new connection; overrides the config")
	socket := fs.String("socket", defaultSocket(getenv), "control socket path")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logPath := fs.String("log-file", "", "append the merged log (supervisor and workers) to this file instead of stderr; USR1 reopens it")
	metricsAddr := fs.String("metrics", "", "also serve Prometheus metrics at http://HOST:PORT/metrics (always on the control socket's /metrics)")
	dashboardAddr := fs.String("dashboard", "", "serve a live dashboard page at http://HOST:PORT/ (off by default; no login: bind it to a trusted network)")
	dashboardCeiling := fs.String("dashboard-ceiling", "", "with -dashboard: show the ceiling sweep writing results in DIR, and its plots (default "+defaultCeilingDir+" when it exists; \"-\" none)")
	logMaxSize := fs.String("log-max-size", "10M", "rotate -log-file and -log-dir files past this size (0: never; logrotate with USR1 instead)")
	logKeep := fs.Int("log-keep", 30, "rotated files kept per log (PATH.1 the newest)")
	logFormat := fs.String("log-format", "console", "console: the supervisor's events one readable line each, the apps' output as PM2 prints it (ID|APP | line), on a terminal or not; json: one JSON object per line for a collector (the apps' lines as pm2 logs --json writes them); auto: console (kept for older units)")
	var hosts allowedHosts
	fs.Var(&hosts, "allowed-hosts", "comma-separated host names -metrics and -dashboard answer to besides IP addresses, localhost and their own -metrics/-dashboard host (others get 421: DNS rebinding)")
	var upgradeTo upgradeBinaries
	fs.Var(&upgradeTo, "upgrade-binary", "a binary other than this one's own path that `upgrade -binary PATH` may re-execute (absolute; repeat for more); "+
		"either must be writable by nobody but its owner, this user or root")
	agentFlag := fs.String("agent", "", "answer HAProxy's agent-check at HOST:PORT (agent-check agent-port PORT): up ready N% with N the share of workers online, drain while drained or stopping, down with none serving; overrides the config's agent")
	sharePort := fs.Bool("share-port", false, "join a port another process (another supervisor) listens on already, sharing its connections (SO_REUSEPORT); without it such a port is refused")
	logDir := fs.String("log-dir", "", "also append each worker's own output to DIR/worker-SLOT.log (as PM2's per-instance logs); USR1 reopens them")
	envFile := fs.String("env-file", "", "KEY=VALUE lines (systemd's EnvironmentFile= syntax) added to the environment the workers inherit, under the config's env; with -check, judged as the unit of `startup -env-file` gets them")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dashboardCeiling != "" && *dashboardAddr == "" {
		return fmt.Errorf("dashboard-ceiling: %q needs -dashboard HOST:PORT to show it on (say -dashboard 127.0.0.1:8090)", *dashboardCeiling)
	}
	var fileEnv []string
	if *envFile != "" {
		var err error
		if fileEnv, err = readEnvFile(*envFile); err != nil {
			return err
		}
	}
	path := *configPath
	if path == "" {
		if _, err := os.Stat(defaultConfig); err == nil {
			path = defaultConfig
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program: %w", err)
	}
	ours := filepath.Join(filepath.Dir(exe), "worker")
	// loadSpecs reads what to run from the configuration and applies the command line's
	// overrides: at start, and again for `reload --update-env` (fleet.updateEnv), so that
	// the file read again compares with what runs field by field.
	loadSpecs := func() ([]cluster.App, error) {
		var specs []cluster.App // what to run: one unnamed app, or an ecosystem file's apps
		isEco := path != "" && cluster.IsEcosystem(path)
		switch {
		case isEco:
			apps, err := cluster.LoadEcosystem(path, *envName)
			if err != nil {
				return nil, err
			}
			specs = apps
		case *envName != "":
			return nil, fmt.Errorf("env: %q applies to a PM2 ecosystem file, and -config %q is not one", *envName, path)
		case *only != "":
			return nil, fmt.Errorf("only: %q applies to a PM2 ecosystem file, and -config %q is not one", *only, path)
		case path != "":
			c, err := cluster.LoadConfig(path)
			if err != nil {
				return nil, err
			}
			specs = []cluster.App{{Config: c}}
		default:
			specs = []cluster.App{{}}
		}
		if *only != "" {
			i := slices.IndexFunc(specs, func(a cluster.App) bool { return a.Name == *only })
			if i < 0 {
				var names []string
				for _, a := range specs {
					names = append(names, a.Name)
				}
				return nil, fmt.Errorf("only: %q: %s has no app of that name (its apps: %s)", *only, path, strings.Join(names, ", "))
			}
			specs = specs[i : i+1]
		}
		// The command line's settings are one cluster's: with several apps they would apply
		// to all, which is never what a file of different apps means.
		overrides := map[string]bool{"instances": *instances != "", "listen": *listen != "", "steering": *steer != "", "-- COMMAND": fs.NArg() > 0}
		for _, name := range []string{"instances", "listen", "steering", "-- COMMAND"} {
			if overrides[name] && len(specs) > 1 {
				return nil, fmt.Errorf("%s: applies to one app, and %s has %d: set it in the file, or pick one app with -only NAME", name, path, len(specs))
			}
		}
		for i := range specs {
			cfg := &specs[i].Config
			if *instances != "" {
				n, err := cluster.ParseInstances(*instances)
				if err != nil {
					return nil, err
				}
				cfg.Instances = n
			}
			if *listen != "" {
				cfg.Listen = *listen
			}
			if *steer != "" {
				cfg.Steering = *steer
			}
			if fs.NArg() > 0 {
				cfg.Command = fs.Args()
			}
			if len(cfg.Command) == 0 {
				cfg.Command = []string{ours}
				// Our worker says ready once its database is open: online means serving. (A
				// program named by the configuration is waited for once one of its workers
				// has said ready, or from the start with wait_ready: true.)
				ready := true
				cfg.WaitReady = &ready
			}
			if err := cfg.Validate(); err != nil { // after the overrides: -listen on a fork app, say
				if len(specs) > 1 || specs[i].Name != "" {
					return nil, fmt.Errorf("app %s: %w", specs[i].Name, err)
				}
				return nil, err
			}
		}
		return specs, nil
	}
	specs, err := loadSpecs()
	if err != nil {
		return err
	}
	agentAddr, err := agentAddress(*agentFlag, specs)
	if err != nil {
		return err
	}
	if len(specs) == 1 && *logPath == "" {
		*logPath = specs[0].LogFile // the app's out_file: the whole log, as before
	}

	level, err := zap.ParseAtomicLevel(*logLevel)
	if err != nil {
		return fmt.Errorf("log-level: %w", err)
	}
	maxSize, err := cluster.ParseByteSize(*logMaxSize)
	if err != nil {
		return fmt.Errorf("log-max-size: %w", err)
	}
	if *logKeep < 0 || *logKeep > 1000 {
		return fmt.Errorf("log-keep: %d is out of range: want 0 to 1000", *logKeep)
	}
	rot := rotation{MaxSize: int64(maxSize), Keep: *logKeep}
	if *check {
		// Everything that can be judged without binding or starting anything: what an
		// upgrade asks of the new binary before it gives the running image up.
		if f := *logFormat; f != "json" && f != "console" && f != "auto" {
			return errLogFormat(f)
		}
		if err := checkSocketPath(*socket); err != nil {
			return err
		}
		// What would have every worker die at start and be restarted until errored (under
		// systemd: a unit that crash-loops): startcheck.go.
		if err := checkLaunch(specs, getenv, fileEnv, ours, path); err != nil {
			return err
		}
		for _, sp := range specs {
			if _, err := cluster.New(sp.Config, cluster.Options{}); err != nil {
				return fmt.Errorf("app %s: %w", sp.Name, err)
			}
		}
		for _, sp := range specs {
			for _, w := range sp.Warnings {
				fmt.Fprintln(stderr, "supervisor: warning:", w)
			}
		}
		fmt.Fprintf(stderr, "supervisor: configuration ok: %d app(s)\n", len(specs))
		return nil
	}
	var lf *logFile
	if *logPath != "" {
		if lf, err = openLogFile(*logPath, rot); err != nil {
			return err
		}
		defer lf.Close()
	}
	format := *logFormat
	switch format {
	case "json", "console":
	case "auto":
		// Console wherever the log goes (a terminal, the journal, a file, a pipe), as
		// PM2's: JSON only when asked for, for a collector.
		format = "console"
	default:
		return errLogFormat(format)
	}
	// One timestamp format everywhere, the worker's (ISO 8601, milliseconds); no sampling,
	// since every worker line matters. The ring keeps the last lines for `supervisor logs`.
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	newEnc := func() zapcore.Encoder { return zapcore.NewJSONEncoder(encCfg) }
	if format == "console" {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		encCfg.ConsoleSeparator = "  "
		newEnc = func() zapcore.Encoder { return zapcore.NewConsoleEncoder(encCfg) }
	}
	sink := zapcore.AddSync(stderr)
	if lf != nil {
		sink = lf
	}
	// The apps' lines (logprint.go) go to the same sink between the entries: one write
	// at a time.
	sink = zapcore.Lock(sink)
	ring := newLogRing(2000)
	appOut := newAppOutput(ring, sink, format == "json", level)
	log := zap.New(zapcore.NewTee(zapcore.NewCore(newEnc(), sink, level), newRingCore(newEnc(), level, ring)))
	if len(specs) == 1 && specs[0].Name != "" {
		log = log.With(zap.String("app", specs[0].Name))
	}
	defer log.Sync()
	for _, sp := range specs { // what the file says that means nothing here (PM2's deploy, PM2 Plus's fields)
		for _, w := range sp.Warnings {
			log.Warn("configuration: ignored", zap.String("app", sp.Name), zap.String("why", w))
		}
	}

	if err := checkSocketPath(*socket); err != nil {
		return err
	}
	// The lock comes before any bind: a second supervisor must not join the port group.
	if err := prepareRuntimeDir(filepath.Dir(*socket), *socket == defaultSocket(getenv)); err != nil {
		return err
	}
	lock, err := cluster.AcquireLock(*socket + ".lock")
	if err != nil {
		return err
	}
	defer lock.Release()
	// The workers' sd_notify sockets, in the runtime directory rather than /tmp; what a
	// crash left there goes now (the lock says no other supervisor uses it).
	notifyDir := *socket + ".n"
	if len(notifyDir)+len("/1234567890/w999-9999999") > maxSocketPath {
		notifyDir = "" // too long for the sockets' paths: os.TempDir()
	} else if err := os.RemoveAll(notifyDir); err != nil {
		return fmt.Errorf("remove the previous notify directory: %w", err)
	} else if err := os.Mkdir(notifyDir, 0o700); err != nil {
		return fmt.Errorf("create the notify directory: %w", err)
	} else {
		defer os.Remove(notifyDir) // the clusters remove what they made in it at stop
	}

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
	opts := cluster.Options{Logger: log, Environ: append(os.Environ(), fileEnv...),
		ListenPIDShim: []string{selfExe, listenPIDShim, "--"},
		// An upgrade's new image takes every waiting worker or none, and then gives
		// the previous binary back (fallback), which can.
		AdoptAll: fb != nil, NotifyDir: notifyDir, SharePort: *sharePort}
	if fb != nil {
		fb.log = log
	}
	upgradeFailed := takeUpgradeFailure(getenv)
	notifier, err := sdnotify.New(getenv("NOTIFY_SOCKET"))
	if err != nil {
		log.Warn("systemd notifications off", zap.Error(err))
	}
	defer notifier.Close()
	if notifier != nil {
		var failed atomic.Bool
		opts.Notify = func(state string) {
			if err := notifier.Notify(state); err != nil && !failed.Swap(true) {
				log.Warn("systemd notification failed (later failures are not logged)", zap.Error(err))
			}
		}
		wd, err := sdnotify.Watchdog(getenv("WATCHDOG_USEC"), getenv("WATCHDOG_PID"), os.Getpid())
		if err != nil {
			return err
		}
		opts.Watchdog = wd
		log.Info("systemd notifications on", zap.String("socket", getenv("NOTIFY_SOCKET")), zap.Duration("watchdog_every", wd))
	}
	var wl *workerLogs
	if *logDir != "" {
		if err := os.MkdirAll(*logDir, 0o700); err != nil {
			return fmt.Errorf("create log directory: %w", err)
		}
		if err := checkLogDir(*logDir); err != nil {
			return err
		}
		wl = &workerLogs{dir: *logDir, rot: rot, log: log}
		defer wl.Close()
	}
	// One cluster per app, each with its own logger (its name on every line), per-worker
	// files and, with several apps, its own out_file beside the merged log.
	// Sockets systemd kept for us across a restart (FDSTORE), by app and slot.
	kept, err := listenFDs(getenv)
	if err != nil {
		return err
	}
	fl, appFiles, err := newFleet(specs, fleetSetup{opts: opts, log: log, rot: rot, workers: wl, notifier: notifier,
		kept: kept, socket: *socket, output: appOut,
		newCore: func(w zapcore.WriteSyncer) zapcore.Core { return zapcore.NewCore(newEnc(), w, level) }})
	defer func() {
		for _, f := range appFiles {
			f.Close()
		}
	}()
	if err != nil {
		return err
	}
	// For save and flush (pm2.go).
	fl.runArgs, fl.mainLog, fl.workerLogs = args, lf, wl
	if path != "" {
		fl.reread = loadSpecs
	}
	for name, f := range kept { // claimed by no app
		log.Info("a descriptor systemd passed is no slot's: closed", zap.String("name", name))
		f.Close()
	}
	ctl, err := listenControl(*socket, log)
	if err != nil {
		return err
	}
	defer os.Remove(*socket)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	held, heldRaw, err := takeHeldApps(getenv)
	if fb != nil {
		fb.held = heldRaw
	}
	if err != nil {
		ctl.Close()
		return fb.restore(err)
	}
	if err := fl.start(ctx, held); err != nil {
		ctl.Close()
		// At once, before the deferred cancel would stop what this image started: the
		// previous binary takes every worker over, those it started included.
		return fb.restore(err)
	}
	fb.commit()
	// The agent comes after the workers' start, so its first answer is their state (down
	// until one is online), and goes last (agentStopGrace).
	var ag *agent.Server
	if agentAddr != "" {
		if ag, err = agent.Listen(agentAddr, agent.Config{State: fl.agentState, Logger: log}); err != nil {
			return err
		}
		defer ag.Close()
		fl.agentAddr = ag.Addr().String()
		log.Info("agent", zap.String("addr", fl.agentAddr))
	}

	stopReq := make(chan struct{}, 1)
	up := &upgrader{fl: fl, log: log, defaultBinary: exe, allowed: upgradeTo, req: make(chan string, 1)}
	up.failed.Store(upgradeFailed)
	if upgradeFailed != "" {
		log.Error("upgrade failed: its new binary gave this one back, which serves on", zap.String("error", upgradeFailed))
	}
	reg := metricsRegistry(fl, log)
	srv := &http.Server{Handler: controlHandler(fl, log, ring, reg, stopReq, up), ReadHeaderTimeout: 10 * time.Second,
		ConnContext: controlConnContext}
	go srv.Serve(ctl)
	defer srv.Close()
	log.Info("control socket", zap.String("path", *socket))
	if *metricsAddr != "" {
		ml, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		msrv := &http.Server{Handler: hostCheck("metrics", *metricsAddr, hosts, mux), ReadHeaderTimeout: 10 * time.Second}
		go msrv.Serve(ml)
		defer msrv.Close()
		log.Info("metrics", zap.String("url", "http://"+ml.Addr().String()+"/metrics"))
	}
	if *dashboardAddr != "" {
		stopDashboard, err := startDashboard(ctx, *dashboardAddr, ceilingDir(*dashboardCeiling), hosts, fl, log)
		if err != nil {
			return err
		}
		defer stopDashboard()
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)

	done := ctx.Done() // set to nil once seen, so a cancelled ctx asks for one stop, not many
	stopped := make(chan error, 1)
	stopping := false
	var stopBegan time.Time
	startStop := func(why string) {
		if stopping {
			log.Warn("second stop request: killing the workers now", zap.String("reason", why))
			go fl.kill()
			return
		}
		stopping, stopBegan = true, time.Now()
		fl.stopping.Store(true) // the agent answers drain from now on
		log.Info("stopping gracefully", zap.String("reason", why))
		go func() { stopped <- fl.stop(context.Background()) }()
	}
	for {
		select {
		case s := <-sigs:
			switch s {
			case syscall.SIGHUP:
				go func() {
					if err := fl.reload(ctx, ""); err != nil {
						log.Error("reload on SIGHUP", zap.Error(err))
					}
				}()
			case syscall.SIGTTIN, syscall.SIGTTOU:
				d := 1
				if s == syscall.SIGTTOU {
					d = -1
				}
				go func() { // with several apps there is no one cluster to scale: fleet.scale says so
					if err := fl.scale(ctx, "", d, true); err != nil {
						log.Error("scale on signal", zap.String("signal", s.String()), zap.Error(err))
					}
				}()
			case syscall.SIGUSR2: // nginx's, HAProxy's and gunicorn's signal for a new binary
				if bin, err := up.check(up.defaultBinary); err != nil {
					log.Error("upgrade on USR2 refused", zap.Error(err))
				} else if up.busy.CompareAndSwap(false, true) {
					go func() { up.req <- bin }()
				}
			case syscall.SIGUSR1:
				if lf == nil && wl == nil && len(appFiles) == 0 {
					log.Info("USR1: no log file to reopen (logs go to stderr)")
				}
				for _, f := range appFiles {
					if err := f.Reopen(); err != nil {
						log.Error("USR1: reopen an app's log file", zap.String("path", f.path), zap.Error(err))
					}
				}
				if lf != nil {
					if err := lf.Reopen(); err != nil {
						fmt.Fprintln(stderr, "supervisor: USR1:", err) // the log itself may be what failed
					} else {
						log.Info("USR1: log file reopened", zap.String("path", lf.path))
					}
				}
				if wl != nil {
					wl.Reopen()
				}
			default:
				startStop("signal " + s.String())
			}
		case <-stopReq:
			startStop("stop command")
		case bin := <-up.req:
			if stopping {
				log.Warn("upgrade refused: stopping")
				continue
			}
			// The workers serve on through the exec and rejoin the new image (adopt.go);
			// this returns only if the exec failed, and then nothing was given up.
			if notifier != nil {
				notifier.Notify(sdnotify.Reloading())
			}
			err := up.exec(bin, lf, fl.heldApps())
			log.Error("upgrade failed: the running supervisor goes on", zap.String("binary", bin), zap.Error(err))
			if notifier != nil {
				notifier.Notify("READY=1")
			}
			up.busy.Store(false)
		case <-done:
			done = nil
			startStop("context done")
		case err := <-stopped:
			if ag != nil {
				// The workers are gone; the agent has said drain for at least the grace, so
				// that HAProxy heard it before the port goes silent.
				time.Sleep(time.Until(stopBegan.Add(agentStopGrace)))
				ag.Close()
			}
			return err
		}
	}
}
