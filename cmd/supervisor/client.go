package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
)

// runClient sends one command to the running supervisor's control socket.
func runClient(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	r, err := parseClientArgs(cmd, args, getenv, stderr)
	if err != nil {
		return err
	}
	return r.send(ctx, stdout, stderr)
}

// clientRequest is one client command as its flags and arguments give it.
type clientRequest struct {
	cmd                        string
	socket                     string
	asJSON                     bool   // status, describe
	binary                     string // upgrade
	updateEnv                  bool   // reload, restart
	lines                      int    // logs
	follow                     bool
	lo                         logsOptions // logs' PM2 flags (logprint.go)
	appName, logSlot, scaleArg string
}

// parseClientArgs reads cmd's flags and arguments, and finds the control socket.
func parseClientArgs(cmd string, args []string, getenv func(string) string, stderr io.Writer) (*clientRequest, error) {
	r := &clientRequest{cmd: cmd, lines: 15}
	fs := flag.NewFlagSet("supervisor "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&r.socket, "socket", control.DefaultSocket(getenv), "control socket path")
	if cmd == "status" || cmd == "describe" {
		fs.BoolVar(&r.asJSON, "json", false, "print it as JSON")
	}
	if cmd == "upgrade" {
		fs.StringVar(&r.binary, "binary", "", "the new supervisor binary (default: the path the running one was started from, where a deploy puts the new one)")
	}
	if cmd == "reload" || cmd == "restart" {
		fs.BoolVar(&r.updateEnv, "update-env", false, "read the configuration file again (with run's -env NAME) and roll its env into every worker (pm2 --update-env); other fields changed are named, not applied")
	}
	if cmd == "logs" {
		fs.IntVar(&r.lines, "n", 15, "how many of the last lines to print (0: all the supervisor keeps, 2,000)")
		fs.BoolVar(&r.follow, "f", false, "then keep printing new lines until interrupted (pm2 logs)")
		fs.IntVar(&r.lines, "lines", 15, "the same as -n (pm2 logs --lines N)")
		r.lo.flags(fs)
		args = timestampArg(args)
	}
	// Arguments may come before the flags, in pm2's order (`scale api +1`, `logs api 0`),
	// or after them; a leading -N of scale is a count, not a flag.
	var pos []string
	for len(args) > 0 && (!strings.HasPrefix(args[0], "-") || (cmd == "scale" && isNumber(args[0]))) {
		pos, args = append(pos, args[0]), args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	// logs takes its flags anywhere, as pm2 logs (`logs -socket S api --lines 5 --err`).
	for rest := fs.Args(); cmd == "logs" && len(rest) > 1; rest = fs.Args() {
		pos = append(pos, rest[0])
		if err := fs.Parse(timestampArg(rest[1:])); err != nil {
			return nil, err
		}
	}
	pos = append(pos, fs.Args()...)
	if err := findSocket(fs, &r.socket, stderr); err != nil { // an installed unit's (startup), when the default is not there
		return nil, err
	}
	if err := control.CheckSocketPath(r.socket); err != nil {
		return nil, err
	}
	if err := r.arguments(pos); err != nil {
		return nil, err
	}
	return r, nil
}

// arguments reads the command's arguments (pos) into r.
func (r *clientRequest) arguments(pos []string) error {
	cmd := r.cmd
	switch cmd {
	case "logs": // [APP] [SLOT]
		for i, a := range pos {
			switch {
			case i > 1 || r.logSlot != "":
				return fmt.Errorf("logs: unexpected argument %q: want [APP] [SLOT]", a)
			case isNumber(a):
				if n, _ := strconv.Atoi(a); n < 0 {
					return fmt.Errorf("logs: %q is not a slot number (supervisor status lists them)", a)
				}
				r.logSlot = a
			case i == 0:
				r.appName = a
			default:
				return fmt.Errorf("logs: %q is not a slot number (supervisor status lists them)", a)
			}
		}
		if r.lines < 0 {
			return fmt.Errorf("logs: -n %d: want a count >= 0", r.lines)
		}
		if err := r.lo.check(); err != nil {
			return fmt.Errorf("logs: %w", err)
		}
	case "scale": // [APP] N|+N|-N
		switch len(pos) {
		case 1:
			r.scaleArg = pos[0]
		case 2:
			r.appName, r.scaleArg = pos[0], pos[1]
		default:
			return fmt.Errorf("scale: want [APP] N, +N or -N")
		}
	case "upgrade":
		if len(pos) > 0 {
			return fmt.Errorf("upgrade: unexpected argument %q: the whole supervisor is upgraded (-binary PATH names the new one)", pos[0])
		}
		if r.binary != "" {
			abs, err := filepath.Abs(r.binary)
			if err != nil {
				return fmt.Errorf("upgrade: %w", err)
			}
			r.binary = abs
		}
	default: // status, reload, restart, stop: [APP]
		if len(pos) > 1 {
			return fmt.Errorf("%s: unexpected argument %q: want at most one APP", cmd, pos[1])
		}
		if len(pos) == 1 {
			r.appName = pos[0]
		}
	}
	if cmd == "delete" && r.appName == "" {
		return fmt.Errorf("delete: name the app to delete (or all; supervisor kill stops the whole supervisor)")
	}
	if r.appName != "" && isNumber(r.appName) {
		return fmt.Errorf("%s: %q: want an app's name (supervisor status lists them), not a number", cmd, r.appName)
	}
	return nil
}

// target is the method and path (with its query) the command asks for.
func (r *clientRequest) target() (method, path string, err error) {
	method, q := "POST", url.Values{}
	if r.appName != "" {
		q.Set("app", r.appName)
	}
	switch r.cmd {
	case "status", "describe":
		method = "GET"
	case "logs":
		method = "GET"
		q.Set("n", strconv.Itoa(r.lines))
		if r.logSlot != "" {
			q.Set("slot", r.logSlot)
		}
		if r.follow {
			q.Set("follow", "1")
		}
		r.lo.query(q)
	case "scale":
		if _, _, err := cluster.ParseScale(r.scaleArg); err != nil {
			return "", "", fmt.Errorf("scale: %w", err)
		}
		q.Set("n", r.scaleArg)
	case "upgrade":
		if r.binary != "" {
			q.Set("binary", r.binary)
		}
	}
	if r.updateEnv {
		q.Set("update_env", "1")
	}
	path = "/" + r.cmd
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return method, path, nil
}

// send sends the command and prints the supervisor's reply.
func (r *clientRequest) send(ctx context.Context, stdout, stderr io.Writer) error {
	cmd := r.cmd
	c := control.NewClient(r.socket).HTTP()
	method, path, err := r.target()
	if err != nil {
		return err
	}
	if cmd == "status" {
		// Status must not hang on a wedged supervisor; reload and scale may legitimately
		// take instances × listen_timeout.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://supervisor"+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("reach the supervisor at %s (is `supervisor run` running?): %w", r.socket, err)
	}
	defer resp.Body.Close()
	if cmd == "logs" && resp.StatusCode == http.StatusOK {
		err := r.lo.print(resp.Body, stdout, stderr) // until the end, or ^C with -f
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("logs: %w", err)
		}
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("read reply: %w", err)
	}
	if resp.StatusCode >= 300 {
		var e control.ErrorReply
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s: %s", cmd, e.Error)
		}
		return fmt.Errorf("%s: %s", cmd, resp.Status)
	}
	return r.printReply(ctx, c, resp.StatusCode, body, stdout)
}

