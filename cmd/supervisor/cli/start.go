package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	args = fileFirst(args) // `start -i 2 app.js`, as pm2 takes it
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		// No file named: the one here, as `pm2 start` finds ecosystem.config.js.
		i := slices.IndexFunc(defaultStartFiles, func(p string) bool { _, err := os.Stat(p); return err == nil })
		if i < 0 {
			fmt.Fprintln(env.Stderr, startUsage)
			return fmt.Errorf("start: no FILE given and none of %s here: name the file, the script, or a stopped APP", strings.Join(defaultStartFiles, ", "))
		}
		args = append([]string{defaultStartFiles[i]}, args...)
	}
	target, rest := args[0], args[1:]
	if fi, err := os.Stat(target); err == nil && fi.Mode().IsRegular() {
		runArgs, err := startArgs(target, rest)
		if err != nil {
			return err
		}
		runArgs, note, err := listenFromPORT(runArgs, env.Getenv)
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

// defaultStartFiles are what `start` without a file looks for, in order: PM2's names,
// then run's default configuration.
var defaultStartFiles = []string{"ecosystem.config.js", "ecosystem.config.cjs", "ecosystem.config.json", "ecosystem.json",
	"ecosystem.config.yaml", "ecosystem.yaml", defaultConfig}

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

// isEcosystemName reports whether a .js file is PM2's ecosystem file rather than an app's
// script, by PM2's own rule: its name says ecosystem or .config.
func isEcosystemName(path string) bool {
	base := filepath.Base(path)
	return strings.HasPrefix(base, "ecosystem") || strings.Contains(base, ".config.")
}

// startArgs are the `run` arguments for `start FILE|SCRIPT REST`.
func startArgs(target string, rest []string) ([]string, error) {
	abs, err := filepath.Abs(target)
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	flags, extra := rest, []string(nil)
	if i := slices.Index(rest, "--"); i >= 0 {
		flags, extra = rest[:i], rest[i+1:]
	}
	out := slices.Clone(flags)
	for i, f := range out {
		switch f {
		case "-i", "--instances": // pm2 start app.js -i max
			out[i] = "-instances"
		case "-n", "--name": // pm2 start app.js --name api
			out[i] = "-name"
		}
	}
	ext := filepath.Ext(abs)
	switch {
	case (ext == ".js" || ext == ".cjs" || ext == ".mjs") && !isEcosystemName(abs):
		out = append(out, "--", "node", abs)
	case ext == ".js" || ext == ".cjs" || ext == ".mjs" || ext == ".json" || ext == ".yaml" || ext == ".yml":
		if len(extra) > 0 {
			return nil, fmt.Errorf("start: arguments after -- go to a script, and %s is a configuration", target)
		}
		return append(out, "-config", abs), nil
	case ext == ".py":
		out = append(out, "--", "python3", abs)
	default:
		fi, err := os.Stat(abs)
		if err != nil || fi.Mode().Perm()&0o111 == 0 {
			return nil, fmt.Errorf("start: %s is neither a configuration (.yaml, .json, ecosystem.config.js), a .js or .py script, nor executable (chmod +x %s)", target, target)
		}
		out = append(out, "--", abs)
	}
	return append(out, extra...), nil
}

// runValueless are run's flags that take no value: fileFirst must not take the word after
// them for theirs.
var runValueless = []string{"check", "share-port"}

// fileFirst moves the first argument that is not a flag nor a flag's value to the front:
// pm2 takes `start -i 2 app.js` as `start app.js -i 2`.
func fileFirst(args []string) []string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return args
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if i == 0 {
				return args
			}
			return append(append([]string{a}, args[:i]...), args[i+1:]...)
		}
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && !slices.Contains(runValueless, name) && !slices.Contains([]string{"h", "help"}, name) {
			i++ // its value
		}
	}
	return args
}

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

// listenFromPORT gives a Node script started without -listen the port PORT names in the
// calling environment, as a PM2 user expects of `PORT=3100 pm2 start app.js`: the app's
// listen(process.env.PORT) asks for it, and the supervisor then serves it on every
// interface, as the app's own listen(PORT) binds (an ecosystem file's env.PORT is served
// so too). It returns the arguments and what to tell the user ("" when nothing changed).
// A configuration file names its own address; other programs read PORT their own way.
func listenFromPORT(runArgs []string, getenv func(string) string) ([]string, string, error) {
	port := getenv("PORT")
	i := slices.Index(runArgs, "--")
	if port == "" || i < 0 || i+1 >= len(runArgs) || runArgs[i+1] != "node" {
		return runArgs, "", nil
	}
	if _, ok := detach.FlagValue(runArgs, "listen"); ok {
		return runArgs, "", nil // the user's choice (the app's listen(PORT) is served too: an app port)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, "", fmt.Errorf("start: PORT=%q in the environment is not a port (1 to 65535): unset it, or give -listen HOST:PORT", port)
	}
	listen := "0.0.0.0:" + port
	out := append(slices.Clone(runArgs[:i]), "-listen", listen)
	return append(out, runArgs[i:]...), "PORT=" + port + " in the environment: serving " + listen +
		", the port the app's listen(process.env.PORT) asks for, on every interface as its own listen would bind (-listen HOST:PORT chooses another)", nil
}
