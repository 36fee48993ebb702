package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/onehost/onehost/internal/cluster"
)

// runClient sends one command to the running supervisor's control socket.
func runClient(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("supervisor "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", defaultSocket(getenv), "control socket path")
	asJSON := false
	if cmd == "status" {
		fs.BoolVar(&asJSON, "json", false, "print the status as JSON")
	}
	lines, follow := 15, false
	if cmd == "logs" {
		fs.IntVar(&lines, "n", 15, "how many of the last lines to print (0: all the supervisor keeps, 2,000)")
		fs.BoolVar(&follow, "f", false, "then keep printing new lines until interrupted (pm2 logs)")
		fs.IntVar(&lines, "lines", 15, "the same as -n (pm2 logs --lines N)")
	}
	var logSlot string
	if cmd == "logs" && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		logSlot, args = args[0], args[1:]
	}
	// `scale +1 -socket X` and `scale -socket X -1` both work: a leading count is taken
	// before the flags (a -N count would otherwise read as a flag).
	var scaleArg string
	if cmd == "scale" && len(args) > 0 && (!strings.HasPrefix(args[0], "-") || isNumber(args[0])) {
		scaleArg, args = args[0], args[1:] // judged below, after the flags
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkSocketPath(*socket); err != nil {
		return err
	}
	if cmd == "logs" {
		if logSlot == "" && fs.NArg() == 1 {
			logSlot = fs.Arg(0)
		} else if fs.NArg() > 0 {
			return fmt.Errorf("logs: unexpected argument %q: want at most one SLOT", fs.Arg(fs.NArg()-1))
		}
		if n, err := strconv.Atoi(logSlot); logSlot != "" && (err != nil || n < 0) {
			return fmt.Errorf("logs: %q is not a slot number (supervisor status lists them)", logSlot)
		}
		if lines < 0 {
			return fmt.Errorf("logs: -n %d: want a count >= 0", lines)
		}
	} else if cmd == "scale" && scaleArg == "" {
		if fs.NArg() != 1 {
			return fmt.Errorf("scale: want one argument N, +N or -N")
		}
		scaleArg = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q", cmd, fs.Arg(0))
	}
	c := controlClient(*socket)
	method, path := "POST", "/"+cmd
	switch cmd {
	case "status":
		method = "GET"
	case "logs":
		method = "GET"
		q := url.Values{"n": {strconv.Itoa(lines)}}
		if logSlot != "" {
			q.Set("slot", logSlot)
		}
		if follow {
			q.Set("follow", "1")
		}
		path += "?" + q.Encode()
	case "scale":
		if _, _, err := cluster.ParseScale(scaleArg); err != nil {
			return err
		}
		path += "?n=" + url.QueryEscape(scaleArg)
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
		return fmt.Errorf("reach the supervisor at %s (is `supervisor run` running?): %w", *socket, err)
	}
	defer resp.Body.Close()
	if cmd == "logs" && resp.StatusCode == http.StatusOK {
		_, err := io.Copy(stdout, resp.Body) // until the end, or ^C with -f
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
		var e errorReply
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s: %s", cmd, e.Error)
		}
		return fmt.Errorf("%s: %s", cmd, resp.Status)
	}
	switch cmd {
	case "status":
		if asJSON {
			_, err := stdout.Write(body)
			return err
		}
		var st statusReply
		if err := json.Unmarshal(body, &st); err != nil {
			return fmt.Errorf("decode status: %w", err)
		}
		printTable(stdout, st)
	case "reload":
		fmt.Fprintln(stdout, "reloaded")
	case "scale":
		// As `pm2 scale` does, the table after scaling, so the new workers are seen.
		fmt.Fprintln(stdout, "scaled")
		return printStatus(ctx, c, *socket, stdout)
	case "stop":
		fmt.Fprintln(stdout, "stopping")
	}
	return nil
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

// controlClient is an HTTP client whose every request goes to the control socket.
func controlClient(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
}

// printTable prints the status as `pm2 ls` does.
func printTable(w io.Writer, st statusReply) {
	fmt.Fprintf(w, "serving %s, steering: %s\n", st.Addr, st.Steering)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "id\tpid\tstatus\tuptime\trestarts\tcpu\tmem\trequests\treq/s\tconns\thealth\twrites")
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
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%.1f%%\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, pid, r.Status,
			uptime(r.UptimeS), r.Restarts, r.CPUPercent, mem(r.RSSBytes), reqs, rps, conns, health, writes)
	}
	tw.Flush()
	// Why a worker is unhealthy, and what it says of itself, do not fit a column.
	for _, r := range st.Workers {
		if r.Health == cluster.HealthUnhealthy {
			fmt.Fprintf(w, "worker %d unhealthy: %s\n", r.ID, r.HealthError)
		}
		if r.NotServing != "" {
			fmt.Fprintf(w, "worker %d not serving: %s\n", r.ID, r.NotServing)
		}
		if r.Note != "" {
			fmt.Fprintf(w, "worker %d says: %s\n", r.ID, r.Note)
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

// maxSocketPath is the longest path a unix socket address holds (sun_path is 108 bytes,
// NUL included).
const maxSocketPath = 107

// checkSocketPath refuses a control socket path the kernel cannot take, before connect or
// bind fail with a bare "invalid argument".
func checkSocketPath(path string) error {
	if len(path) > maxSocketPath {
		return fmt.Errorf("control socket path %q is %d bytes, and a unix socket path holds at most %d: choose a shorter -socket (or a shorter XDG_RUNTIME_DIR)", path, len(path), maxSocketPath)
	}
	return nil
}
