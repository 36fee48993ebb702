package registry

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/onehost/onehost/internal/agent"
	"github.com/onehost/onehost/internal/applog"
	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/procstat"
)

// Status is GET /status: every app, and every worker of the running ones with its app's
// name. Addr and Steering are the first running cluster-mode app's (the only one's, for a
// configuration of one app), so that one-app readers keep their fields.
func (r *Registry) Status(name string) (control.Status, error) {
	apps, err := r.pick(name)
	if err != nil {
		return control.Status{}, err
	}
	st := control.Status{Workers: []control.Worker{}}
	for _, a := range apps {
		as := control.App{Name: a.name, Mode: a.mode(), Status: "stopped"}
		if sup := a.current(); sup != nil {
			rows := sup.Status()
			as.Status, as.Workers = "running", len(rows)
			if !a.config().Fork() {
				as.Addr, as.Steering, as.AppPorts = sup.Addr(), sup.Steering(), sup.AppPorts()
				if st.Addr == "" {
					st.Addr, st.Steering, st.AppPorts = as.Addr, as.Steering, as.AppPorts
				}
			}
			st.Workers = append(st.Workers, a.rows(rows)...)
		}
		st.Apps = append(st.Apps, as)
	}
	return st, nil
}

// rows are the app's cluster's status rows as the control protocol carries them, each
// slot's restarts counting those before the app was last stopped.
func (a *app) rows(rows []cluster.WorkerStatus) []control.Worker {
	out := make([]control.Worker, len(rows))
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, w := range rows {
		out[i] = control.Worker(w)
		out[i].Restarts += a.restarts[w.ID]
	}
	return out
}

// Describe is one app's details.
func (r *Registry) Describe(name string) (control.Describe, error) {
	a, err := r.one(name)
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
		d.WorkerRow = a.rows(sup.Status())
		d.Workers = len(d.WorkerRow)
		if !conf.Fork() {
			d.Addr, d.Steering, d.AppPorts = sup.Addr(), sup.Steering(), sup.AppPorts()
		}
		for _, w := range d.WorkerRow {
			d.Restarts += w.Restarts
			d.UptimeS = max(d.UptimeS, w.UptimeS)
		}
	}
	return d, nil
}

// ErrNoWorker is a slot that no app of the supervisor has (mapped to 404).
var ErrNoWorker = errors.New("no such worker")

// HasSlot reports whether an app named (every app for "") has a worker in slot: `logs 7`
// for a slot that does not exist is an error naming those that do, not an empty log.
func (r *Registry) HasSlot(name string, slot int) error {
	apps, err := r.pick(name)
	if err != nil {
		return err
	}
	var ids []string
	for _, a := range apps {
		sup := a.current()
		if sup == nil {
			continue
		}
		for _, w := range sup.Status() {
			if w.ID == slot {
				return nil
			}
			id := strconv.Itoa(w.ID)
			if len(apps) > 1 && a.name != "" {
				id = a.name + " " + id
			}
			ids = append(ids, id)
		}
	}
	who := "this supervisor has"
	if name != "" && name != "all" {
		who = "app " + name + " has"
	}
	if len(ids) == 0 {
		return fmt.Errorf("worker %d: %w: %s no running worker (supervisor status lists them)", slot, ErrNoWorker, who)
	}
	return fmt.Errorf("worker %d: %w: %s %s (supervisor status lists them)", slot, ErrNoWorker, who, strings.Join(ids, ", "))
}

// IsLabel reports whether v is the label of the one app without a name (its program's
// name, which its lines show as APP): `logs app.js` is then that app's log, as in pm2.
func (r *Registry) IsLabel(v string) bool {
	return len(r.apps) == 1 && r.apps[0].name == "" && v == applog.Label(cluster.App{Config: *r.apps[0].config()})
}

// WorkerPIDs are the pids of every app's workers now, by their status.
func (r *Registry) WorkerPIDs() map[int]bool {
	pids := map[int]bool{}
	for _, a := range r.apps {
		if sup := a.current(); sup != nil {
			for _, w := range sup.Status() {
				if w.PID > 0 {
					pids[w.PID] = true
				}
			}
		}
	}
	return pids
}

// WorkerLineage finds whether process pid is one of the supervisor's workers or a process
// one of them started, and returns that worker's pid (self's when pid descends from the
// supervisor by another way: any child of the supervisor is a worker, a shim or a check it
// runs), 0 when it is neither. A worker starts in a process group of its own (spawn.go's
// Setpgid), which its children share unless they leave it; one that left it (setsid) still
// has the worker among its ancestors, unless it also double-forked away, and an adopted
// worker is no child of this supervisor but is in the status. So each process from pid up
// to init is checked by its pid, its parent and its process group. read is
// procstat.ReadLineage in the supervisor (a table in the tests). Pid 0 is a peer outside
// the supervisor's pid namespace, which none of its descendants is. An unreadable process
// is an error: the caller refuses rather than guess.
func WorkerLineage(pid, self int, workers map[int]bool, read func(int) (procstat.Lineage, error)) (int, error) {
	if pid <= 0 || pid == self {
		return 0, nil
	}
	for p, hops := pid, 0; p > 1 && hops < 1<<16; hops++ {
		if workers[p] || (p == self && p != pid) {
			return p, nil
		}
		l, err := read(p)
		if err != nil {
			return 0, err
		}
		if workers[l.PGID] {
			return l.PGID, nil
		}
		p = l.PPID
	}
	return 0, nil
}

// AgentState is the host's state for the agent: the cluster-mode apps' workers (a fork
// app has no socket of ours a balancer sends to; the fork apps' when there is no other),
// the drain and the stop. It reads snapshots only: never waits for a cluster's loop.
func (r *Registry) AgentState() agent.State {
	st := agent.State{Drained: r.drained.Load(), Stopping: r.stopping.Load()}
	clusters := false
	for _, a := range r.apps {
		clusters = clusters || !a.config().Fork()
	}
	for _, a := range r.apps {
		if clusters && a.config().Fork() {
			continue
		}
		if sup := a.current(); sup != nil {
			sv := sup.Serving()
			st.Online += sv.Online
			st.Desired += sv.Desired
		}
	}
	return st
}

// SetDrained takes the host out of its balancer (true) or back (false): the agent answers
// "drain" (or its whole state again), and every running app's workers close each kept-alive
// connection after its next response (or keep them alive again).
func (r *Registry) SetDrained(on bool) error {
	r.drained.Store(on)
	var errs []error
	for _, a := range r.apps {
		if sup := a.current(); sup != nil {
			if err := sup.SetHostDrained(on); err != nil && !errors.Is(err, cluster.ErrStopped) {
				errs = append(errs, r.wrap(a, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Drained says whether `supervisor drain` took the host out of its balancer.
func (r *Registry) Drained() bool { return r.drained.Load() }

// SetStopping marks the supervisor stopping: the agent answers drain from then on.
func (r *Registry) SetStopping() { r.stopping.Store(true) }

// Cluster is one app as one read sees it: its configuration and its running cluster (nil
// when stopped).
type Cluster struct {
	Name   string
	Config *cluster.Config // not to be written to
	Sup    *cluster.Supervisor
}

// Clusters are every app but the deleted ones, in order, each read once.
func (r *Registry) Clusters() []Cluster {
	var out []Cluster
	for _, a := range r.live() {
		out = append(out, Cluster{Name: a.name, Config: a.config(), Sup: a.current()})
	}
	return out
}

// Multi says whether the configuration has several apps (their names then on lines and
// files).
func (r *Registry) Multi() bool { return len(r.apps) > 1 }
