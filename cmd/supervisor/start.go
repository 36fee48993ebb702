// `supervisor start FILE|SCRIPT`: a supervisor in the background, as `pm2 start`.

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onehost/onehost/internal/applog"
	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/safepath"
)

// startOnlineTimeout is how long `start` waits for the apps to come online before it
// says so and leaves the supervisor to it.
const startOnlineTimeout = 120 * time.Second

// runStart is `supervisor start`: FILE|SCRIPT [run's flags] [-- ARGS] starts a supervisor
// in the background, as `pm2 start` does, and returns once its apps are online; APP starts
// a stopped app of the running supervisor (`pm2 start NAME`).
func runStart(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && slices.Contains([]string{"-h", "-help", "--help"}, args[0]) {
		fmt.Fprintln(stdout, startUsage)
		return nil
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		// No file named: the one here, as `pm2 start` finds ecosystem.config.js.
		i := slices.IndexFunc(defaultStartFiles, func(p string) bool { _, err := os.Stat(p); return err == nil })
		if i < 0 {
			fmt.Fprintln(stderr, startUsage)
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
		return startBackground(ctx, runArgs, "", nil, getenv, stdout)
	}
	if strings.ContainsAny(target, "/.") {
		return fmt.Errorf("start: %q: no such file (and not an app's name)", target)
	}
	return runClient(ctx, "start", args, getenv, stdout, stderr)
}

// defaultStartFiles are what `start` without a file looks for, in order: PM2's names,
// then run's default configuration.
var defaultStartFiles = []string{"ecosystem.config.js", "ecosystem.config.cjs", "ecosystem.config.json", "ecosystem.json",
	"ecosystem.config.yaml", "ecosystem.yaml", defaultConfig}

const startUsage = `usage:
  supervisor start [FILE] [run's flags]          (an ecosystem file or our YAML, in the background;
                                                 default: ./ecosystem.config.js, ..., configs/cluster.yaml)
  supervisor start SCRIPT [run's flags] [-- ARGS] (app.js: node SCRIPT; another executable: itself;
                                                 -i N is -instances N, as pm2's)
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
		if f == "-i" || f == "--instances" { // pm2 start app.js -i max
			out[i] = "-instances"
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

// flagValue returns the value of -name (or --name, either as NAME VALUE or NAME=VALUE) in
// args before a "--", and whether it is there.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == "--" {
			break
		}
		for _, p := range []string{"-" + name, "--" + name} {
			if a == p && i+1 < len(args) {
				return args[i+1], true
			}
			if v, ok := strings.CutPrefix(a, p+"="); ok {
				return v, true
			}
		}
	}
	return "", false
}

// backgroundLogDir is where a background supervisor's log and its workers' go: beside
// its control socket, named after it.
func backgroundLogDir(socket string) string {
	return strings.TrimSuffix(socket, ".sock") + "-logs"
}

// startBackground starts `supervisor run runArgs` detached (a session of its own, stdin
// /dev/null, its output in files), in dir with env (nil: this process's), and waits until
// every worker of it is online. What `run -check` refuses is refused first, and nothing is
// started. If the supervisor exits first, or is not online in time, or an app's workers
// crash-loop, the error carries the end of its log.
func startBackground(ctx context.Context, runArgs []string, dir string, env []string, getenv func(string) string, stdout io.Writer) error {
	socket, ok := flagValue(runArgs, "socket")
	if !ok {
		socket = control.DefaultSocket(getenv)
	}
	if err := control.CheckSocketPath(socket); err != nil {
		return err
	}
	c := control.NewClient(socket).HTTP()
	if st, err := statusWithin(ctx, c, socket, 2*time.Second); err == nil {
		return fmt.Errorf("start: a supervisor runs at %s already (%d workers): `supervisor start APP` starts one of its stopped apps, `supervisor kill` stops it (or give -socket another path)",
			socket, len(st.Workers))
	}
	if err := prepareRuntimeDir(filepath.Dir(socket), socket == control.DefaultSocket(getenv)); err != nil {
		return err
	}
	logDir := backgroundLogDir(socket)
	if err := safepath.MkdirAll(logDir); err != nil {
		return fmt.Errorf("start: log directory: %w", err)
	}
	if err := applog.CheckDir(logDir); err != nil {
		return err
	}
	logPath, hasLog := flagValue(runArgs, "log-file")
	if !hasLog && !outFileOfOne(runArgs) {
		logPath = filepath.Join(logDir, "supervisor.log")
		runArgs = append([]string{"-log-file", logPath}, runArgs...)
	}
	if _, ok := flagValue(runArgs, "log-dir"); !ok {
		runArgs = append([]string{"-log-dir", logDir}, runArgs...)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("start: find this program: %w", err)
	}
	if err := checkStart(ctx, exe, runArgs, dir, env, stdout); err != nil {
		return err
	}
	// What the supervisor writes before its log is open (a bad flag), or past it (a
	// panic), goes here.
	outPath := filepath.Join(logDir, "start.out")
	out, err := os.OpenFile(outPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, applog.FileMode)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	cmd := exec.Command(exe, append([]string{"run"}, runArgs...)...)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdout, cmd.Stderr = out, out // stdin: /dev/null (os/exec's nil)
	// Its own session: no controlling terminal, so the end of the ssh session (SIGHUP to
	// the terminal's process groups) does not reach it, nor a ^C in this shell.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	out.Close()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	// Waited for here while this command runs; once it returns, the supervisor is init's
	// child (or the nearest subreaper's), which waits for it.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// tails is the end of the supervisor's log and of its output, then of the files named
	// by more (a worker's own log: the reason it gives, which the supervisor's log may have
	// scrolled past).
	tails := func(more ...string) string {
		var b strings.Builder
		for i, p := range append([]string{logPath, outPath}, more...) {
			n := 15
			if i >= 2 {
				n = 10
			}
			if t := tail(p, n); p != "" && t != "" {
				fmt.Fprintf(&b, "\n--- %s (end)\n%s", p, t)
			}
		}
		return b.String()
	}
	ctl := "" // the control commands' -socket, when they would not find it by default
	if socket != control.DefaultSocket(getenv) {
		ctl = " -socket " + socket
	}
	watch := startWatch{}
	workerLogDir, _ := flagValue(runArgs, "log-dir") // given, or set above
	deadline := time.After(startOnlineTimeout)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("start: the supervisor exited before its apps were online (%v)%s", err, tails())
		case <-deadline:
			return fmt.Errorf("start: the supervisor (pid %d) is not online after %v; it runs on: `supervisor status` and `supervisor logs` say why, `supervisor kill` stops it%s",
				cmd.Process.Pid, startOnlineTimeout, tails())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(150 * time.Millisecond):
		}
		st, err := statusWithin(ctx, c, socket, 2*time.Second)
		if err != nil {
			continue
		}
		now := time.Now()
		watch.observe(st, now)
		if loop, ok := watch.looping(st); ok && !appsSettled(st) {
			// The checks could not foresee it (a script that exits 1): PM2 would list the
			// app errored once out of restarts, and so will the supervisor, which runs on;
			// start has seen enough to say so now rather than after the whole backoff.
			printTable(stdout, st)
			fmt.Fprintf(stdout, "supervisor pid %d runs in the background: control socket %s, logs in %s (supervisor kill stops it)\n",
				cmd.Process.Pid, socket, logDir)
			name := loop.app
			if name == "" {
				name = unnamedApp(runArgs)
			}
			return fmt.Errorf("start: app %s: its workers exit at start and are being restarted with backoff (each restarted %d times, none staying online); "+
				"the supervisor (pid %d) runs on and lists them errored once out of restarts: `supervisor logs%s` shows more, `supervisor kill%s` stops it%s",
				name, loop.restarts, cmd.Process.Pid, ctl, ctl, tails(loop.workerLog(workerLogDir, st)))
		}
		if !watch.settled(st, now) {
			continue
		}
		printTable(stdout, st)
		fmt.Fprintf(stdout, "supervisor pid %d runs in the background: control socket %s, logs in %s (supervisor kill stops it)\n",
			cmd.Process.Pid, socket, logDir)
		if bad := erroredWorkers(st); len(bad) > 0 {
			return fmt.Errorf("start: %s errored (out of restarts): `supervisor logs` says why; the supervisor runs on", strings.Join(bad, ", "))
		}
		return nil
	}
}

// startCheckTimeout bounds `run -check` before a start: it reads files and looks programs
// up, and takes milliseconds.
const startCheckTimeout = 30 * time.Second

// checkStart runs `supervisor run -check` with the arguments, directory and environment the
// background supervisor is to get, so that what would have every worker exit at start (no
// SQLITE_PATH or JWT secret for our worker, a program not on PATH, a script or cwd missing)
// is refused now, in run -check's words, and no supervisor is left behind crash-looping.
// Its warnings go to stdout.
func checkStart(ctx context.Context, exe string, runArgs []string, dir string, env []string, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, startCheckTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, append([]string{"run", "-check"}, runArgs...)...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err == nil {
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, "warning:") {
				fmt.Fprintln(stdout, l)
			}
		}
		return nil
	}
	if ctx.Err() != nil || out.Len() == 0 {
		return fmt.Errorf("start: run -check: %w (%s)", err, bytes.TrimSpace(out.Bytes()))
	}
	return fmt.Errorf("start: %s", checkOutput(out.String()))
}

// checkOutput is what a failed `run -check` printed, as its error: the flag package's list
// of every flag (after a bad one) left out, and main's "supervisor: " prefix.
func checkOutput(out string) string {
	var keep []string
	usage := false
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		switch {
		case strings.HasPrefix(l, "Usage of "):
			usage = true
			continue
		case usage && (strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t")):
			continue
		}
		usage = false
		keep = append(keep, l)
	}
	// A bad flag is said twice: by the flag package, then as the error.
	keep = slices.Compact(keep)
	for i, l := range keep {
		if _, rest, ok := strings.Cut(l, "supervisor: "); ok && strings.HasPrefix(l, "supervisor: ") {
			keep[i] = rest
		}
	}
	if len(keep) == 2 && strings.HasSuffix(keep[1], keep[0]) {
		keep = keep[1:]
	}
	return strings.Join(keep, "\n")
}

// startWatch follows the status replies start polls. A program without wait_ready is
// online from the moment it is started, so online alone does not say it stays up: a
// worker counts as up once it has been seen online, as the same process, for startStable,
// and start returns only then. An app whose every worker has been restarted
// startCrashRestarts times with none up since exits at start (status carries each slot's
// restarts, not when it was last up: that is what the polls remember). A slow starter is
// launching, not restarted, and is waited for.
type startWatch map[string]*slotSeen // by "APP ID"

// slotSeen is what the polls saw of one slot.
type slotSeen struct {
	pid    int
	online time.Time // since when this pid has been seen online; zero: not online
	base   int       // the slot's restarts when it was last up
}

// startStable is how long a worker seen online must stay so (the same process) to count
// as up: the default min_uptime, under which an exit counts as an unstable start.
const startStable = cluster.DefaultMinUptime

// startCrashRestarts is how many restarts without being up make a crash loop for start:
// under the default backoff (100 ms, ×1.5) about half a second of them.
const startCrashRestarts = 3

// crashLoop is an app found crash-looping, and the first of its workers.
type crashLoop struct {
	app      string
	id       int
	restarts int // the fewest of its workers', since they were last up
}

func slotKey(w control.Worker) string { return w.App + " " + strconv.Itoa(w.ID) }

// observe records a status reply taken at now.
func (sw startWatch) observe(st control.Status, now time.Time) {
	for _, w := range st.Workers {
		s := sw[slotKey(w)]
		if s == nil {
			s = &slotSeen{}
			sw[slotKey(w)] = s
		}
		switch {
		case w.Status != cluster.StateOnline && w.Status != cluster.StateNotServing:
			s.online = time.Time{}
		case s.online.IsZero() || s.pid != w.PID:
			s.online = now
		}
		s.pid = w.PID
		if sw.up(w, now) {
			s.base = w.Restarts
		}
	}
}

// up: the worker has been online, as one process, for startStable at now.
func (sw startWatch) up(w control.Worker, now time.Time) bool {
	s := sw[slotKey(w)]
	return s != nil && !s.online.IsZero() && s.pid == w.PID && now.Sub(s.online) >= startStable
}

// settled reports whether every running app has workers and each of them is up, or has
// ended for good (appsSettled).
func (sw startWatch) settled(st control.Status, now time.Time) bool {
	if !appsSettled(st) {
		return false
	}
	for _, w := range st.Workers {
		if (w.Status == cluster.StateOnline || w.Status == cluster.StateNotServing) && !sw.up(w, now) {
			return false
		}
	}
	return true
}

// looping returns the first app (in status order) whose every worker is crash-looping.
func (sw startWatch) looping(st control.Status) (crashLoop, bool) {
	var order []string
	loops := map[string]*crashLoop{}
	bad := map[string]bool{} // an app with a worker up, stopped, or not restarted enough
	for _, w := range st.Workers {
		base := 0
		if s := sw[slotKey(w)]; s != nil {
			base = s.base
		}
		n := w.Restarts - base
		l, seen := loops[w.App]
		if !seen {
			order = append(order, w.App)
			l = &crashLoop{app: w.App, id: w.ID, restarts: n}
			loops[w.App] = l
		}
		l.restarts = min(l.restarts, n)
		if w.Status == cluster.StateStopped || w.Status == cluster.StateStopping || n < startCrashRestarts {
			bad[w.App] = true
		}
	}
	for _, app := range order {
		if !bad[app] {
			return *loops[app], true
		}
	}
	return crashLoop{}, false
}

// workerLog is the own log file of the loop's first worker in dir (-log-dir's, as
// workerLogs names it: DIR/worker-ID.log for a supervisor of one app, DIR/APP-ID.log for
// one of several), "" without a dir.
func (l crashLoop) workerLog(dir string, st control.Status) string {
	if dir == "" {
		return ""
	}
	prefix := "worker"
	if len(st.Apps) > 1 {
		prefix = l.app
	}
	return filepath.Join(dir, prefix+"-"+strconv.Itoa(l.id)+".log")
}

// unnamedApp is what an app without a name is called in start's messages: its script or
// program (start app.js, start ./server), else its configuration file.
func unnamedApp(runArgs []string) string {
	if i := slices.Index(runArgs, "--"); i >= 0 && i+1 < len(runArgs) {
		command := runArgs[i+1:]
		if script := interpretedScript(command); script != "" {
			return filepath.Base(script)
		}
		return filepath.Base(command[0])
	}
	if cfg, ok := flagValue(runArgs, "config"); ok {
		return "of " + cfg
	}
	return "of " + defaultConfig
}

// outFileOfOne reports whether runArgs name an ecosystem file of one app (or -only one)
// with an out_file: `run` writes its log there, as PM2 does, and `start` leaves it so.
func outFileOfOne(runArgs []string) bool {
	path, ok := flagValue(runArgs, "config")
	if !ok || !cluster.IsEcosystem(path) {
		return false
	}
	envName, _ := flagValue(runArgs, "env")
	apps, err := cluster.LoadEcosystem(path, envName)
	if err != nil {
		return false // run says what is wrong
	}
	if only, ok := flagValue(runArgs, "only"); ok {
		apps = slices.DeleteFunc(apps, func(a cluster.App) bool { return a.Name != only })
	}
	return len(apps) == 1 && apps[0].LogFile != ""
}

// appsSettled reports whether every running app has workers and each of them is online,
// or has ended for good: stopped (a one-shot job under autorestart: false that finished,
// PM2's stopped) or errored (out of restarts). Waiting on those would wait the whole
// startOnlineTimeout for nothing.
func appsSettled(st control.Status) bool {
	if len(st.Workers) == 0 {
		return false
	}
	for _, w := range st.Workers {
		switch w.Status {
		case cluster.StateOnline, cluster.StateStopped, cluster.StateErrored:
		default:
			return false
		}
	}
	return true
}

// erroredWorkers names the workers out of restarts ("api 1"), none when all went well.
func erroredWorkers(st control.Status) []string {
	var out []string
	for _, w := range st.Workers {
		if w.Status == cluster.StateErrored {
			out = append(out, strings.TrimSpace(w.App+" "+strconv.Itoa(w.ID)))
		}
	}
	return out
}

// statusWithin is fetchStatus with a deadline of its own.
func statusWithin(ctx context.Context, c *http.Client, socket string, d time.Duration) (control.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return fetchStatus(ctx, c, socket)
}

// tail returns the last n lines of the file at path ("" when there is none), their
// control characters escaped (appendPrintable): they are an app's output, on their way to
// the operator's terminal in an error message.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var out []byte
	for _, l := range lines {
		out = append(applog.AppendPrintable(out, []byte(l)), '\n')
	}
	return string(out)
}
