// Package daemon is `supervisor run`: the supervisor itself, in the foreground (fit for
// systemd's Type=notify), running the apps of its configuration as clusters
// (internal/registry, internal/cluster) and serving its control socket
// (internal/control's protocol), its agent, metrics and dashboard.
//
// Config is built once, by the command line (cmd/supervisor/cli); Run runs it until a
// signal, a stop command or the context's end, and Check judges it without starting
// anything (`run -check`, which an upgrade asks of the new binary before it gives the
// running image up).
//
// Files: daemon.go the Config and the entry points; image.go the start, a sequence of named
// steps over the state they share (image), each handing what it opens to a cleanup stack;
// signals.go the loop on signals and the control socket's stop and upgrade requests;
// control.go who may connect to the control socket (its peer checks); routes.go its
// routes; upgrade.go the upgrade in place and its way back; metrics.go the Prometheus
// collector; dump.go what `save` writes.
package daemon

import (
	"context"
	"fmt"
	"io"

	"github.com/onehost/onehost/internal/applog"
	"github.com/onehost/onehost/internal/appspec"
	"github.com/onehost/onehost/internal/control"
)

// Config is one `supervisor run`. Its zero value, plus Socket and Binary, runs our worker
// with the defaults.
type Config struct {
	// Args is run's command line after "run", as given: what `save` records, and what an
	// upgrade's new image and its way back are started with.
	Args []string
	// Getenv and Environ are the process's environment (the workers inherit Environ, the
	// env file's variables over it). Default: none.
	Getenv  func(string) string
	Environ []string
	// Stderr receives the log when LogFile is "", and what comes before the log exists.
	Stderr io.Writer

	// Apps is where the apps come from: the configuration file and the command line's
	// overrides.
	Apps appspec.Source
	// EnvFile is -env-file: KEY=VALUE lines (systemd's EnvironmentFile= syntax) the workers
	// inherit, under the configuration's env.
	EnvFile string
	// Binary is this supervisor's own executable, which an upgrade re-executes by default.
	Binary string
	// UpgradeBinaries are the other binaries an upgrade may execute (absolute paths).
	UpgradeBinaries []string
	// Socket is the control socket's path (control.DefaultSocket's when given none).
	Socket string
	// SharePort joins a port another supervisor serves already.
	SharePort bool

	// LogLevel is debug, info (the default), warn or error; LogFile the merged log's file
	// ("" stderr); LogFormat console (the default) or json ("auto" is console); LogDir the
	// per-worker files' directory ("" none); Rotation their rotation.
	LogLevel, LogFile, LogFormat, LogDir string
	Rotation                             applog.Rotation

	// Agent answers HAProxy's agent-check at HOST:PORT (the configuration's agent: when "").
	Agent string
	// Metrics serves Prometheus's /metrics at HOST:PORT, Dashboard the live page; ""
	// none. DashboardCeiling is the ceiling sweep the page shows ("" its default, "-" none).
	Metrics, Dashboard, DashboardCeiling string
	// AllowedHosts are the names besides IP addresses, localhost and their own the TCP pages
	// answer to.
	AllowedHosts []string
}

// Run runs the supervisor until it stops. An upgrade's new image that fails before it
// has taken the cluster over gives the previous binary back (upgrade.go).
func Run(ctx context.Context, cfg Config) error {
	fb := takeFallback(cfg)
	return fb.restore(runImage(ctx, cfg, fb))
}

// Check judges cfg without binding or starting anything: the flags, the configuration and
// the programs, what would have every worker die at start.
func Check(cfg Config) error {
	im, err := newImage(cfg, nil)
	if err != nil {
		return err
	}
	defer im.close()
	return im.check()
}

// withDefaults fills in what cfg leaves to its zero value.
func (cfg Config) withDefaults() Config {
	if cfg.Getenv == nil {
		cfg.Getenv = func(string) string { return "" }
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	if cfg.Socket == "" {
		cfg.Socket = control.DefaultSocket(cfg.Getenv)
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "info"
	}
	if cfg.LogFormat == "" {
		cfg.LogFormat = "console"
	}
	return cfg
}

// errLogFormat is -log-format's refusal.
func errLogFormat(v string) error {
	return fmt.Errorf("log-format: %q: want console (the default: readable lines, the apps' as ID|APP | line) or json (one JSON object per line, for a collector)", v)
}
