package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/cluster"
)

// runFlags are `supervisor run`'s flags.
type runFlags struct {
	configPath, envName, only, instances, listen, steer, socket string
	logLevel, logPath, logMaxSize, logFormat, logDir, envFile   string
	metricsAddr, dashboardAddr, dashboardCeiling, agent         string
	check, sharePort                                            bool
	logKeep                                                     int
	hosts                                                       allowedHosts
	upgradeTo                                                   upgradeBinaries
	sharedLog                                                   logFlags // -fleet... (sharedlog.go)
	command                                                     []string // after --
}

func parseRunFlags(args []string, getenv func(string) string, stderr io.Writer) (*runFlags, error) {
	f := &runFlags{}
	fs := flag.NewFlagSet("supervisor run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.configPath, "config", "", "YAML configuration (default "+defaultConfig+" when it exists), or a PM2 ecosystem file (JSON or YAML with apps: [...])")
	fs.StringVar(&f.envName, "env", "", "with an ecosystem file: merge the app's env_NAME over its env (pm2 start --env NAME)")
	fs.BoolVar(&f.check, "check", false, "check the flags, the configuration and the programs, then exit without starting (upgrade runs the new binary so first)")
	fs.StringVar(&f.only, "only", "", "with an ecosystem file: run only the app of this name (pm2 start --only NAME)")
	fs.StringVar(&f.instances, "instances", "", "max, -1 (all CPUs but one) or N; overrides the config")
	fs.StringVar(&f.listen, "listen", "", "HOST:PORT to serve; overrides the config")
	fs.StringVar(&f.steer, "steering", "", "auto, hash or round-robin: which worker gets each new connection; overrides the config")
	fs.StringVar(&f.socket, "socket", defaultSocket(getenv), "control socket path")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logPath, "log-file", "", "append the merged log (supervisor and workers) to this file instead of stderr; USR1 reopens it")
	fs.StringVar(&f.metricsAddr, "metrics", "", "also serve Prometheus metrics at http://HOST:PORT/metrics (always on the control socket's /metrics)")
	fs.StringVar(&f.dashboardAddr, "dashboard", "", "serve a live dashboard page at http://HOST:PORT/ (off by default; no login: bind it to a trusted network)")
	fs.StringVar(&f.dashboardCeiling, "dashboard-ceiling", "", "with -dashboard: show the ceiling sweep writing results in DIR, and its plots (default "+defaultCeilingDir+" when it exists; \"-\" none)")
	fs.StringVar(&f.logMaxSize, "log-max-size", "10M", "rotate -log-file and -log-dir files past this size (0: never; logrotate with USR1 instead)")
	fs.IntVar(&f.logKeep, "log-keep", 30, "rotated files kept per log (PATH.1 the newest)")
	fs.StringVar(&f.logFormat, "log-format", "console", "console: the supervisor's events one readable line each, the apps' output as PM2 prints it (ID|APP | line), on a terminal or not; json: one JSON object per line for a collector (the apps' lines as pm2 logs --json writes them); auto: console (kept for older units)")
	fs.Var(&f.hosts, "allowed-hosts", "comma-separated host names -metrics and -dashboard answer to besides IP addresses, localhost and their own -metrics/-dashboard host (others get 421: DNS rebinding)")
	fs.Var(&f.upgradeTo, "upgrade-binary", "a binary other than this one's own path that `upgrade -binary PATH` may re-execute (absolute; repeat for more); "+
		"either must be writable by nobody but its owner, this user or root")
	fs.StringVar(&f.agent, "agent", "", "answer HAProxy's agent-check at HOST:PORT (agent-check agent-port PORT): up ready N% with N the share of workers online, drain while drained or stopping, down with none serving; overrides the config's agent")
	fs.BoolVar(&f.sharePort, "share-port", false, "join a port another process (another supervisor) listens on already, sharing its connections (SO_REUSEPORT); without it such a port is refused")
	fs.StringVar(&f.logDir, "log-dir", "", "also append each worker's own output to DIR/worker-SLOT.log (as PM2's per-instance logs); USR1 reopens them")
	fs.StringVar(&f.envFile, "env-file", "", "KEY=VALUE lines (systemd's EnvironmentFile= syntax) added to the environment the workers inherit, under the config's env; with -check, judged as the unit of `startup -env-file` gets them")
	f.sharedLog.define(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	f.command = fs.Args()
	if f.dashboardCeiling != "" && f.dashboardAddr == "" {
		return nil, fmt.Errorf("dashboard-ceiling: %q needs -dashboard HOST:PORT to show it on (say -dashboard 127.0.0.1:8090)", f.dashboardCeiling)
	}
	return f, nil
}

// loadApps reads -env-file and the configuration into the apps to run.
func (im *image) loadApps() error {
	f := im.flags
	if f.envFile != "" {
		var err error
		if im.fileEnv, err = readEnvFile(f.envFile); err != nil {
			return err
		}
	}
	im.path = f.configPath
	if im.path == "" {
		if _, err := os.Stat(defaultConfig); err == nil {
			im.path = defaultConfig
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program: %w", err)
	}
	im.exe, im.ours = exe, filepath.Join(filepath.Dir(exe), "worker")
	if im.specs, err = im.loadSpecs(); err != nil {
		return err
	}
	if im.agentAddr, err = agentAddress(f.agent, im.specs); err != nil {
		return err
	}
	if len(im.specs) == 1 && f.logPath == "" {
		f.logPath = im.specs[0].LogFile // the app's out_file: the whole log, as before
	}
	return nil
}

// loadSpecs reads what to run from the configuration and applies the command line's
// overrides: at start, and again for `reload --update-env` (fleet.updateEnv), so that
// the file read again compares with what runs field by field.
func (im *image) loadSpecs() ([]cluster.App, error) {
	specs, err := im.readSpecs()
	if err != nil {
		return nil, err
	}
	if err := im.applyOverrides(specs); err != nil {
		return nil, err
	}
	specs, warning, err := im.flags.sharedLog.withLogNode(specs, im.exe)
	if warning != "" {
		fmt.Fprintln(im.stderr, "supervisor: warning:", warning)
	}
	return specs, err
}

// readSpecs reads the configuration: one unnamed app, or an ecosystem file's apps (the
// one -only names).
func (im *image) readSpecs() ([]cluster.App, error) {
	f, path := im.flags, im.path
	var specs []cluster.App // what to run: one unnamed app, or an ecosystem file's apps
	isEco := path != "" && cluster.IsEcosystem(path)
	switch {
	case isEco:
		apps, err := cluster.LoadEcosystem(path, f.envName)
		if err != nil {
			return nil, err
		}
		specs = apps
	case f.envName != "":
		return nil, fmt.Errorf("env: %q applies to a PM2 ecosystem file, and -config %q is not one", f.envName, path)
	case f.only != "":
		return nil, fmt.Errorf("only: %q applies to a PM2 ecosystem file, and -config %q is not one", f.only, path)
	case path != "":
		c, err := cluster.LoadConfig(path)
		if err != nil {
			return nil, err
		}
		specs = []cluster.App{{Config: c}}
	default:
		specs = []cluster.App{{}}
	}
	if f.only != "" {
		i := slices.IndexFunc(specs, func(a cluster.App) bool { return a.Name == f.only })
		if i < 0 {
			var names []string
			for _, a := range specs {
				names = append(names, a.Name)
			}
			return nil, fmt.Errorf("only: %q: %s has no app of that name (its apps: %s)", f.only, path, strings.Join(names, ", "))
		}
		specs = specs[i : i+1]
	}
	return specs, nil
}

// applyOverrides applies -instances, -listen, -steering and the command after -- to the
// apps, then validates each.
func (im *image) applyOverrides(specs []cluster.App) error {
	f := im.flags
	// The command line's settings are one cluster's: with several apps they would apply
	// to all, which is never what a file of different apps means.
	overrides := map[string]bool{"instances": f.instances != "", "listen": f.listen != "", "steering": f.steer != "", "-- COMMAND": len(f.command) > 0}
	for _, name := range []string{"instances", "listen", "steering", "-- COMMAND"} {
		if overrides[name] && len(specs) > 1 {
			return fmt.Errorf("%s: applies to one app, and %s has %d: set it in the file, or pick one app with -only NAME", name, im.path, len(specs))
		}
	}
	for i := range specs {
		cfg := &specs[i].Config
		if f.instances != "" {
			n, err := cluster.ParseInstances(f.instances)
			if err != nil {
				return err
			}
			cfg.Instances = n
		}
		if f.listen != "" {
			cfg.Listen = f.listen
		}
		if f.steer != "" {
			cfg.Steering = f.steer
		}
		if len(f.command) > 0 {
			cfg.Command = f.command
		}
		if len(cfg.Command) == 0 {
			cfg.Command = []string{im.ours}
			// Our worker says ready once its database is open: online means serving. (A
			// program named by the configuration is waited for once one of its workers
			// has said ready, or from the start with wait_ready: true.)
			ready := true
			cfg.WaitReady = &ready
		}
		if err := cfg.Validate(); err != nil { // after the overrides: -listen on a fork app, say
			if len(specs) > 1 || specs[i].Name != "" {
				return fmt.Errorf("app %s: %w", specs[i].Name, err)
			}
			return err
		}
	}
	return nil
}

// logSettings parses -log-level, -log-max-size and -log-keep.
func (im *image) logSettings() error {
	f := im.flags
	level, err := zap.ParseAtomicLevel(f.logLevel)
	if err != nil {
		return fmt.Errorf("log-level: %w", err)
	}
	maxSize, err := cluster.ParseByteSize(f.logMaxSize)
	if err != nil {
		return fmt.Errorf("log-max-size: %w", err)
	}
	if f.logKeep < 0 || f.logKeep > 1000 {
		return fmt.Errorf("log-keep: %d is out of range: want 0 to 1000", f.logKeep)
	}
	im.level, im.rot = level, rotation{MaxSize: int64(maxSize), Keep: f.logKeep}
	return nil
}

// check is run -check: everything that can be judged without binding or starting
// anything, what an upgrade asks of the new binary before it gives the running image up.
func (im *image) check() error {
	if f := im.flags.logFormat; f != "json" && f != "console" && f != "auto" {
		return errLogFormat(f)
	}
	if err := checkSocketPath(im.flags.socket); err != nil {
		return err
	}
	// What would have every worker die at start and be restarted until errored (under
	// systemd: a unit that crash-loops): startcheck.go.
	if err := checkLaunch(im.specs, im.getenv, im.fileEnv, im.ours, im.path); err != nil {
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
