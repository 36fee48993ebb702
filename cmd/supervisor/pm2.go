// PM2's everyday commands that are not `run`'s: `start APP`, `delete`, `kill`,
// `describe`, `flush`, and the nearest command for a mistyped one (`start` in the
// background is start.go, `save` and `resurrect` dump.go).

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/onehost/onehost/internal/applog"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/procstat"
)

// runKill is `supervisor kill` (pm2 kill): the whole supervisor stops gracefully, and this
// returns once it is gone.
func runKill(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("supervisor kill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", control.DefaultSocket(getenv), "control socket path")
	wait := fs.Duration("timeout", 5*time.Minute, "how long to wait for the supervisor to be gone (its workers drain first)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("kill: unexpected argument %q: kill stops the whole supervisor (supervisor stop APP stops one app)", fs.Arg(0))
	}
	if err := findSocket(fs, socket, stderr); err != nil { // an installed unit's (startup), when the default is not there
		return err
	}
	if err := control.CheckSocketPath(*socket); err != nil {
		return err
	}
	// The pid of the supervisor that takes /stop, from the connection the request goes on
	// (SO_PEERCRED; controlClient has checked its owner). An upgrade execs in place, so
	// the pid stays the one to wait for.
	pid := 0
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if uc, ok := i.Conn.(*net.UnixConn); ok {
			if cred, err := ipc.PeerCred(uc); err == nil {
				pid = int(cred.Pid)
			}
		}
	}}
	if _, err := controlCall(httptrace.WithClientTrace(ctx, trace), *socket, "POST", "/stop", nil); err != nil {
		return fmt.Errorf("kill: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	// Gone means the process has exited: it removes its socket once its workers have
	// stopped, but exits a moment later (its last log lines, a -race binary's report), and
	// a caller that starts another on the same port or checks the pid must not find it
	// still there. Where the pid is unknown, or is this process (a supervisor run inside
	// it), the socket no longer answering is all there is to see.
	gone, still := func() bool { return !procstat.Running("", pid) }, fmt.Sprintf("the supervisor (pid %d) has not exited", pid)
	if pid <= 0 || pid == os.Getpid() {
		gone = func() bool {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "unix", *socket)
			if err == nil {
				conn.Close()
			}
			return err != nil && ctx.Err() == nil
		}
		still = fmt.Sprintf("the supervisor at %s still answers", *socket)
	}
	for !gone() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("kill: %s after %v", still, *wait)
		case <-time.After(20 * time.Millisecond):
		}
	}
	fmt.Fprintln(stdout, "killed: the supervisor and its workers stopped")
	return nil
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
	resp, err := control.NewClient(socket).HTTP().Do(req)
	if err != nil {
		return nil, fmt.Errorf("reach the supervisor at %s (is it running? supervisor start FILE): %w", socket, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("read reply: %w", err)
	}
	if resp.StatusCode >= 300 {
		var e control.ErrorReply
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return nil, errors.New(e.Error)
		}
		return nil, errors.New(resp.Status)
	}
	return body, nil
}

// describe is one app's details.
func (f *fleet) describe(name string) (control.Describe, error) {
	a, err := f.one(name)
	if err != nil {
		return control.Describe{}, err
	}
	conf := a.config()
	cfg := conf.WithDefaults()
	cwd := cfg.Cwd
	if cwd == "" {
		cwd, _ = os.Getwd()
	}
	d := control.Describe{Name: a.name, Mode: a.mode(), Status: "stopped", Cwd: cwd, Command: cfg.Command,
		Instances: int(conf.Instances), WorkerRow: []control.Worker{}, EnvNames: []string{}}
	if !conf.Fork() {
		d.Listen = cfg.Listen
	}
	for k := range cfg.Env {
		d.EnvNames = append(d.EnvNames, k)
	}
	slices.Sort(d.EnvNames)
	if sup := a.current(); sup != nil {
		d.Status = "running"
		d.WorkerRow = workerRows(sup.Status())
		d.Workers = len(d.WorkerRow)
		if !conf.Fork() {
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
func printDescribe(w io.Writer, d control.Describe) {
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
	var files []*applog.File
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
		for _, a := range apps {
			prefix := a.name
			if len(f.apps) == 1 {
				prefix = "worker"
			}
			files = append(files, f.workerLogs.Slots(prefix)...)
		}
	}
	var done []string
	var errs []error
	for _, l := range files {
		if err := l.Truncate(); err != nil {
			errs = append(errs, fmt.Errorf("flush %s: %w", l.Path(), err))
			continue
		}
		done = append(done, l.Path())
	}
	slices.Sort(done)
	return done, errors.Join(errs...)
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
