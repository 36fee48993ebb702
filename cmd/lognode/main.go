// Command lognode runs this host's node of the fleet's write log (internal/lognode): a NATS
// server with JetStream, clustered with the other hosts' nodes, which creates the log's
// stream once. `supervisor run -fleet ...` runs it as one more supervised program (a fork
// app named lognode) and hands the same settings to it and to the workers in their
// environment; by hand:
//
//	lognode -fleet h1=10.0.0.1,h2=10.0.0.2,h3=10.0.0.3 -fleet-self h1 -fleet-dir /var/lib/onehost/log [-fleet-sync always]
//
// (each flag defaults to its environment variable: ONEHOST_FLEET, ONEHOST_FLEET_SELF,
// ONEHOST_FLEET_DIR, ONEHOST_FLEET_SYNC).
//
// Signals: TERM or INT is the planned stop: the node hands away the groups it leads (the
// stream's leadership among them), waits for another node to take each, then exits; a
// second signal exits at once. It logs JSON lines to stderr, {"msg":"serving","addr":...}
// once it takes clients.
//
// Across its supervisor's upgrade or kill -9 it serves on (takeover.go): the node the next
// supervisor starts stops it the planned way first.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/onehost/onehost/internal/fleetspec"
	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/lognode"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "lognode:", err)
		os.Exit(1)
	}
}

// run starts the node and stops it when ctx ends (the first signal); a second signal
// during the stop exits the process at once (main's default handling is back by then).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	spec, level, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return fmt.Errorf("log-level %q: want debug, info, warn or error", level)
	}
	log := zap.New(zapcore.NewCore(ipc.NewLogEncoder(ipc.LogJSON), zapcore.Lock(zapcore.AddSync(stderr)), lvl)).
		With(zap.Int("pid", os.Getpid()))
	defer log.Sync()
	if w := spec.Warning(); w != "" {
		log.Warn(w)
	}
	if err := os.MkdirAll(spec.Dir, 0o700); err != nil {
		return fmt.Errorf("fleet-dir: %w", err)
	}
	release, err := takeOver(spec.Dir, 15*time.Second, log)
	if err != nil {
		return err
	}
	defer release()
	node, err := lognode.Start(lognode.Config{Spec: spec, Logger: log})
	if err != nil {
		return err
	}
	log.Info("serving", zap.String("addr", node.ClientURL()))
	<-ctx.Done()
	log.Info("stopping: stepping down first")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := node.Stop(sctx); err != nil {
		log.Warn("step-down incomplete", zap.Error(err))
	}
	return nil
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (fleetspec.Spec, string, error) {
	fs := flag.NewFlagSet("lognode", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hosts := fs.String("fleet", getenv(fleetspec.EnvHosts), "the fleet's hosts, NAME=ADDR[:PORT],... the same list on every host (env "+fleetspec.EnvHosts+")")
	self := fs.String("fleet-self", getenv(fleetspec.EnvSelf), "this host's name in -fleet (env "+fleetspec.EnvSelf+")")
	dir := fs.String("fleet-dir", getenv(fleetspec.EnvDir), "directory of this host's copy of the log (env "+fleetspec.EnvDir+")")
	sync := fs.String("fleet-sync", getenv(fleetspec.EnvSync), "always: fsync each write before acknowledging it (env "+fleetspec.EnvSync+"; default: JetStream's, every 2 minutes)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return fleetspec.Spec{}, "", err
	}
	if fs.NArg() > 0 {
		return fleetspec.Spec{}, "", fmt.Errorf("unexpected argument %q: lognode takes flags only", fs.Arg(0))
	}
	spec, err := fleetspec.Parse(*hosts, *self, *dir, *sync)
	return spec, *level, err
}
