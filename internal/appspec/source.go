// Package appspec turns a supervisor's configuration into the apps it runs: the file (our
// YAML or a PM2 ecosystem file) with the command line's overrides, once, for `run`, `run
// -check`, `startup` and `reload -update-env` alike (source.go); and what can be judged of
// them before anything starts, so that a worker sure to die at start is refused instead of
// restarted until errored (launch.go; our worker's settings judged by the worker itself,
// `worker -check`, in askworker.go).
package appspec

import (
	"fmt"
	"slices"
	"strings"

	"github.com/onehost/onehost/internal/cluster"
)

// Source is where a supervisor's apps come from: a configuration file (our YAML, or a PM2
// ecosystem file) and the command line's overrides. The zero value is one app of our
// worker with the defaults.
type Source struct {
	// Path is the configuration file; "" for none (one app, of Command or our worker).
	Path string
	// EnvName merges an ecosystem app's env_NAME over its env (pm2 start --env NAME);
	// Only runs the ecosystem file's app of that name alone (pm2 start --only NAME).
	EnvName, Only string
	// Instances (max, -1 or N), Listen and Steering override the configuration's, as
	// Command (the program and its arguments) does; they apply to one app only.
	Instances, Listen, Steering string
	Command                     []string
	// Name names the one app (pm2 start --name); for a file of several apps it is refused.
	Name string
	// Ours is our worker binary: the command of an app that names none.
	Ours string
	// Fleet is -fleet's host list and the rest (lognode.go), over the configuration's
	// fleet:; LogNode the log node's binary it runs then ("": no node and no fleet
	// settings, the file's own apps only).
	Fleet   cluster.FleetConfig
	LogNode string
}

// Load reads what to run and applies the overrides, then validates each app: at start,
// for `run -check` and `startup`, and again for `reload -update-env`, so that the file read
// again compares with what runs field by field.
func (src Source) Load() ([]cluster.App, error) {
	specs, err := src.read()
	if err != nil {
		return nil, err
	}
	if err := src.override(specs); err != nil {
		return nil, err
	}
	return src.withLogNode(specs)
}

// read reads the configuration: one unnamed app, or an ecosystem file's apps (the one
// Only names).
func (src Source) read() ([]cluster.App, error) {
	path := src.Path
	var specs []cluster.App // what to run: one unnamed app, or an ecosystem file's apps
	isEco := path != "" && cluster.IsEcosystem(path)
	switch {
	case isEco:
		apps, err := cluster.LoadEcosystem(path, src.EnvName)
		if err != nil {
			return nil, err
		}
		specs = apps
	case src.EnvName != "":
		return nil, fmt.Errorf("env: %q applies to a PM2 ecosystem file, and -config %q is not one", src.EnvName, path)
	case src.Only != "":
		return nil, fmt.Errorf("only: %q applies to a PM2 ecosystem file, and -config %q is not one", src.Only, path)
	case path != "":
		c, err := cluster.LoadConfig(path)
		if err != nil {
			return nil, err
		}
		specs = []cluster.App{{Config: c}}
	default:
		specs = []cluster.App{{}}
	}
	if src.Only != "" {
		i := slices.IndexFunc(specs, func(a cluster.App) bool { return a.Name == src.Only })
		if i < 0 {
			var names []string
			for _, a := range specs {
				names = append(names, a.Name)
			}
			return nil, fmt.Errorf("only: %q: %s has no app of that name (its apps: %s)", src.Only, path, strings.Join(names, ", "))
		}
		specs = specs[i : i+1]
	}
	return specs, nil
}

// override applies -instances, -listen, -steering and the command after -- to the apps,
// then validates each.
func (src Source) override(specs []cluster.App) error {
	// The command line's settings are one cluster's: with several apps they would apply
	// to all, which is never what a file of different apps means.
	overrides := map[string]bool{"instances": src.Instances != "", "listen": src.Listen != "", "steering": src.Steering != "", "-- COMMAND": len(src.Command) > 0, "name": src.Name != ""}
	for _, name := range []string{"instances", "listen", "steering", "-- COMMAND", "name"} {
		if overrides[name] && len(specs) > 1 {
			return fmt.Errorf("%s: applies to one app, and %s has %d: set it in the file, or pick one app with -only NAME", name, src.Path, len(specs))
		}
	}
	if src.Name != "" {
		if !validAppName(src.Name) {
			return fmt.Errorf("name: %q: want letters, digits, '_', '.' or '-' (an app's name names its log files and its commands)", src.Name)
		}
		specs[0].Name = src.Name
	}
	for i := range specs {
		cfg := &specs[i].Config
		if src.Instances != "" {
			n, err := cluster.ParseInstances(src.Instances)
			if err != nil {
				return err
			}
			cfg.Instances = n
		}
		if src.Listen != "" {
			cfg.Listen = src.Listen
		}
		if src.Steering != "" {
			cfg.Steering = src.Steering
		}
		if len(src.Command) > 0 {
			cfg.Command = src.Command
		}
		if len(cfg.Command) == 0 {
			cfg.Command = []string{src.Ours}
			// Our worker says ready once its database is open: online means serving. (A
			// program named by the configuration is waited for once one of its workers
			// has said ready, or from the start with wait_ready: true.)
			ready := true
			cfg.WaitReady = &ready
		}
		if err := cfg.Validate(); err != nil { // after the overrides: -listen on a fork app, say
			if len(specs) > 1 || specs[i].Name != "" {
				return fmt.Errorf("app %s: %w", specs[i].Name, err)
			}
			return err
		}
	}
	return nil
}

// AgentAddress is the agent's HOST:PORT: the -agent flag's, else the configuration's
// (agent:), which must agree when several apps set it.
func AgentAddress(flagValue string, specs []cluster.App) (string, error) {
	if flagValue != "" {
		return flagValue, (cluster.Config{Agent: flagValue}).Validate()
	}
	addr := ""
	for _, sp := range specs {
		if a := sp.Config.Agent; a != "" && addr != "" && a != addr {
			return "", fmt.Errorf("agent: app %s says %q and another %q: the agent is the supervisor's, one for the host: set one (or -agent HOST:PORT)", sp.Name, a, addr)
		} else if a != "" {
			addr = a
		}
	}
	return addr, nil
}

// validAppName: a name for an app given on the command line: what a log file's name and a
// command's argument can carry.
func validAppName(s string) bool {
	if s == "" || s == "all" || s[0] == '-' || s[0] == '.' {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '.' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
