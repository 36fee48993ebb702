// PM2's everyday commands that are not `run`'s: `start` in the background, `start APP`,
// `delete`, `kill`, `describe`, `flush`, `save` and `resurrect`, and the nearest command
// for a mistyped one.

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/onehost/onehost/internal/cluster"
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
the control socket's path without .sock and with -logs (supervisor kill stops it).`

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
// every worker of it is online. If it exits first, or is not online in time, the error
// carries the end of its log.
func startBackground(ctx context.Context, runArgs []string, dir string, env []string, getenv func(string) string, stdout io.Writer) error {
	socket, ok := flagValue(runArgs, "socket")
	if !ok {
		socket = defaultSocket(getenv)
	}
	if err := checkSocketPath(socket); err != nil {
		return err
	}
	c := controlClient(socket)
	if st, err := statusWithin(ctx, c, socket, 2*time.Second); err == nil {
		return fmt.Errorf("start: a supervisor runs at %s already (%d workers): `supervisor start APP` starts one of its stopped apps, `supervisor kill` stops it (or give -socket another path)",
			socket, len(st.Workers))
	}
	if err := prepareRuntimeDir(filepath.Dir(socket), socket == defaultSocket(getenv)); err != nil {
		return err
	}
	logDir := backgroundLogDir(socket)
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return fmt.Errorf("start: create log directory: %w", err)
	}
	if err := checkLogDir(logDir); err != nil {
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
	// What the supervisor writes before its log is open (a bad flag), or past it (a
	// panic), goes here.
	outPath := filepath.Join(logDir, "start.out")
	out, err := os.OpenFile(outPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, logFileMode)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		out.Close()
		return fmt.Errorf("start: find this program: %w", err)
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
	tails := func() string {
		var b strings.Builder
		for _, p := range []string{logPath, outPath} {
			if t := tail(p, 15); p != "" && t != "" {
				fmt.Fprintf(&b, "\n--- %s (end)\n%s", p, t)
			}
		}
		return b.String()
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
		st, err := statusWithin(ctx, c, socket, 2*time.Second)
		if err != nil || !appsOnline(st) {
			continue
		}
		printTable(stdout, st)
		fmt.Fprintf(stdout, "supervisor pid %d runs in the background: control socket %s, logs in %s (supervisor kill stops it)\n",
			cmd.Process.Pid, socket, logDir)
		return nil
	}
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

// appsOnline reports whether every running app has workers and all of them are online.
func appsOnline(st statusReply) bool {
	return len(st.Workers) > 0 && everyOnline(st)
}

// statusWithin is fetchStatus with a deadline of its own.
func statusWithin(ctx context.Context, c *http.Client, socket string, d time.Duration) (statusReply, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return fetchStatus(ctx, c, socket)
}

// tail returns the last n lines of the file at path ("" when there is none).
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.SplitAfter(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "") + "\n"
}

// runKill is `supervisor kill` (pm2 kill): the whole supervisor stops gracefully, and this
// returns once it is gone.
func runKill(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("supervisor kill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", defaultSocket(getenv), "control socket path")
	wait := fs.Duration("timeout", 5*time.Minute, "how long to wait for the supervisor to be gone (its workers drain first)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("kill: unexpected argument %q: kill stops the whole supervisor (supervisor stop APP stops one app)", fs.Arg(0))
	}
	if err := checkSocketPath(*socket); err != nil {
		return err
	}
	if _, err := controlCall(ctx, *socket, "POST", "/stop", nil); err != nil {
		return fmt.Errorf("kill: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	for {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", *socket)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("kill: the supervisor at %s still answers after %v", *socket, *wait)
			}
			fmt.Fprintln(stdout, "killed: the supervisor and its workers stopped")
			return nil
		}
		conn.Close()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// controlCall sends one request to the control socket and returns the body of a 2xx
// answer, or the error the supervisor gave.
func controlCall(ctx context.Context, socket, method, path string, q url.Values) ([]byte, error) {
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://supervisor"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := controlClient(socket).Do(req)
	if err != nil {
		return nil, fmt.Errorf("reach the supervisor at %s (is it running? supervisor start FILE): %w", socket, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("read reply: %w", err)
	}
	if resp.StatusCode >= 300 {
		var e errorReply
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return nil, errors.New(e.Error)
		}
		return nil, errors.New(resp.Status)
	}
	return body, nil
}

// dump is `supervisor save`'s file, which `resurrect` starts from (PM2's dump.pm2): how
// the supervisor was started (its arguments, directory and environment) and what ran.
type dump struct {
	Version int       `json:"version"`
	SavedAt time.Time `json:"saved_at"`
	Socket  string    `json:"socket"`
	Cwd     string    `json:"cwd"`
	Args    []string  `json:"args"`
	// Env is the supervisor's environment, which its workers inherit (secrets included:
	// the file is mode 0600, as PM2's dump is its user's).
	Env  []string  `json:"env"`
	Apps []dumpApp `json:"apps"`
}

