// Package detach is `supervisor start FILE|SCRIPT`: a supervisor in the background, as
// `pm2 start` does it — `supervisor run` detached from the terminal (a session of its own,
// stdin /dev/null, its log in files beside its control socket), after `run -check` with the
// same flags has passed, watched until every worker is up, or an app's workers are seen
// crash-looping, or it exits (detach.go; the watching: watch.go).
package detach

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/onehost/onehost/internal/applog"
	"github.com/onehost/onehost/internal/appspec"
	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/monit"
	"github.com/onehost/onehost/internal/safepath"
)

// DefaultConfig is the configuration `supervisor run` reads when given none and it exists.
const DefaultConfig = "configs/cluster.yaml"

// Request is one background start.
type Request struct {
	// RunArgs are `supervisor run`'s arguments; Dir its working directory ("" this
	// process's), Env its environment (nil this process's).
	RunArgs []string
	Dir     string
	Env     []string
	// Binary is the supervisor to run; Getenv this process's environment (the default
	// socket); Stdout hears the apps' table and what run -check warned of.
	Binary string
	Getenv func(string) string
	Stdout io.Writer
}

// startOnlineTimeout is how long `start` waits for the apps to come online before it
// says so and leaves the supervisor to it.
const startOnlineTimeout = 120 * time.Second