// printReply prints a successful reply as the command's output.
func (r *clientRequest) printReply(ctx context.Context, c *http.Client, code int, body []byte, stdout io.Writer) error {
	cmd, socket := r.cmd, r.socket
	if r.updateEnv { // what the file's env changed, and what else it changed that a reload does not take
		var nr control.Notes
		if json.Unmarshal(body, &nr) == nil {
			for _, n := range nr.Notes {
				fmt.Fprintln(stdout, n)
			}
		}
	}
	switch cmd {
	case "status":
		if r.asJSON {
			_, err := stdout.Write(body)
			return err
		}
		var st control.Status
		if err := json.Unmarshal(body, &st); err != nil {
			return fmt.Errorf("decode status: %w", err)
		}
		printTable(stdout, st)
	case "describe":
		if r.asJSON {
			_, err := stdout.Write(body)
			return err
		}
		var d control.Describe
		if err := json.Unmarshal(body, &d); err != nil {
			return fmt.Errorf("decode describe: %w", err)
		}
		printDescribe(stdout, d)
	case "start", "delete":
		fmt.Fprintln(stdout, map[string]string{"start": "started", "delete": "deleted"}[cmd])
		return printStatus(ctx, c, socket, stdout)
	case "flush":
		var f struct{ Files []string }
		if err := json.Unmarshal(body, &f); err != nil {
			return fmt.Errorf("decode flush: %w", err)
		}
		if len(f.Files) == 0 {
			fmt.Fprintln(stdout, "flushed: no log file (the supervisor logs to its stderr; supervisor start keeps files)")
		}
		for _, f := range f.Files {
			fmt.Fprintln(stdout, "flushed", f)
		}
	case "reload":
		fmt.Fprintln(stdout, "reloaded")
	case "restart":
		// As pm2 does after restart and scale, the table, so the new workers are seen.
		fmt.Fprintln(stdout, "restarted")
		return printStatus(ctx, c, socket, stdout)
	case "scale":
		fmt.Fprintln(stdout, "scaled")
		return printStatus(ctx, c, socket, stdout)
	case "upgrade":
		// The running image answered and re-executes: wait for the new one's table.
		fmt.Fprintln(stdout, "upgrading")
		return waitUpgraded(ctx, c, socket, stdout)
	case "stop":
		if code == http.StatusOK { // one app, stopped by now
			fmt.Fprintln(stdout, "stopped")
			return printStatus(ctx, c, socket, stdout)
		}
		fmt.Fprintln(stdout, "stopping")
	}
	return nil
}