type dumpApp struct {
	Name   string `json:"name,omitempty"`
	Mode   string `json:"mode"`
	Status string `json:"status"` // running or stopped
	// Instances is the app's workers when saved: the scale resurrect restores.
	Instances int `json:"instances"`
}

// notInherited are the variables of the supervisor's environment that belong to how it
// was started (systemd's, an upgrade's), not to the apps: a dump leaves them out.
var notInherited = []string{"NOTIFY_SOCKET=", "LISTEN_", "WATCHDOG_", envUpgradeFallback, envUpgradeFailed}

// saveDump is POST /save's body: the dump of the running supervisor.
func (f *fleet) saveDump() (dump, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return dump{}, fmt.Errorf("save: %w", err)
	}
	d := dump{Version: 1, SavedAt: time.Now().UTC(), Cwd: cwd, Args: f.runArgs}
	for _, kv := range os.Environ() {
		if !slices.ContainsFunc(notInherited, func(p string) bool { return strings.HasPrefix(kv, p) }) {
			d.Env = append(d.Env, kv)
		}
	}
	for _, a := range f.live() {
		da := dumpApp{Name: a.name, Mode: a.mode(), Status: "stopped"}
		if sup := a.current(); sup != nil {
			da.Status, da.Instances = "running", len(sup.Status())
		}
		d.Apps = append(d.Apps, da)
	}
	return d, nil
}

// defaultDumpPath is the dump beside the control socket.
func defaultDumpPath(socket string) string {
	return strings.TrimSuffix(socket, ".sock") + ".dump.json"
}

