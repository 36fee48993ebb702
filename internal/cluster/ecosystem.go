package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// App is one app of a PM2 ecosystem file: its name, its cluster's Config, and what the
// file says beyond Config.
type App struct {
	// Name is the app's `name`, else its script's base name without the extension, as
	// PM2 names it. Unique in the file.
	Name    string
	Config  Config
	LogFile string // out_file / error_file / log_file, all one file; "" if none given
}

// ecosystemFields maps the PM2 app fields this supervisor understands to the Config field
// (its YAML name) they become; "" for those handled by hand.
var ecosystemFields = map[string]string{
	"name": "", "script": "", "args": "", "interpreter": "", "exec_mode": "", "cwd": "cwd",
	"instances": "instances", "env": "", "wait_ready": "wait_ready", "listen_timeout": "listen_timeout",
	"kill_timeout": "kill_timeout", "kill_signal": "kill_signal", "shutdown_with_message": "shutdown_with_message",
	"max_memory_restart": "max_memory_restart", "min_uptime": "min_uptime", "max_restarts": "max_restarts",
	"restart_delay": "restart_delay", "exp_backoff_restart_delay": "exp_backoff_restart_delay",
	"merge_logs": "", "out_file": "", "error_file": "", "log_file": "",
}

// IsEcosystem reports whether path names a PM2 ecosystem file rather than our YAML: a
// JavaScript file, or a document whose top level has `apps`.
func IsEcosystem(path string) bool {
	switch filepath.Ext(path) {
	case ".js", ".cjs", ".mjs":
		return true
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var top map[string]yaml.Node
	return yaml.Unmarshal(b, &top) == nil && top["apps"].Kind != 0
}

// LoadEcosystem reads a PM2 ecosystem file (.json, .yaml/.yml or .config.js; JSON is YAML)
// and returns every app in `apps`, in order, each its own cluster (see ParseEcosystem).
// A .config.js / .cjs / .mjs file is evaluated with node, as PM2 requires it; without node
// on PATH the error says so and how to turn it into JSON.
func LoadEcosystem(path, envName string) ([]App, error) {
	var r io.Reader
	switch filepath.Ext(path) {
	case ".js", ".cjs", ".mjs":
		b, err := loadJSEcosystem(path, exec.LookPath)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	default:
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("open ecosystem file: %w", err)
		}
		defer f.Close()
		r = f
	}
	apps, err := ParseEcosystem(r, envName)
	if err != nil {
		return nil, fmt.Errorf("ecosystem %s: %w", path, err)
	}
	return apps, nil
}

