// A fleet's shared write log (docs/fleet.md). With -fleet (or the configuration's fleet:)
// this host is one of several that keep one database through a write log: the supervisor
// runs the host's log node (cmd/lognode, beside this binary) as one more app, a fork app
// named lognode, and hands every app the fleet's settings in its environment
// (internal/fleetspec's ONEHOST_FLEET...). It interprets nothing else: the node and the
// workers read the settings; a worker that must not take traffic says so over ipc
// (ipc.Msg.NotServing), which the agent counts as not online.
//
// The node across the supervisor's life: `kill`, `stop lognode` and `reload`/`restart`
// stop it with SIGTERM, and it hands the stream's leadership away before it exits (a
// step-down, ~0.3 s without writes, instead of an election after a silent leader, 4-9 s).
// Across `upgrade` (and a kill -9 of the supervisor) it does not die with the old image:
// it clears its parent-death signal, serves on, and the node the new image starts takes
// over from it with the same planned stop (cmd/lognode's pid file in the log directory).

package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/fleetspec"
)

// logNodeApp names the log node's app.
const logNodeApp = "lognode"

// logFlags are run's -fleet flags.
type logFlags struct{ hosts, self, dir, sync string }

func (l *logFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&l.hosts, "fleet", "", "this host is one of a fleet sharing one database: every host NAME=ADDR[:PORT],... (the same list on every host; the log's ports default to 4222 and 6222, ADDR:PORT sets the client port and PORT+2000 the route port); runs this host's log node as the app lognode")
	fs.StringVar(&l.self, "fleet-self", "", "with -fleet: this host's name in the list")
	fs.StringVar(&l.dir, "fleet-dir", "", "with -fleet: the directory of this host's copy of the write log")
	fs.StringVar(&l.sync, "fleet-sync", "", "with -fleet: always = fsync every write on every log node before it is acknowledged (default: the log's own policy, every 2 minutes)")
}

// logSpec is the fleet from the flags, else from the configuration (every app that has a
// fleet: section must agree); ok is false without one.
func (l logFlags) logSpec(specs []cluster.App) (spec fleetspec.Spec, ok bool, err error) {
	fc := cluster.FleetConfig{Hosts: l.hosts, Self: l.self, Dir: l.dir, Sync: l.sync}
	if l.hosts == "" {
		if !fc.IsZero() {
			return spec, false, fmt.Errorf("fleet-self, fleet-dir and fleet-sync need -fleet NAME=ADDR,NAME=ADDR,... (the fleet's hosts)")
		}
		for _, sp := range specs {
			if sp.Config.Fleet.IsZero() {
				continue
			}
			if !fc.IsZero() && sp.Config.Fleet != fc {
				return spec, false, fmt.Errorf("fleet: app %s says another fleet than the others: write one fleet: section (or -fleet)", sp.Name)
			}
			fc = sp.Config.Fleet
		}
		if fc.IsZero() {
			return spec, false, nil
		}
	}
	hosts, err := fleetspec.ParseHosts(fc.Hosts)
	if err != nil {
		return spec, false, err
	}
	dir := fc.Dir
	if dir != "" {
		if dir, err = filepath.Abs(dir); err != nil {
			return spec, false, fmt.Errorf("fleet-dir: %w", err)
		}
	}
	spec = fleetspec.Spec{Hosts: hosts, Self: fc.Self, Dir: dir, Sync: fc.Sync}
	return spec, true, spec.Validate()
}

// withLogNode adds the log node's app to specs and the fleet's settings to every app's
// environment, when there is a fleet.
func (l logFlags) withLogNode(specs []cluster.App, exe string) ([]cluster.App, string, error) {
	spec, ok, err := l.logSpec(specs)
	if err != nil || !ok {
		return specs, "", err
	}
	env := map[string]string{}
	for _, kv := range spec.Env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for i := range specs {
		if specs[i].Name == logNodeApp {
			return nil, "", fmt.Errorf("app %s: that name is the fleet's log node's: rename the app", logNodeApp)
		}
		if specs[i].Name == "" {
			specs[i].Name = filepath.Base(specs[i].Config.Command[0]) // two apps now: each needs a name
		}
		merged := map[string]string{}
		for k, v := range specs[i].Config.Env {
			merged[k] = v
		}
		for k, v := range env {
			merged[k] = v
		}
		specs[i].Config.Env = merged
	}
	node := cluster.App{Name: logNodeApp, Config: cluster.Config{
		ExecMode:  cluster.ExecFork,
		Instances: 1,
		Command:   []string{filepath.Join(filepath.Dir(exe), "lognode")},
		Env:       env,
		// The planned stop steps down first (~0.3 s) and waits for another leader: give
		// it time before SIGKILL.
		KillTimeout: cluster.Duration(10 * time.Second),
	}}
	if err := node.Config.Validate(); err != nil {
		return nil, "", fmt.Errorf("app %s: %w", logNodeApp, err)
	}
	reapOnce.Do(func() { reapPreviousNode(spec.Dir) })
	return append(specs, node), spec.Warning(), nil
}

var reapOnce sync.Once

// reapPreviousNode: after an upgrade in place, the previous image's log node is still this
// process's child (it outlived the exec); the node this image starts stops it (cmd/lognode's
// take-over), and nobody else would wait for it: a goroutine here does, for that pid alone
// (waiting on one pid takes no other child's status from os/exec).
func reapPreviousNode(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "lognode.pid"))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return
	}
	// The fields after the command's closing parenthesis: state, then the parent's pid.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 || f[1] != strconv.Itoa(os.Getpid()) {
		return
	}
	go func() { // ends when the previous node has exited
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
				return
			}
		}
	}()
}