// runSave is `supervisor save [-file PATH]`.
func runSave(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("supervisor save", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", defaultSocket(getenv), "control socket path")
	file := fs.String("file", "", "the dump file (default: beside the control socket, SOCKET without .sock + .dump.json)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("save: unexpected argument %q: every app is saved", fs.Arg(0))
	}
	if err := checkSocketPath(*socket); err != nil {
		return err
	}
	body, err := controlCall(ctx, *socket, "POST", "/save", nil)
	if err != nil {
		return fmt.Errorf("save: %w", err)
	}
	var d dump
	if err := json.Unmarshal(body, &d); err != nil {
		return fmt.Errorf("save: decode: %w", err)
	}
	d.Socket = *socket
	path := cmpOr(*file, defaultDumpPath(*socket))
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return fmt.Errorf("save: %w", err)
	}
	// Written whole, then renamed: a crash mid-save leaves the previous dump.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("save: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("save: %w", err)
	}
	fmt.Fprintf(stdout, "saved %d app(s) to %s (supervisor resurrect starts them again)\n", len(d.Apps), path)
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// runResurrect is `supervisor resurrect [-file PATH]`: a background start from the dump,
// in its directory with its environment, then each app brought to its saved state
// (scale, stopped, or deleted when it was not in the dump).
func runResurrect(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("supervisor resurrect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", defaultSocket(getenv), "control socket path of the saved supervisor (where its dump lies by default)")
	file := fs.String("file", "", "the dump file (default: beside the control socket)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("resurrect: unexpected argument %q", fs.Arg(0))
	}
	path := cmpOr(*file, defaultDumpPath(*socket))
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("resurrect: %w (supervisor save writes it)", err)
	}
	var d dump
	if err := json.Unmarshal(b, &d); err != nil || d.Version != 1 {
		return fmt.Errorf("resurrect: %s is not a dump of supervisor save (version %d, %v)", path, d.Version, err)
	}
	runArgs := d.Args
	sock, ok := flagValue(runArgs, "socket")
	if !ok {
		sock = cmpOr(d.Socket, *socket)
		runArgs = append([]string{"-socket", sock}, runArgs...)
	}
	var quiet bytes.Buffer // the table comes once the apps are as saved
	if err := startBackground(ctx, runArgs, d.Cwd, d.Env, getenv, &quiet); err != nil {
		return fmt.Errorf("resurrect: %w", err)
	}
	st, err := statusWithin(ctx, controlClient(sock), sock, 10*time.Second)
	if err != nil {
		return fmt.Errorf("resurrect: %w", err)
	}
	saved := map[string]dumpApp{}
	for _, a := range d.Apps {
		saved[a.Name] = a
	}
	var errs []error
	for _, a := range st.Apps {
		q := url.Values{}
		if a.Name != "" {
			q.Set("app", a.Name)
		}
		s, ok := saved[a.Name]
		var err error
		switch {
		case !ok:
			_, err = controlCall(ctx, sock, "POST", "/delete", q)
		case s.Status == "stopped":
			_, err = controlCall(ctx, sock, "POST", "/stop", q)
		case s.Mode == cluster.ExecCluster && s.Instances > 0 && s.Instances != a.Workers:
			q.Set("n", strconv.Itoa(s.Instances))
			_, err = controlCall(ctx, sock, "POST", "/scale", q)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("app %s: %w", a.Name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("resurrect: started, but not every app as saved: %w", err)
	}
	if err := printStatus(ctx, controlClient(sock), sock, stdout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "resurrected from %s (saved %s)\n", path, d.SavedAt.Format(time.RFC3339))
	return nil
}

// describeReply is GET /describe?app=NAME: one app's details, as `pm2 describe`.
type describeReply struct {
	Name     string   `json:"name,omitempty"`
	Mode     string   `json:"mode"`
	Status   string   `json:"status"`
	Cwd      string   `json:"cwd"`
	Command  []string `json:"command"`
	Listen   string   `json:"listen,omitempty"`
	Addr     string   `json:"addr,omitempty"`
	Steering string   `json:"steering,omitempty"`
	// Instances is the configured count (0: the default), Workers the count now.
	Instances int `json:"instances"`
	Workers   int `json:"workers"`
	// EnvNames are the names of the app's own env (the values may be secrets).
	EnvNames []string `json:"env_names"`
	Restarts int      `json:"restarts"`
	// UptimeS is the longest-running worker's uptime.
	UptimeS   int64                  `json:"uptime_s"`
	WorkerRow []cluster.WorkerStatus `json:"workers_status"`
}

// describe is one app's details.
func (f *fleet) describe(name string) (describeReply, error) {
	a, err := f.one(name)
	if err != nil {
		return describeReply{}, err
	}
	cfg := a.cfg.WithDefaults()
	cwd := cfg.Cwd
	if cwd == "" {
		cwd, _ = os.Getwd()
	}
	d := describeReply{Name: a.name, Mode: a.mode(), Status: "stopped", Cwd: cwd, Command: cfg.Command,
		Instances: int(a.cfg.Instances), WorkerRow: []cluster.WorkerStatus{}, EnvNames: []string{}}
	if !a.cfg.Fork() {
		d.Listen = cfg.Listen
	}
	for k := range cfg.Env {
		d.EnvNames = append(d.EnvNames, k)
	}
	slices.Sort(d.EnvNames)
	if sup := a.current(); sup != nil {
		d.Status = "running"
		d.WorkerRow = sup.Status()
		d.Workers = len(d.WorkerRow)
		if !a.cfg.Fork() {
			d.Addr, d.Steering = sup.Addr(), sup.Steering()
		}
		for _, w := range d.WorkerRow {
			d.Restarts += w.Restarts
			d.UptimeS = max(d.UptimeS, w.UptimeS)
		}
	}
	return d, nil
}

// printDescribe prints describe's reply as `pm2 describe` does: a table of fields, then
// the workers.
func printDescribe(w io.Writer, d describeReply) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	name := d.Name
	if name == "" {
		name = "(the one app, no name)"
	}
	instances := "default"
	if d.Instances != 0 {
		instances = strconv.Itoa(d.Instances)
	}
	rows := [][2]string{
		{"name", name}, {"status", d.Status}, {"mode", d.Mode}, {"cwd", d.Cwd},
		{"command", strings.Join(d.Command, " ")}, {"listen", d.Listen}, {"serving", d.Addr},
		{"steering", d.Steering}, {"instances", instances + " configured, " + strconv.Itoa(d.Workers) + " running"},
		{"env", strings.Join(d.EnvNames, ", ")}, {"restarts", strconv.Itoa(d.Restarts)}, {"uptime", uptime(d.UptimeS)},
	}
	for _, r := range rows {
		if r[1] == "" {
			r[1] = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	tw.Flush()
	if len(d.WorkerRow) == 0 {
		return
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "id\tpid\tstatus\tuptime\trestarts")
	for _, r := range d.WorkerRow {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\n", r.ID, r.PID, r.Status, uptime(r.UptimeS), r.Restarts)
	}
	tw.Flush()
}

// deleteApp stops the named apps and removes them from every list (pm2 delete); the
// supervisor runs on, with no app if they were all.
func (f *fleet) deleteApp(ctx context.Context, name string) error {
	if name == "" {
		return fmt.Errorf("%w: name the app to delete (or all)", errUnknownApp)
	}
	apps, err := f.pick(name)
	if err != nil {
		return err
	}
	err = f.stopApp(ctx, name)
	f.ops.Lock()
	defer f.ops.Unlock()
	for _, a := range apps {
		a.mu.Lock()
		if a.sup == nil {
			a.deleted = true
		}
		a.mu.Unlock()
		a.log.Info("app deleted")
	}
	return err
}

// live are the apps not deleted, in order.
func (f *fleet) live() []*app {
	var out []*app
	for _, a := range f.apps {
		a.mu.Lock()
		d := a.deleted
		a.mu.Unlock()
		if !d {
			out = append(out, a)
		}
	}
	return out
}

// flush empties the log files of the named apps (every app's and the supervisor's own for
// ""), as pm2 flush: the files stay open and go on from empty.
func (f *fleet) flush(name string) ([]string, error) {
	apps, err := f.pick(name)
	if err != nil {
		return nil, err
	}
	var files []*logFile
	all := name == "" || name == "all"
	if all && f.mainLog != nil {
		files = append(files, f.mainLog)
	}
	for _, a := range apps {
		if a.outFile != nil {
			files = append(files, a.outFile)
		}
	}
	if f.workerLogs != nil {
		f.workerLogs.mu.Lock()
		for file, l := range f.workerLogs.files {
			if l == nil {
				continue
			}
			for _, a := range apps {
				prefix := a.name
				if len(f.apps) == 1 {
					prefix = "worker"
				}
				slot, ok := strings.CutPrefix(strings.TrimSuffix(file, ".log"), prefix+"-")
				if ok && isNumber(slot) { // api-0.log, not api-v2-0.log
					files = append(files, l)
					break
				}
			}
		}
		f.workerLogs.mu.Unlock()
	}
	var done []string
	var errs []error
	for _, l := range files {
		if err := l.truncate(); err != nil {
			errs = append(errs, fmt.Errorf("flush %s: %w", l.path, err))
			continue
		}
		done = append(done, l.path)
	}
	slices.Sort(done)
	return done, errors.Join(errs...)
}

// truncate empties the file; opened O_APPEND, the next line goes at its new start.
func (l *logFile) truncate() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	l.size = 0
	return nil
}

// commands are the supervisor's commands, for the nearest to a mistyped one.
var commands = []string{"run", "start", "stop", "restart", "reload", "delete", "kill", "status", "ls", "list", "jlist",
	"describe", "scale", "logs", "flush", "save", "resurrect", "upgrade", "drain", "ready", "monit", "startup", "version", "help"}

// nearestCommand is the command closest to s (its leading dashes aside: --versoin) by
// edit distance, "" when none is close: more than a third of its letters, at least 1,
// would change.
func nearestCommand(s string) string {
	s = strings.ToLower(strings.TrimLeft(s, "-"))
	best, bestD := "", max(1, len(s)/3)+1
	for _, c := range commands {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
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

// pm2Routes adds the control socket's routes for this file's commands: POST /start,
// /delete and /flush (each ?app=NAME), POST /save (the dump, operator only like every
// POST: it holds the environment) and GET /describe?app=NAME.
func pm2Routes(mux *http.ServeMux, fl *fleet, reply func(http.ResponseWriter, int, any), fail func(http.ResponseWriter, error)) {
	mux.HandleFunc("POST /start", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("app")
		apps, err := fl.pick(name)
		if err != nil {
			fail(w, err)
			return
		}
		var errs []error
		for _, a := range apps {
			if err := fl.startApp(r.Context(), a); err != nil {
				errs = append(errs, fl.wrap(a, err))
			}
		}
		if err := errors.Join(errs...); err != nil {
			fail(w, err)
			return
		}
		reply(w, http.StatusOK, map[string]bool{"ok": true})
	})
	mux.HandleFunc("POST /delete", func(w http.ResponseWriter, r *http.Request) {
		if err := fl.deleteApp(r.Context(), r.URL.Query().Get("app")); err != nil {
			fail(w, err)
			return
		}
		reply(w, http.StatusOK, map[string]bool{"ok": true})
	})
	mux.HandleFunc("POST /flush", func(w http.ResponseWriter, r *http.Request) {
		files, err := fl.flush(r.URL.Query().Get("app"))
		if err != nil {
			fail(w, err)
			return
		}
		reply(w, http.StatusOK, map[string][]string{"files": files})
	})
	mux.HandleFunc("POST /save", func(w http.ResponseWriter, r *http.Request) {
		d, err := fl.saveDump()
		if err != nil {
			fail(w, err)
			return
		}
		reply(w, http.StatusOK, d)
	})
	mux.HandleFunc("GET /describe", func(w http.ResponseWriter, r *http.Request) {
		d, err := fl.describe(r.URL.Query().Get("app"))
		if err != nil {
			fail(w, err)
			return
		}
		reply(w, http.StatusOK, d)
	})
}
