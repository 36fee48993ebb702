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
	// Warnings are what the file says that is ignored here (PM2 Plus's fields, a deploy
	// block: the file's own go with its first app), for the caller to log.
	Warnings []string
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
	var top map[string]yaml.Node
	if err := yaml.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("decode: %w: want an object with apps: [{name, script, ...}] (JSON or YAML)", err)
	}
	var doc struct {
		Apps []yaml.Node
	}
	var fileWarnings []string
	for k, v := range top {
		switch k {
		case "apps":
			if err := v.Decode(&doc.Apps); err != nil {
				return nil, fmt.Errorf("apps: not a list of apps (line %d): want apps: [{name, script, ...}]", v.Line)
			}
		case "deploy":
			// PM2's deploy clones a repository on hosts over ssh and runs commands there.
			fileWarnings = append(fileWarnings, "deploy: ignored: this supervisor deploys nothing; hosts are rolled here one at a time behind their balancer: "+
				"`supervisor drain`, update the host with your own tool, then `supervisor reload` (or `upgrade`) and `supervisor ready` (docs/fleet.md)")
		default:
			return nil, fmt.Errorf("%s: not read here: an ecosystem file has apps (and deploy, which is ignored here) at the top level", k)
		}
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
	apps[0].Warnings = append(fileWarnings, apps[0].Warnings...)
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
	var args, nodeArgs []string
	var env, envSel, port *yaml.Node
	var logs []string
	var mergeLogs *bool // nil: not given (PM2's default is false)
	var stamp, hasFormat, hasInstances bool
	for i := 0; i+1 < len(app.Content); i += 2 {
		k, v := app.Content[i].Value, app.Content[i+1]
		if strings.HasPrefix(k, "env_") {
			if k == "env_"+envName {
				envSel = v
			}
			continue
		}
		f, known := pm2Fields[k]
		if !known {
			return App{}, false, unknownField(at, k)
		}
		switch f.kind {
		case fieldTaken:
			switch f.ours {
			case "log_date_format":
				hasFormat = true
			case "instances":
				hasInstances = true
			}
			put(f.ours, v)
			continue
		case fieldIgnored:
			continue
		case fieldWarned:
			if !f.atDefault(v) {
				e.Warnings = append(e.Warnings, fmt.Sprintf("%s.%s: ignored: %s", at, k, f.why))
			}
			continue
		case fieldRefused:
			if f.atDefault(v) {
				continue
			}
			return App{}, false, fmt.Errorf("%s.%s: not supported here: %s", at, k, f.why)
		}
		var err error
		switch f.ours {
		case "name":
			err = v.Decode(&e.Name)
		case "script":
			err = v.Decode(&script)
		case "interpreter":
			err = v.Decode(&interpreter)
		case "args", "node_args":
			var l []string
			if v.Kind == yaml.SequenceNode {
				err = v.Decode(&l)
			} else {
				var s string
				if err = v.Decode(&s); err == nil {
					l = strings.Fields(s) // PM2 splits a string on spaces too
				}
			}
			if f.ours == "args" {
				args = l
			} else {
				nodeArgs = l
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
		case "port": // PM2's shortcut for env.PORT
			port = v
		case "time":
			err = v.Decode(&stamp)
		case "stop_exit_codes": // a code or a list of them
			if v.Kind == yaml.ScalarNode {
				v = &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{v}}
			}
			put("stop_exit_codes", v)
		case "merge_logs":
			var m bool
			if err = v.Decode(&m); err == nil {
				mergeLogs = &m
			}
		case "out_file", "error_file", "log_file":
			if v.Tag == "!!bool" {
				if v.Value == "true" { // PM2's log_file: true is its own default path
					err = errors.New("true: PM2's default log path under ~/.pm2 is not used here: give a path, or drop it and run with -log-dir DIR for one file per instance")
				}
				break
			}
			var p string
			if err = v.Decode(&p); err == nil && p != "" {
				logs = append(logs, p)
			}
		}
		if err != nil {
			return App{}, false, fmt.Errorf("%s.%s: %w", at, k, err)
		}
	}
	if stamp && !hasFormat { // PM2's time: true
		put("log_date_format", &yaml.Node{Kind: yaml.ScalarNode, Value: DefaultLogDateFormat})
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
	command := ecosystemCommand(script, interpreter, nodeArgs, args)
	if mode == "" {
		// PM2's default: cluster mode for an app given instances, else fork (one process
		// that binds what it wants itself), as `pm2 start` runs it. (PM2 makes only Node
		// apps clusters; here any program that takes the slot's socket is one.)
		mode = ExecFork
		if hasInstances {
			mode = ExecCluster
		}
	}
	if len(nodeArgs) > 0 && interpreter == "none" {
		return App{}, false, fmt.Errorf("%s.node_args: %q with interpreter: none: there is no interpreter to pass them to: drop node_args, or name the interpreter", at, nodeArgs)
	}
	put("exec_mode", &yaml.Node{Kind: yaml.ScalarNode, Value: mode})
	if env != nil || envSel != nil || port != nil {
		merged := map[string]string{}
		if port != nil {
			var p string
			if err := port.Decode(&p); err != nil {
				return App{}, false, fmt.Errorf("%s.port: %w", at, err)
			}
			merged["PORT"] = p // env.PORT, when given, wins (applied after)
		}
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
	var cmdNode yaml.Node
	if err := cmdNode.Encode(command); err != nil {
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

// pm2Interpreters are the interpreters PM2 picks by the script's extension (PM2's
// interpreter.json; python3 for .py, where PM2 falls back to it).
var pm2Interpreters = map[string]string{
	".js": "node", ".cjs": "node", ".mjs": "node", ".py": "python3", ".sh": "bash", ".rb": "ruby",
	".php": "php", ".pl": "perl", ".coffee": "coffee", ".ls": "lsc", ".ts": "bun", ".tsx": "bun",
}

// ecosystemCommand is the command line of an app: interpreter, its arguments (node_args),
// the script and its arguments. Without an interpreter it is picked by extension as PM2
// does; a directory (a path ending in /, PM2's own template's './service-worker/') is a
// Node package, run with node; any other script runs itself.
func ecosystemCommand(script, interpreter string, nodeArgs, args []string) []string {
	if interpreter == "" {
		interpreter = pm2Interpreters[filepath.Ext(script)]
		if interpreter == "bun" { // Node strips TypeScript's types itself since 22.18
			if _, err := exec.LookPath("bun"); err != nil {
				interpreter = "node"
			}
		}
		if strings.HasSuffix(script, "/") {
			interpreter = "node"
		}
	}
	var command []string
	if interpreter != "" && interpreter != "none" {
		command = append([]string{interpreter}, nodeArgs...)
	}
	return append(append(command, script), args...)
}
