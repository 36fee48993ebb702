// Command supervisor runs the worker as a prefork cluster, as PM2's cluster mode does for
// Node: one worker process per CPU, each on its own SO_REUSEPORT socket that the
// supervisor owns, with crash restarts, zero-downtime rolling reloads, scaling and status.
//
// Usage:
//
//	supervisor run [-config FILE [-env NAME] [-only APP]] [-instances max|-1|N] [-listen HOST:PORT] [-steering MODE] [-socket PATH] [-share-port] [-- COMMAND [ARGS...]]
//	supervisor start FILE|SCRIPT [run's flags] | start APP
//	supervisor status|ls|list [APP] [-json] [-socket PATH]
//	supervisor jlist | describe APP | delete APP|all | kill | flush [APP] | save | resurrect
//	supervisor reload [APP] [-update-env] [-socket PATH]
//	supervisor restart [APP] [-update-env] [-socket PATH]
//	supervisor scale [APP] N|+N|-N [-socket PATH]
//	supervisor stop [APP|all] [-socket PATH]
//	supervisor logs [APP] [ID] [-f] [-n|--lines 15] [--raw|--json] [--timestamp [FORMAT]] [--err|--out] [-socket PATH]
//	supervisor upgrade [-binary PATH] [-socket PATH]
//	supervisor drain [-quiet 2s] [-timeout 60s] [-socket PATH]
//	supervisor ready [-socket PATH]
//	supervisor monit [-interval 1s] [-once] [-socket PATH]
//	supervisor startup [-config FILE] [-env-file FILE] [-name NAME] [-user USER] [-dir DIR] [-env NAME]
//
// An ecosystem file's apps each run as a cluster of their own (PM2's exec_mode fork ones as
// plain processes without a socket), and the other commands take an app's name, as pm2's
// do: without one they act on every app (scale needs one when there are several).
//
// `start FILE|SCRIPT` is `run` in the background, as `pm2 start` (pm2.go): detached, its
// logs in files, returning once the apps are online; `kill` stops it, `save` and
// `resurrect` keep and restore what ran.
// `run` stays in the foreground (fit for systemd: Type=notify). Without a command it runs
// the `worker` binary beside its own executable; its environment passes to the workers.
// Any program that takes a socket at fd 3 runs too (gunicorn, node:http, uvicorn --fd 3),
// ready when it says so over our ipc, sd_notify or Node's process.send. The other
// commands talk to it over its control socket: plain HTTP on a unix socket of mode 0600
// (`curl --unix-socket PATH http://x/status`), where the supervisor's own workers may
// only read. `logs` prints the last lines the supervisor
// keeps (its own and its workers', or one slot's) and with -f follows them, as `pm2 logs`:
// an app's lines as `ID|APP | line`, in the supervisor's log too (logprint.go).
// `run -agent HOST:PORT` answers HAProxy's agent-check for the host (up with the share of
// its workers online, drain, down); `drain` takes the host out of its balancer (the agent
// says drain, the workers close kept-alive connections after their next response) and
// returns once no request came for a while, `ready` brings it back.
// `monit` is a live view of the workers and the host on the terminal, as `pm2 monit`;
// `run -dashboard HOST:PORT` serves the same figures as a web page of live charts.
//
// Signals to `run`: HUP reloads, TERM or INT stops gracefully (a second one stops at once),
// TTIN and TTOU add or remove one worker, USR1 reopens the -log-file (for logrotate), USR2
// upgrades in place to the binary at the path it was started from.
//
// The supervisor's own worker outlives the supervisor: killed with -9, or re-executing
// itself for `upgrade`, the workers serve on and the next supervisor on the same control
// socket adopts them (their sockets and queues too); with none within adopt_wait (30 s)
// they drain and exit. Other programs die with the supervisor.
//
// `run` is runImage (serve.go), a sequence of named steps over the state they share;
// runconfig.go holds its flags and the apps they and the configuration make (and -check),
// signals.go its last step, the loop on signals and the control socket's requests.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/onehost/onehost/internal/buildinfo"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "supervisor:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  supervisor run [-config FILE [-env NAME] [-only APP]] [-instances max|-1|N]
                 [-listen HOST:PORT] [-steering auto|hash|round-robin] [-socket PATH]
                 [-log-file PATH] [-log-dir DIR] [-log-level LEVEL] [-log-format console|json]
                 [-metrics HOST:PORT] [-dashboard HOST:PORT] [-allowed-hosts NAMES]
                 [-upgrade-binary PATH] [-agent HOST:PORT] [-- COMMAND [ARGS...]]
                 (FILE: our YAML, or a PM2 ecosystem file: .config.js, JSON or YAML,
                 every app of it a cluster of its own)
  supervisor start FILE|SCRIPT [run's flags] [-- ARGS]
                 (run in the background, as pm2 start: detached, its logs in files beside
                 the control socket; returns once the apps are online)
  supervisor start APP [-socket PATH]        (a stopped app again)
  supervisor status|ls|list [APP] [-json] [-socket PATH]
  supervisor jlist [-socket PATH]            (status -json)
  supervisor describe APP [-json] [-socket PATH]
                 (one app: cwd, command, env names, restarts, uptime, each worker's pid)
  supervisor reload [APP] [-update-env] [-socket PATH]
                 (rolling, no request lost; fork apps restart; -update-env: the config
                 file's env read again and rolled in, as pm2 --update-env)
  supervisor restart [APP] [-update-env] [-socket PATH]
                 (stop then start each worker, as pm2 restart)
  supervisor scale [APP] N|+N|-N [-socket PATH]
  supervisor stop APP|all [-socket PATH]     (listed as stopped, the supervisor stays: pm2 stop)
  supervisor stop [-socket PATH]             (no app: the whole supervisor, as kill)
  supervisor kill [-socket PATH]             (the whole supervisor and every app: pm2 kill)
  supervisor delete APP|all [-socket PATH]   (stopped and out of the list: pm2 delete)
  supervisor flush [APP] [-socket PATH]      (empty the log files: pm2 flush)
  supervisor save [-file PATH] [-socket PATH]
                 (the running apps and their scale to a dump beside the socket: pm2 save)
  supervisor resurrect [-file PATH] [-socket PATH]
                 (start again from it, in the background: pm2 resurrect)
  supervisor logs [APP] [ID] [-f] [-n|--lines 15] [--raw|--json] [--timestamp [FORMAT]]
                 [--err|--out] [-socket PATH]
                 (as pm2 logs: the apps' lines as ID|APP | line between the supervisor's
                 events; --raw the lines as written, err ones to stderr; --json one object
                 each: message, timestamp, type, process_id, app_name; --timestamp the time
                 in front, in day.js tokens, default YYYY-MM-DD-HH:mm:ss; an ID or APP that
                 does not exist is an error naming those that do)
  supervisor upgrade [-binary PATH] [-socket PATH]
                 (re-executes the supervisor in place, or kill -USR2: the workers serve on;
                 PATH: the running one's own, or one run -upgrade-binary names)
  supervisor drain [-quiet 2s] [-timeout 60s] [-socket PATH]
                 (out of the balancer: the -agent answers drain, the workers close
                 kept-alive connections; returns once no request came for -quiet)
  supervisor ready [-socket PATH]            (back in: the agent answers up again)
  supervisor monit [-interval 1s] [-once] [-socket PATH]
  supervisor startup [-config FILE] [-env-file FILE] [-name NAME] [-user USER] [-dir DIR] [-env NAME]
                 (prints a systemd unit for this configuration run from here, as pm2 startup;
                 the commands without -socket find its /run/NAME/supervisor.sock)
  supervisor version|--version
  (run -share-port: join a port another supervisor serves; refused without it)`

// run is the whole program, so tests can call it in-process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return fmt.Errorf("no command given")
	}
	err := runCommand(ctx, args, getenv, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // `supervisor CMD -h` printed its flags: asked for, not an error
	}
	return err
}

func runCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	switch args[0] {
	case "run":
		return runCluster(ctx, args[1:], getenv, stderr)
	case "status", "reload", "restart", "scale", "stop", "logs", "upgrade", "delete", "describe", "flush":
		return runClient(ctx, args[0], args[1:], getenv, stdout, stderr)
	case "ls", "list": // pm2's names for status
		return runClient(ctx, "status", args[1:], getenv, stdout, stderr)
	case "jlist":
		return runClient(ctx, "status", append(slices.Clone(args[1:]), "-json"), getenv, stdout, stderr)
	case "start":
		return runStart(ctx, args[1:], getenv, stdout, stderr)
	case "kill":
		return runKill(ctx, args[1:], getenv, stdout, stderr)
	case "save":
		return runSave(ctx, args[1:], getenv, stdout, stderr)
	case "resurrect":
		return runResurrect(ctx, args[1:], getenv, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, buildinfo.String("supervisor"))
		return nil
	case "drain", "ready":
		return runDrain(ctx, args[0], args[1:], getenv, stdout, stderr)
	case "monit":
		return runMonit(ctx, args[1:], getenv, stdout, stderr)
	case "startup":
		return runStartup(args[1:], getenv, stdout, stderr)
	case listenPIDShim: // not in the usage: the supervisor's own, between it and a worker
		return execWithListenPID(args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	if near := nearestCommand(args[0]); near != "" { // a typo: the hint, not the whole usage
		return fmt.Errorf("unknown command %q; did you mean %q? (supervisor -h lists them)", args[0], near)
	}
	fmt.Fprintln(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}
