package monit

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
)

func EveryOnline(st control.Status) bool {
	for _, w := range st.Workers {
		if w.Status != cluster.StateOnline {
			return false
		}
	}
	return true
}

// printTable prints the status as `pm2 ls` does: with several apps (or a named one), a
// line per app and an app column.
func PrintStatus(w io.Writer, st control.Status) {
	named := len(st.Apps) > 1 || (len(st.Apps) == 1 && st.Apps[0].Name != "")
	if !named && st.Addr != "" { // "" when its one app is stopped: its row says so
		fmt.Fprintf(w, "serving %s, steering: %s%s\n", st.Addr, st.Steering, appPorts(st.AppPorts))
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
			fmt.Fprintf(w, "app %s (cluster): serving %s, steering: %s%s\n", a.Name, a.Addr, a.Steering, appPorts(a.AppPorts))
		}
	}
	if st.Drained {
		fmt.Fprintln(w, "drained: out of the balancer (supervisor ready brings it back)")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "id\tpid\tstatus\tuptime\trestarts\tcpu\tmem\trequests\treq/s\tconns\thealth\trole"
	if named {
		head = "app\t" + head
	}
	fmt.Fprintln(tw, head)
	for _, r := range st.Workers {
		pid := "-"
		if r.PID != 0 {
			pid = fmt.Sprint(r.PID)
		}
		health, role := r.Health, r.Role
		if health == "" {
			health = "-"
		}
		if role == "" {
			role = "-"
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
			Uptime(r.UptimeS), r.Restarts, r.CPUPercent, Mem(r.RSSBytes), reqs, rps, conns, health, role)
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

// Uptime formats seconds as pm2 does: 42s, 5m, 3h, 2D.
func Uptime(s int64) string {
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

// Mem formats bytes as pm2 does: 41.2mb.
func Mem(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1fgb", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1fmb", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.1fkb", float64(b)/(1<<10))
}

// appPorts is what the status line adds for the ports an app's own listen asked for.
func appPorts(addrs []string) string {
	if len(addrs) == 0 {
		return ""
	}
	return "; and " + strings.Join(addrs, ", ") + ", as the app's own listen asked (the kernel's hash)"
}

// PrintDescribe prints describe's reply as `pm2 describe` does: a table of fields, then
// the workers.
func PrintDescribe(w io.Writer, d control.Describe) {
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
		{"command", strings.Join(d.Command, " ")}, {"listen", d.Listen}, {"serving", d.Addr + appPorts(d.AppPorts)},
		{"steering", d.Steering}, {"instances", instances + " configured, " + strconv.Itoa(d.Workers) + " running"},
		{"env", strings.Join(d.EnvNames, ", ")}, {"restarts", strconv.Itoa(d.Restarts)}, {"uptime", Uptime(d.UptimeS)},
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
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\n", r.ID, r.PID, r.Status, Uptime(r.UptimeS), r.Restarts)
	}
	tw.Flush()
}