// FlagValue returns the value of -name (or --name, either as NAME VALUE or NAME=VALUE) in
// args before a "--", and whether it is there.
func FlagValue(args []string, name string) (string, bool) {
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

// Start starts `supervisor run runArgs` detached (a session of its own, stdin
// /dev/null, its output in files), in dir with env (nil: this process's), and waits until
// every worker of it is online. What `run -check` refuses is refused first, and nothing is
// started. If the supervisor exits first, or is not online in time, or an app's workers
// crash-loop, the error carries the end of its log.
func Start(ctx context.Context, req Request) error {
	runArgs, dir, env, getenv, stdout := req.RunArgs, req.Dir, req.Env, req.Getenv, req.Stdout
	socket, ok := FlagValue(runArgs, "socket")
	if !ok {
		socket = control.DefaultSocket(getenv)
	}
	isDefault := socket == control.DefaultSocket(getenv)
	if err := control.CheckSocketPath(socket); err != nil {
		return err
	}
	c := control.NewClient(socket)
	if st, err := c.StatusWithin(ctx, 2*time.Second); err == nil {
		return fmt.Errorf("start: a supervisor runs at %s already (%d workers): `supervisor start APP` starts one of its stopped apps, `supervisor kill` stops it (or give -socket another path)",
			socket, len(st.Workers))
	}
	if err := control.PrepareDir(filepath.Dir(socket), isDefault); err != nil {
		return err
	}
	_, logDir, err := control.Place(getenv, socket)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if isDefault {
		if _, err := control.PrepareStateDir(getenv); err != nil {
			return fmt.Errorf("start: %w", err)
		}
	}
	if err := safepath.MkdirAll(logDir); err != nil {
		return fmt.Errorf("start: log directory: %w", err)
	}
	if err := applog.CheckDir(logDir); err != nil {
		return err
	}
	logPath, hasLog := FlagValue(runArgs, "log-file")
	if !hasLog && !outFileOfOne(runArgs) {
		logPath = filepath.Join(logDir, "supervisor.log")
		runArgs = append([]string{"-log-file", logPath}, runArgs...)
	}
	if _, ok := FlagValue(runArgs, "log-dir"); !ok {
		runArgs = append([]string{"-log-dir", logDir}, runArgs...)
	}
	exe := req.Binary
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
	// What the log files hold already is an earlier run's (they are appended to): the
	// report tails this run's lines only.
	before := sizes(logDir, logPath)
	err = cmd.Start()
	out.Close()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	// Waited for here while this command runs; once it returns, the supervisor is init's
	// child (or the nearest subreaper's), which waits for it.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// tails is the end of the supervisor's log and of its output.
	tails := func() string {
		return tailSection(logPath, tail(logPath, 15, before[logPath])) + tailSection(outPath, tail(outPath, 15, before[outPath]))
	}
	ctl := "" // the control commands' -socket, when they would not find it by default
	if !isDefault {
		ctl = " -socket " + socket
	}
	watch := startWatch{}
	workerLogDir, _ := FlagValue(runArgs, "log-dir") // given, or set above
	// announce prints the table and where the supervisor runs, as pm2 start does.
	announce := func(st control.Status) {
		monit.PrintStatus(stdout, st)
		fmt.Fprintf(stdout, "supervisor pid %d runs in the background: control socket %s, logs in %s (supervisor kill stops it)\n",
			cmd.Process.Pid, socket, logDir)
	}
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
		st, err := c.StatusWithin(ctx, 2*time.Second)
		if err != nil {
			continue
		}
		now := time.Now()
		watch.observe(st, now)
		if loop, ok := watch.looping(st); ok && !appsSettled(st) {
			// The checks could not foresee it (a script that exits 1): PM2 would list the
			// app errored once out of restarts, and so will the supervisor, which runs on;
			// start has seen enough to say so now rather than after the whole backoff.
			announce(st)
			name := loop.app
			if name == "" {
				name = unnamedApp(runArgs)
			}
			// The worker's own log, after the supervisor's: the reason it gives, which the
			// supervisor's log may have scrolled past.
			wlog := loop.workerLog(workerLogDir)
			wtail := tail(wlog, 10, before[wlog])
			why := "" // the supervisor's own explanation, from the worker's output, first
			if says := preloadSays(wtail); says != "" {
				why = says + "\n"
			}
			return fmt.Errorf("start: app %s: %sits workers exit at start and are being restarted with backoff (each restarted %d times, none staying online); "+
				"the supervisor (pid %d) runs on and lists them errored once out of restarts: `supervisor logs%s` shows more, `supervisor kill%s` stops it%s",
				name, why, loop.restarts, cmd.Process.Pid, ctl, ctl, tails()+tailSection(wlog, wtail))
		}
		if !watch.settled(st, now) {
			continue
		}
		announce(st)
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

// unnamedApp is what an app without a name is called in start's messages: its script or
// program (start app.js, start ./server), else its configuration file.
func unnamedApp(runArgs []string) string {
	if i := slices.Index(runArgs, "--"); i >= 0 && i+1 < len(runArgs) {
		command := runArgs[i+1:]
		if script := appspec.InterpretedScript(command); script != "" {
			return filepath.Base(script)
		}
		return filepath.Base(command[0])
	}
	if cfg, ok := FlagValue(runArgs, "config"); ok {
		return "of " + cfg
	}
	return "of " + DefaultConfig
}

// outFileOfOne reports whether runArgs name an ecosystem file of one app (or -only one)
// with an out_file: `run` writes its log there, as PM2 does, and `start` leaves it so.
func outFileOfOne(runArgs []string) bool {
	path, ok := FlagValue(runArgs, "config")
	if !ok || !cluster.IsEcosystem(path) {
		return false
	}
	envName, _ := FlagValue(runArgs, "env")
	apps, err := cluster.LoadEcosystem(path, envName)
	if err != nil {
		return false // run says what is wrong
	}
	if only, ok := FlagValue(runArgs, "only"); ok {
		apps = slices.DeleteFunc(apps, func(a cluster.App) bool { return a.Name != only })
	}
	return len(apps) == 1 && apps[0].LogFile != ""
}

// tail returns the last n lines of the file at path past its first from bytes ("" when
// there is none), their control characters escaped (applog.AppendPrintable): they are an
// app's output, on their way to the operator's terminal in an error message.
func tail(path string, n int, from int64) string {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) <= from {
		return ""
	}
	if from > 0 {
		b = b[from:]
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

// sizes are the sizes of the files in dir, and of the file extra, by path.
func sizes(dir, extra string) map[string]int64 {
	out := map[string]int64{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			out[filepath.Join(dir, e.Name())] = fi.Size()
		}
	}
	if fi, err := os.Stat(extra); err == nil && extra != "" {
		out[extra] = fi.Size()
	}
	return out
}

// tailSection is the end t of the file at path as start's errors show it, "" when there
// is nothing to show.
func tailSection(path, t string) string {
	if path == "" || t == "" {
		return ""
	}
	return fmt.Sprintf("\n--- %s (end)\n%s", path, t)
}

// preloadSays is the last line the supervisor's Node preload wrote in the end of a
// worker's log, workerTail (this run's: "onehost: the app's listen(8080) cannot be
// served: WHY: FIX"), from "onehost:" on, or "" when there is none: what the user must read
// first, rather than at the end of the log lines under the report.
func preloadSays(workerTail string) string {
	lines := strings.Split(workerTail, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if j := strings.Index(lines[i], "onehost: "); j >= 0 {
			return lines[i][j:]
		}
	}
	return ""
}
