// Command supervisor runs programs as prefork clusters, as PM2's cluster mode does for
// Node: one worker process per CPU, each on its own SO_REUSEPORT socket that the
// supervisor owns, with crash restarts, zero-downtime rolling reloads, scaling and status.
// Without a program it runs the `worker` binary beside it (the feed API).
//
// `supervisor run` is the supervisor (internal/daemon), in the foreground; `start` runs it
// in the background, as `pm2 start`; every other command talks to a running one over its
// control socket (internal/control), as pm2's do. The commands are the table below, each
// a file of package cli; `supervisor -h` prints their usage.
//
// Signals to `run`: HUP reloads, TERM or INT stops gracefully (a second one stops at once),
// TTIN and TTOU add or remove one worker, USR1 reopens the log files (for logrotate), USR2
// upgrades in place to the binary at the path it was started from.
//
// How it is built, and which package owns what: docs/supervisor.md, "How it is built".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/onehost/onehost/cmd/supervisor/cli"
	"github.com/onehost/onehost/internal/buildinfo"
	"github.com/onehost/onehost/internal/systemd"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "supervisor:", err)
		os.Exit(1)
	}
}

// unitRunDir is where systemd puts a unit's RuntimeDirectory= (cli.Env.UnitRunDir). A
// variable for the tests.
var unitRunDir = "/run"

// command is one line of the table: a name, the names pm2 gives it too, what `-h` prints
// of it, and what runs it.
type command struct {
	name    string
	aliases []string
	usage   string
	run     func(ctx context.Context, env cli.Env, args []string) error
}

// commands are the supervisor's commands, in the order `-h` lists them. A new command is a
// file of package cli and a line here.
var commands = []command{
	{"run", nil, `run [-config FILE [-env NAME] [-only APP]] [-instances max|-1|N]
                 [-listen HOST:PORT] [-steering auto|hash|round-robin] [-socket PATH]
                 [-log-file PATH] [-log-dir DIR] [-log-level LEVEL] [-log-format console|json]
                 [-metrics HOST:PORT] [-dashboard HOST:PORT] [-allowed-hosts NAMES]
                 [-upgrade-binary PATH] [-agent HOST:PORT] [-check] [-- COMMAND [ARGS...]]
                 (FILE: our YAML, or a PM2 ecosystem file: .config.js, JSON or YAML,
                 every app of it a cluster of its own; -share-port: join a port another
                 supervisor serves, refused without it)`, cli.Run},
	{"start", nil, `start FILE|SCRIPT [run's flags] [-- ARGS]
                 (run in the background, as pm2 start: detached, its logs in files beside
                 the control socket; returns once the apps are online)
  supervisor start APP [-socket PATH]        (a stopped app again)`, cli.Start},
	{"status", []string{"ls", "list"}, `status|ls|list [APP] [-json] [-socket PATH]`, cli.Status},
	{"jlist", nil, `jlist [-socket PATH]            (status -json)`, func(ctx context.Context, env cli.Env, args []string) error {
		return cli.Status(ctx, env, append(slices.Clone(args), "-json"))
	}},
	{"describe", nil, `describe APP [-json] [-socket PATH]
                 (one app: cwd, command, env names, restarts, uptime, each worker's pid)`, cli.Describe},
	{"reload", nil, `reload [APP] [-update-env] [-socket PATH]
                 (rolling, no request lost; fork apps restart; -update-env: the config
                 file's env read again and rolled in, as pm2 --update-env)`, cli.Reload},
	{"restart", nil, `restart [APP] [-update-env] [-socket PATH]
                 (stop then start each worker, as pm2 restart)`, cli.Restart},
	{"scale", nil, `scale [APP] N|+N|-N [-socket PATH]`, cli.Scale},
	{"stop", nil, `stop APP|all [-socket PATH]     (listed as stopped, the supervisor stays: pm2 stop)
  supervisor stop [-socket PATH]             (no app: the whole supervisor, as kill)`, cli.Stop},
	{"kill", nil, `kill [-socket PATH]             (the whole supervisor and every app: pm2 kill)`, cli.Kill},
	{"delete", nil, `delete APP|all [-socket PATH]   (stopped and out of the list: pm2 delete)`, cli.Delete},
	{"flush", nil, `flush [APP] [-socket PATH]      (empty the log files: pm2 flush)`, cli.Flush},
	{"save", nil, `save [-file PATH] [-socket PATH]
                 (the running apps and their scale to a dump beside the socket: pm2 save)`, cli.Save},
	{"resurrect", nil, `resurrect [-file PATH] [-socket PATH]
                 (start again from it, in the background: pm2 resurrect)`, cli.Resurrect},
	{"logs", nil, `logs [APP] [ID] [-f] [-n|--lines 15] [--raw|--json] [--timestamp [FORMAT]]
                 [--err|--out] [-socket PATH]
                 (as pm2 logs: the apps' lines as ID|APP | line between the supervisor's
                 events; --raw the lines as written, err ones to stderr; --json one object
                 each: message, timestamp, type, process_id, app_name; --timestamp the time
                 in front, in day.js tokens, default YYYY-MM-DD-HH:mm:ss; an ID or APP that
                 does not exist is an error naming those that do)`, cli.Logs},
	{"upgrade", nil, `upgrade [-binary PATH] [-socket PATH]
                 (re-executes the supervisor in place, or kill -USR2: the workers serve on;
                 PATH: the running one's own, or one run -upgrade-binary names)`, cli.Upgrade},
	{"drain", nil, `drain [-quiet 2s] [-timeout 60s] [-socket PATH]
                 (out of the balancer: the -agent answers drain, the workers close
                 kept-alive connections; returns once no request came for -quiet)`, cli.Drain},
	{"ready", nil, `ready [-socket PATH]            (back in: the agent answers up again)`, cli.Ready},
	{"monit", nil, `monit [-interval 1s] [-once] [-socket PATH]`, cli.Monit},
	{"startup", nil, `startup [-config FILE] [-env-file FILE] [-name NAME] [-user USER] [-dir DIR] [-env NAME]
                 (prints a systemd unit for this configuration run from here, as pm2 startup;
                 the commands without -socket find its /run/NAME/supervisor.sock)`, cli.Startup},
	{"version", []string{"--version", "-version"}, `version|--version`, func(_ context.Context, env cli.Env, _ []string) error {
		fmt.Fprintln(env.Stdout, buildinfo.String("supervisor"))
		return nil
	}},
}