func mustAbs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// ParseEcosystem reads an ecosystem document (see LoadEcosystem): every app of `apps`,
// merging `env_NAME` over `env` when envName is given (pm2 start --env NAME; an app
// without env_NAME keeps its env, and a name no app has is an error). A field this
// supervisor does not support is an error that names it, never ignored; so are two apps
// of one name.
func ParseEcosystem(r io.Reader, envName string) ([]App, error) {
	b, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	var doc struct {
		Apps []yaml.Node `yaml:"apps"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("decode: %w (only `apps` is read at the top level)", err)
	}
	if len(doc.Apps) == 0 {
		return nil, errors.New("apps: no app given")
	}
	apps := make([]App, 0, len(doc.Apps))
	seen := map[string]int{}
	envFound := envName == ""
	for i := range doc.Apps {
		app, hasEnv, err := parseApp(&doc.Apps[i], fmt.Sprintf("apps[%d]", i), envName)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[app.Name]; dup {
			return nil, fmt.Errorf("apps[%d].name: %q is apps[%d]'s name too: give each app a name of its own", i, app.Name, j)
		}
		seen[app.Name] = i
		envFound = envFound || hasEnv
		apps = append(apps, app)
	}
	if !envFound {
		return nil, fmt.Errorf("env %q: no app has env_%s", envName, envName)
	}
	return apps, nil
}

// parseApp reads one app object; at names it in errors (apps[i]). hasEnv says whether it
// has env_NAME.
func parseApp(app *yaml.Node, at, envName string) (App, bool, error) {
	if app.Kind != yaml.MappingNode {
		return App{}, false, fmt.Errorf("%s: not an object", at)
	}
	// Our own document, field by field, then decoded and validated as any config.
	ours := &yaml.Node{Kind: yaml.MappingNode}
	put := func(k string, v *yaml.Node) {
		ours.Content = append(ours.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k}, v)
	}
	var e App
	var script, interpreter, mode string
	var args []string
	var env, envSel *yaml.Node
	var logs []string
	var mergeLogs *bool // nil: not given (PM2's default is false)
	for i := 0; i+1 < len(app.Content); i += 2 {
		k, v := app.Content[i].Value, app.Content[i+1]
		if strings.HasPrefix(k, "env_") {
			if k == "env_"+envName {
				envSel = v
			}
			continue
		}
		ourName, known := ecosystemFields[k]
		if !known {
			return App{}, false, fmt.Errorf("%s.%s: not supported by this supervisor (supported: %s, env_NAME)", at, k, supportedFields())
		}
		if ourName != "" {
			put(ourName, v)
			continue
		}
		var err error
		switch k {
		case "name":
			err = v.Decode(&e.Name)
		case "script":
			err = v.Decode(&script)
		case "interpreter":
			err = v.Decode(&interpreter)
		case "args":
			if v.Kind == yaml.SequenceNode {
				err = v.Decode(&args)
			} else {
				var s string
				if err = v.Decode(&s); err == nil {
					args = strings.Fields(s) // PM2 splits a string on spaces too
				}
			}
		case "exec_mode":
			if err = v.Decode(&mode); err == nil {
				switch mode { // PM2 takes both spellings
				case "cluster", "cluster_mode":
					mode = ExecCluster
				case "fork", "fork_mode":
					mode = ExecFork
				default:
					err = fmt.Errorf("%q: want cluster (every instance on the shared port) or fork (each a process of its own, no shared port)", mode)
				}
			}
		case "env":
			env = v
		case "merge_logs":
			var m bool
			if err = v.Decode(&m); err == nil {
				mergeLogs = &m
			}
		case "out_file", "error_file", "log_file":
			var p string
			if err = v.Decode(&p); err == nil && p != "" {
				logs = append(logs, p)
			}
		}
		if err != nil {
			return App{}, false, fmt.Errorf("%s.%s: %w", at, k, err)
		}
	}
	if script == "" {
		return App{}, false, fmt.Errorf("%s.script: missing: the program to run", at)
	}
	if e.Name == "" { // PM2's default name
		e.Name = strings.TrimSuffix(filepath.Base(script), filepath.Ext(script))
	}
	if err := checkAppName(e.Name); err != nil {
		return App{}, false, fmt.Errorf("%s.name: %w", at, err)
	}
	if mode != "" {
		put("exec_mode", &yaml.Node{Kind: yaml.ScalarNode, Value: mode})
	}
	if env != nil || envSel != nil {
		merged := map[string]string{}
		for _, n := range []*yaml.Node{env, envSel} {
			if n == nil {
				continue
			}
			var m map[string]string
			if err := n.Decode(&m); err != nil {
				return App{}, false, fmt.Errorf("%s.env: %w", at, err)
			}
			for k, v := range m {
				merged[k] = v
			}
		}
		// In fork mode the program binds PORT itself, as under PM2: no socket of ours.
		if port, ok := merged["PORT"]; ok && mode != ExecFork {
			listen, err := ecosystemListen(port, merged["HOST"])
			if err != nil {
				return App{}, false, fmt.Errorf("%s.env.PORT: %w", at, err)
			}
			put("listen", &yaml.Node{Kind: yaml.ScalarNode, Value: listen})
		}
		var n yaml.Node
		if err := n.Encode(merged); err != nil {
			return App{}, false, fmt.Errorf("%s.env: %w", at, err)
		}
		put("env", &n)
	}
	if len(logs) > 0 {
		slices.Sort(logs)
		if logs = slices.Compact(logs); len(logs) > 1 {
			// A worker's stdout and stderr are one pipe here, logged line by line in order;
			// two files would need two pipes per worker and two log sinks.
			return App{}, false, fmt.Errorf("%s.out_file, error_file: %v: separate files for stdout and stderr are not supported here (a worker's output is one stream); "+
				"give out_file and error_file the same path, or log_file alone, with merge_logs: true", at, logs)
		}
		// PM2's merge_logs defaults to false, and then each instance writes a file of its
		// own (NAME-0.log, NAME-1.log); one merged file where PM2 would write several would
		// surprise, so an unset merge_logs is refused like false, with what to write instead.
		switch {
		case mergeLogs == nil:
			return App{}, false, fmt.Errorf("%s.merge_logs: not set, and PM2 then writes one file per instance beside %s: "+
				"set merge_logs: true for one file at %s, or drop out_file/error_file/log_file and run with -log-dir DIR for one file per instance (DIR/worker-SLOT.log)", at, logs[0], logs[0])
		case !*mergeLogs:
			return App{}, false, fmt.Errorf("%s.merge_logs: false: one file per instance is -log-dir DIR here (DIR/worker-SLOT.log) instead of out_file; set merge_logs: true for one file", at)
		}
		e.LogFile = logs[0]
	}
	var command []string
	switch {
	case interpreter == "none":
		command = []string{script}
	case interpreter != "":
		command = []string{interpreter, script}
	default:
		switch filepath.Ext(script) { // PM2 picks the interpreter by extension
		case ".js", ".cjs", ".mjs":
			command = []string{"node", script}
		case ".py":
			command = []string{"python3", script}
		default:
			command = []string{script}
		}
	}
	var cmdNode yaml.Node
	if err := cmdNode.Encode(append(command, args...)); err != nil {
		return App{}, false, err
	}
	put("command", &cmdNode)
	var c Config
	if err := ours.Decode(&c); err != nil {
		return App{}, false, fmt.Errorf("%s: %w", at, nameField(ours, err))
	}
	if err := c.Validate(); err != nil {
		return App{}, false, fmt.Errorf("%s: %w", at, err)
	}
	e.Config = c
	return e, envSel != nil, nil
}

// checkAppName refuses names the commands could not take: an app name is an argument of
// status, logs, reload, scale, stop and restart, beside slot numbers and counts, and names
// log files.
func checkAppName(n string) error {
	if n == "" || len(n) > 64 {
		return fmt.Errorf("%q: want 1 to 64 characters", n)
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("%q: want letters, digits, '-', '_' and '.' only (it names log files and is an argument of the commands)", n)
		}
	}
	if _, err := strconv.Atoi(n); err == nil || n[0] == '-' || n[0] == '+' || n[0] == '.' {
		return fmt.Errorf("%q: a name may not be a number or start with '-', '+' or '.' (it would read as a slot, a count or a flag)", n)
	}
	return nil
}

func supportedFields() string {
	var names []string
	for k := range ecosystemFields {
		names = append(names, k)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// ecosystemListen is the address a PM2 app's cluster serves: the port the app itself asks
// for in env.PORT (PM2 shares whatever port the app listens on), on env.HOST when given.
// Without HOST it is every interface, 0.0.0.0, as the app's own listen(PORT) would bind
// under PM2 (node binds all interfaces when no host is given); our default 127.0.0.1 would
// leave a PM2 user's API unreachable from outside. -listen still overrides it.
func ecosystemListen(port, host string) (string, error) {
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("%q: want a port number (0 to 65535)", port)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return net.JoinHostPort(host, strconv.Itoa(n)), nil
}
