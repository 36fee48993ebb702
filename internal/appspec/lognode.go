package appspec

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
// The previous image's node is still the supervisor's child then; the supervisor's
// subreaper (internal/subreaper) waits for it once it has exited, as for any child that
// no exec.Cmd of the new image waits for.

import (
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"time"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/fleetspec"
)

// LogNodeApp names the log node's app.
const LogNodeApp = "lognode"

// fleetOf is the fleet from the flags (Source.Fleet), else from the configuration (every
// app that has a fleet: section must agree); ok is false without one.
func (src Source) fleetOf(specs []cluster.App) (spec fleetspec.Spec, ok bool, err error) {
	fc := src.Fleet
	if fc.Hosts == "" {
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
	dir := fc.Dir
	if dir != "" {
		if dir, err = filepath.Abs(dir); err != nil {
			return spec, false, fmt.Errorf("fleet-dir: %w", err)
		}
	}
	spec, err = fleetspec.Parse(fc.Hosts, fc.Self, dir, fc.Sync)
	return spec, err == nil, err
}

// withLogNode adds the log node's app to specs and the fleet's settings to every app's
// environment, when there is a fleet and Source.LogNode names the node's binary (without
// it: the file's own apps, as a command that names them by the file reads them). What the
// fleet's spec warns of (fewer than three hosts) is the node app's warning, which the
// supervisor logs as each app's.
func (src Source) withLogNode(specs []cluster.App) ([]cluster.App, error) {
	if src.LogNode == "" {
		return specs, nil
	}
	spec, ok, err := src.fleetOf(specs)
	if err != nil || !ok {
		return specs, err
	}
	env := map[string]string{}
	for _, kv := range spec.Env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for i := range specs {
		if specs[i].Name == LogNodeApp {
			return nil, fmt.Errorf("app %s: that name is the fleet's log node's: rename the app", LogNodeApp)
		}
		if specs[i].Name == "" {
			specs[i].Name = filepath.Base(specs[i].Config.Command[0]) // two apps now: each needs a name
		}
		merged := maps.Clone(specs[i].Config.Env)
		if merged == nil {
			merged = map[string]string{}
		}
		maps.Copy(merged, env)
		specs[i].Config.Env = merged
	}
	node := cluster.App{Name: LogNodeApp, Config: cluster.Config{
		ExecMode:  cluster.ExecFork,
		Instances: 1,
		Command:   []string{src.LogNode},
		Env:       env,
		// The planned stop steps down first (~0.3 s) and waits for another leader: give
		// it time before SIGKILL.
		KillTimeout: cluster.Duration(10 * time.Second),
	}}
	if err := node.Config.Validate(); err != nil {
		return nil, fmt.Errorf("app %s: %w", LogNodeApp, err)
	}
	if w := spec.Warning(); w != "" {
		node.Warnings = append(node.Warnings, w)
	}
	return append(specs, node), nil
}
