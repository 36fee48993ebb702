package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/onehost/onehost/internal/applog"
	"github.com/onehost/onehost/internal/appspec"
	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/daemon"
	"github.com/onehost/onehost/internal/monit"
	"github.com/onehost/onehost/internal/pageserver"
)

// Run is `supervisor run [flags] [-- COMMAND [ARGS...]]`: the supervisor in the foreground
// (internal/daemon), or with -check only its judgement of the flags, the configuration and
// the programs.
func Run(ctx context.Context, env Env, args []string) error {
	cfg, check, err := runConfig(env, args)
	if err != nil {
		return err
	}
	if check {
		return daemon.Check(cfg)
	}
	return daemon.Run(ctx, cfg)
}

// runConfig reads run's flags into the daemon's Config, once.
func runConfig(env Env, args []string) (daemon.Config, bool, error) {
	cfg := daemon.Config{Args: args, Getenv: env.Getenv, Environ: env.Environ, Stderr: env.Stderr}
	src := &cfg.Apps
	var check bool
	var logMaxSize string
	var logKeep int
	var hosts pageserver.AllowedHosts
	var upgradeTo upgradeBinaries
	fs := flags(env, "run")
	fs.StringVar(&src.Path, "config", "", "YAML configuration (default "+defaultConfig+" when it exists), or a PM2 ecosystem file (JSON or YAML with apps: [...])")
	fs.StringVar(&src.EnvName, "env", "", "with an ecosystem file: merge the app's env_NAME over its env (pm2 start --env NAME)")
	fs.BoolVar(&check, "check", false, "check the flags, the configuration and the programs, then exit without starting (upgrade runs the new binary so first)")
	fs.StringVar(&src.Only, "only", "", "with an ecosystem file: run only the app of this name (pm2 start --only NAME)")
	fs.StringVar(&src.Instances, "instances", "", "max, -1 (all CPUs but one) or N; overrides the config")
	fs.StringVar(&src.Listen, "listen", "", "HOST:PORT to serve; overrides the config")
	fs.StringVar(&src.Steering, "steering", "", "auto, hash or round-robin: which worker gets each new connection; overrides the config")
	fs.StringVar(&src.Name, "name", "", "the app's name (pm2 start --name): in the status, its log files' names and the commands that take an app; one app only")
	fs.StringVar(&cfg.Socket, "socket", control.DefaultSocket(env.Getenv), "control socket path")
	fs.StringVar(&cfg.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&cfg.LogFile, "log-file", "", "append the merged log (supervisor and workers) to this file instead of stderr; USR1 reopens it")
	fs.StringVar(&cfg.Metrics, "metrics", "", "also serve Prometheus metrics at http://HOST:PORT/metrics (always on the control socket's /metrics)")
	fs.StringVar(&cfg.Dashboard, "dashboard", "", "serve a live dashboard page at http://HOST:PORT/ (off by default; no login: bind it to a trusted network)")
	fs.StringVar(&cfg.DashboardCeiling, "dashboard-ceiling", "", "with -dashboard: show the ceiling sweep writing results in DIR, and its plots (default "+monit.DefaultCeilingDir+" when it exists; \"-\" none)")
	fs.StringVar(&logMaxSize, "log-max-size", "10M", "rotate -log-file and -log-dir files past this size (0: never; logrotate with USR1 instead)")
	fs.IntVar(&logKeep, "log-keep", 30, "rotated files kept per log (PATH.1 the newest)")
	fs.StringVar(&cfg.LogFormat, "log-format", "console", "console: the supervisor's events one readable line each, the apps' output as PM2 prints it (ID|APP | line), on a terminal or not; json: one JSON object per line for a collector (the apps' lines as pm2 logs --json writes them); auto: console (kept for older units)")
	fs.Var(&hosts, "allowed-hosts", "comma-separated host names -metrics and -dashboard answer to besides IP addresses, localhost and their own -metrics/-dashboard host (others get 421: DNS rebinding)")
	fs.Var(&upgradeTo, "upgrade-binary", "a binary other than this one's own path that `upgrade -binary PATH` may re-execute (absolute; repeat for more); "+
		"either must be writable by nobody but its owner, this user or root")
	fs.StringVar(&cfg.Agent, "agent", "", "answer HAProxy's agent-check at HOST:PORT (agent-check agent-port PORT; this project uses 9777): up N% with N the share of workers online, drain while drained, down while stopping or with none serving, ready only on its way out of its own drain; overrides the config's agent")
	fs.BoolVar(&cfg.SharePort, "share-port", false, "join a port another process (another supervisor) listens on already, sharing its connections (SO_REUSEPORT); without it such a port is refused")
	fs.StringVar(&cfg.LogDir, "log-dir", "", "also append each worker's own output to DIR/APP-SLOT.log (as PM2's per-instance logs); USR1 reopens them")
	fs.StringVar(&src.Fleet.Hosts, "fleet", "", "this host is one of a fleet sharing one database: every host NAME=ADDR[:PORT],... (the same list on every host; the log's ports default to 4222 and 6222, ADDR:PORT sets the client port and PORT+2000 the route port); runs this host's log node as the app "+appspec.LogNodeApp)
	fs.StringVar(&src.Fleet.Self, "fleet-self", "", "with -fleet: this host's name in the list")
	fs.StringVar(&src.Fleet.Dir, "fleet-dir", "", "with -fleet: the directory of this host's copy of the write log")
	fs.StringVar(&src.Fleet.Sync, "fleet-sync", "", "with -fleet: always = fsync every write on every log node before it is acknowledged (default: the log's own policy, every 2 minutes)")
	fs.StringVar(&cfg.EnvFile, "env-file", "", "KEY=VALUE lines (systemd's EnvironmentFile= syntax) added to the environment the workers inherit, under the config's env; with -check, judged as the unit of `startup -env-file` gets them")
	if err := fs.Parse(args); err != nil {
		return cfg, false, err
	}
	src.Command = fs.Args()
	if cfg.DashboardCeiling != "" && cfg.Dashboard == "" {
		return cfg, false, fmt.Errorf("dashboard-ceiling: %q needs -dashboard HOST:PORT to show it on (say -dashboard 127.0.0.1:8090)", cfg.DashboardCeiling)
	}
	maxSize, err := cluster.ParseByteSize(logMaxSize)
	if err != nil {
		return cfg, false, fmt.Errorf("log-max-size: %w", err)
	}
	if logKeep < 0 || logKeep > 1000 {
		return cfg, false, fmt.Errorf("log-keep: %d is out of range: want 0 to 1000", logKeep)
	}
	cfg.Rotation = applog.Rotation{MaxSize: int64(maxSize), Keep: logKeep}
	cfg.AllowedHosts, cfg.UpgradeBinaries = hosts, upgradeTo
	if src.Path == "" {
		if _, err := os.Stat(defaultConfig); err == nil {
			src.Path = defaultConfig
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return cfg, false, fmt.Errorf("find this program: %w", err)
	}
	cfg.Binary, src.Ours = exe, filepath.Join(filepath.Dir(exe), "worker")
	src.LogNode = filepath.Join(filepath.Dir(exe), "lognode")
	return cfg, check, nil
}

// upgradeBinaries is -upgrade-binary, given once per binary.
type upgradeBinaries []string

func (l *upgradeBinaries) String() string { return strings.Join(*l, ",") }

func (l *upgradeBinaries) Set(v string) error {
	if !filepath.IsAbs(v) {
		return fmt.Errorf("%q: want an absolute path (the supervisor's directory may not be the one it runs in)", v)
	}
	*l = append(*l, filepath.Clean(v))
	return nil
}