// usage is the table's usage lines.
func usage() string {
	var b strings.Builder
	b.WriteString("usage:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  supervisor %s\n", c.usage)
	}
	return strings.TrimRight(b.String(), "\n")
}

// run is the whole program, so tests can call it in-process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage())
		return fmt.Errorf("no command given")
	}
	env := cli.Env{Getenv: getenv, Environ: os.Environ(), Stdout: stdout, Stderr: stderr, UnitRunDir: unitRunDir}
	err := dispatch(ctx, env, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil // `supervisor CMD -h` printed its flags: asked for, not an error
	}
	return err
}

func dispatch(ctx context.Context, env cli.Env, args []string) error {
	name := args[0]
	switch name {
	case systemd.ListenPIDShim: // not in the usage: the supervisor's own, between it and a worker
		return systemd.ExecWithListenPID(args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(env.Stdout, usage())
		return nil
	}
	for _, c := range commands {
		if c.name == name || slices.Contains(c.aliases, name) {
			return c.run(ctx, env, args[1:])
		}
	}
	if near := nearestCommand(name); near != "" { // a typo: the hint, not the whole usage
		return fmt.Errorf("unknown command %q; did you mean %q? (supervisor -h lists them)", name, near)
	}
	fmt.Fprintln(env.Stderr, usage())
	return fmt.Errorf("unknown command %q", name)
}

// nearestCommand is the command closest to s (its leading dashes aside: --versoin) by
// edit distance, "" when none is close: more than a third of its letters, at least 1,
// would change.
func nearestCommand(s string) string {
	s = strings.ToLower(strings.TrimLeft(s, "-"))
	best, bestD := "", max(1, len(s)/3)+1
	for _, c := range commands {
		for _, n := range append([]string{c.name}, c.aliases...) {
			if d := editDistance(s, strings.TrimLeft(n, "-")); d < bestD {
				best, bestD = n, d
			}
		}
	}
	if d := editDistance(s, "help"); d < bestD {
		best = "help"
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, a transposition of two
// neighbours counting one (staus, stauts).
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