// waitUpgraded waits until the re-executed supervisor answers with every worker online
// (they rejoin it: none restarts), and prints its table.
func waitUpgraded(ctx context.Context, c *http.Client, socket string, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	time.Sleep(100 * time.Millisecond) // the old image's socket is gone by then
	for {
		st, err := fetchStatus(ctx, c, socket)
		if err == nil && st.UpgradeError != "" {
			printTable(stdout, st)
			return fmt.Errorf("upgrade failed: %s: the previous binary serves again, its workers kept", st.UpgradeError)
		}
		if err == nil && len(st.Workers) > 0 && everyOnline(st) {
			printTable(stdout, st)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("upgrade: the new supervisor is not online after 60 s (%v): see its log", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func everyOnline(st control.Status) bool {
	for _, w := range st.Workers {
		if w.Status != cluster.StateOnline {
			return false
		}
	}
	return true
}

// printStatus reads the status from the control socket and prints it as a table.
func printStatus(ctx context.Context, c *http.Client, socket string, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := fetchStatus(ctx, c, socket)
	if err != nil {
		return err
	}
	printTable(stdout, st)
	return nil
}

// printTable prints the status as `pm2 ls` does: with several apps (or a named one), a
// line per app and an app column.
func printTable(w io.Writer, st control.Status) {
	named := len(st.Apps) > 1 || (len(st.Apps) == 1 && st.Apps[0].Name != "")
	if !named && st.Addr != "" { // "" when its one app is stopped: its row says so
		fmt.Fprintf(w, "serving %s, steering: %s\n", st.Addr, st.Steering)
	}
	for _, a := range st.Apps {
		if !named {
			break
		}
		switch {
		case a.Status != "running":
			fmt.Fprintf(w, "app %s (%s): %s\n", a.Name, a.Mode, a.Status)
		case a.Mode == cluster.ExecFork:
			fmt.Fprintf(w, "app %s (fork): %d processes\n", a.Name, a.Workers)
		default:
			fmt.Fprintf(w, "app %s (cluster): serving %s, steering: %s\n", a.Name, a.Addr, a.Steering)
		}
	}
	if st.Drained {
		fmt.Fprintln(w, "drained: out of the balancer (supervisor ready brings it back)")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "id\tpid\tstatus\tuptime\trestarts\tcpu\tmem\trequests\treq/s\tconns\thealth\twrites"
	if named {
		head = "app\t" + head
	}
	fmt.Fprintln(tw, head)
	for _, r := range st.Workers {
		pid := "-"
		if r.PID != 0 {
			pid = fmt.Sprint(r.PID)
		}
		health, writes := r.Health, r.Writes
		if health == "" {
			health = "-"
		}
		if writes == "" {
			writes = "-"
		}
		// A program without our ipc reports no counters: unknown, not 0.
		reqs, rps, conns := "-", "-", "-"
		if !r.NoCounters {
			reqs, rps, conns = fmt.Sprint(r.Requests), fmt.Sprintf("%.1f", r.RPS), fmt.Sprint(r.Connections)
		}
		if named {
			fmt.Fprintf(tw, "%s\t", r.App)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%.1f%%\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, pid, r.Status,
			uptime(r.UptimeS), r.Restarts, r.CPUPercent, mem(r.RSSBytes), reqs, rps, conns, health, writes)
	}
	for _, a := range st.Apps {
		// A stopped app keeps its row, as pm2 ls lists it stopped.
		if a.Status == "running" {
			continue
		}
		if named {
			fmt.Fprintf(tw, "%s\t", a.Name)
		}
		fmt.Fprintf(tw, "-\t-\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\n", a.Status)
	}
	tw.Flush()
	// Why a worker is unhealthy, and what it says of itself, do not fit a column.
	for _, r := range st.Workers {
		who := fmt.Sprintf("worker %d", r.ID)
		if named {
			who = fmt.Sprintf("%s worker %d", r.App, r.ID)
		}
		if r.Health == cluster.HealthUnhealthy {
			fmt.Fprintf(w, "%s unhealthy: %s\n", who, r.HealthError)
		}
		if r.NotServing != "" {
			fmt.Fprintf(w, "%s not serving: %s\n", who, r.NotServing)
		}
		if r.Note != "" {
			fmt.Fprintf(w, "%s says: %s\n", who, r.Note)
		}
		if r.Adopted {
			fmt.Fprintf(w, "%s: adopted (started by the previous supervisor)\n", who)
		}
	}
}

// uptime formats seconds as pm2 does: 42s, 5m, 3h, 2D.
func uptime(s int64) string {
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm", s/60)
	case s < 86400:
		return fmt.Sprintf("%dh", s/3600)
	}
	return fmt.Sprintf("%dD", s/86400)
}

// mem formats bytes as pm2 does: 41.2mb.
func mem(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1fgb", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1fmb", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.1fkb", float64(b)/(1<<10))
}

// isNumber reports whether s is an optionally signed decimal number ("-1" is a count, not
// a flag).
func isNumber(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}
