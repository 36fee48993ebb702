package cli

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/detach"
)

// Start is `supervisor start`: FILE|SCRIPT [run's flags] [-- ARGS] starts a supervisor in
// the background, as `pm2 start` does, and returns once its apps are online
// (internal/detach); APP starts a stopped app of the running supervisor (`pm2 start
// NAME`).
func Start(ctx context.Context, env Env, args []string) error {
	if len(args) > 0 && slices.Contains([]string{"-h", "-help", "--help"}, args[0]) {
		fmt.Fprintln(env.Stdout, startUsage)
		return nil
	}
	args = detach.FileFirst(args) // `start -i 2 app.js`, as pm2 takes it
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		// No file named: the one here, as `pm2 start` finds ecosystem.config.js.
		file, ok := detach.DefaultFile()
		if !ok {
			fmt.Fprintln(env.Stderr, startUsage)
			return fmt.Errorf("start: no FILE given and none of %s here: name the file, the script, or a stopped APP", strings.Join(detach.DefaultStartFiles, ", "))
		}
		args = append([]string{file}, args...)
	}
	target, rest := args[0], args[1:]
	if fi, err := os.Stat(target); err == nil && fi.Mode().IsRegular() {
		runArgs, note, err := detach.RunArgs(target, rest, env.Getenv)
		if err != nil {
			return err
		}
		if note != "" {
			fmt.Fprintln(env.Stdout, note)
		}
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("start: find this program: %w", err)
		}
		if done, err := startOnRunning(ctx, env, runArgs); done || err != nil {
			return err
		}
		return detach.Start(ctx, detach.Request{RunArgs: runArgs, Binary: exe, Getenv: env.Getenv, Stdout: env.Stdout})
	}
	if strings.ContainsAny(target, "/.") {
		return fmt.Errorf("start: %q: no such file (and not an app's name)", target)
	}
	return startApp(ctx, env, args)
}

// startApp is `supervisor start APP`: a stopped app of the running supervisor again.
func startApp(ctx context.Context, env Env, args []string) error {
	fs := flags(env, "start")
	socket := socketFlag(fs, env)
	pos, c, err := parseClient(fs, socket, env, "start", args)
	if err != nil {
		return err
	}
	app, err := oneApp("start", pos)
	if err != nil {
		return err
	}
	if err := c.Start(ctx, app, false); err != nil {
		return prefixed("start", err)
	}
	fmt.Fprintln(env.Stdout, "started")
	return printStatus(ctx, c, env)
}

const startUsage = `usage:
  supervisor start [FILE] [run's flags]          (an ecosystem file or our YAML, in the background;
                                                 default: ./ecosystem.config.js, ..., configs/cluster.yaml)
  supervisor start SCRIPT [run's flags] [-- ARGS] (app.js: node SCRIPT; another executable: itself;
                                                 -i N is -instances N, as pm2's; PORT in the
                                                 environment: app.js is served on 0.0.0.0:PORT)
  supervisor start APP [-socket PATH]            (a stopped app of the running supervisor)
The background supervisor is 'supervisor run' detached from the terminal (its own session,
stdin /dev/null), its log in DIR/supervisor.log and its workers' in DIR/APP-N.log, DIR being
the control socket's path without .sock and with -logs (supervisor kill stops it).
It runs 'supervisor run -check' with the same flags first (what that refuses, start refuses,
starting nothing), then waits until every worker is online, or an app's workers all exit at
start (3 restarts each, none online: it says so, and the supervisor runs on).`

// startOnRunning handles `start FILE` where a supervisor answers on the socket already:
// one that runs FILE starts its stopped and deleted apps (pm2 start ecosystem.config.js
// after pm2 stop or delete); one left with no app (every app deleted) is stopped, and the
// start goes on (done false); any other is refused by detach.Start.
func startOnRunning(ctx context.Context, env Env, runArgs []string) (done bool, err error) {
	socket, ok := detach.FlagValue(runArgs, "socket")
	if !ok {
		socket = control.DefaultSocket(env.Getenv)
	}
	c := control.NewClient(socket)
	st, err := c.StatusWithin(ctx, 2*time.Second)
	if err != nil {
		return false, nil // none runs: start it
	}
	if cfg, ok := detach.FlagValue(runArgs, "config"); ok && st.Config != "" && cfg == st.Config {
		if err := c.Start(ctx, "all", true); err != nil {
			return true, prefixed("start", err)
		}
		fmt.Fprintf(env.Stdout, "started: the supervisor at %s runs %s: its stopped and deleted apps started again\n", socket, cfg)
		return true, printStatus(ctx, c, env)
	}
	if len(st.Apps) > 0 {
		return false, nil // detach.Start refuses, naming it
	}
	pid, err := c.StopSupervisor(ctx)
	if err != nil {
		return true, fmt.Errorf("start: the supervisor at %s has no app left: stop it: %w", socket, err)
	}
	if err := waitGone(ctx, socket, pid, time.Minute); err != nil {
		return true, fmt.Errorf("start: the supervisor at %s had no app left, and %w", socket, err)
	}
	fmt.Fprintf(env.Stdout, "the supervisor at %s had no app left (every one deleted): replaced by one running this\n", socket)
	return false, nil
}
