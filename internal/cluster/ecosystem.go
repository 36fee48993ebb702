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
// has env_NAME. Its steps: the fields, one by one (readFields); then what PM2 derives from
// them (derive), the environment and the port (envFields), the log file (logFile), and
// last our own config built from them, decoded and validated as any config (config).
func parseApp(app *yaml.Node, at, envName string) (App, bool, error) {
	if app.Kind != yaml.MappingNode {
		return App{}, false, fmt.Errorf("%s: not an object", at)
	}
	a := &pm2App{at: at, ours: &yaml.Node{Kind: yaml.MappingNode}}
	if err := a.readFields(app, envName); err != nil {
		return App{}, false, err
	}
	if err := a.derive(); err != nil {
		return App{}, false, err
	}
	if err := a.envFields(); err != nil {
		return App{}, false, err
	}
	if err := a.logFile(); err != nil {
		return App{}, false, err
	}
	if err := a.config(); err != nil {
		return App{}, false, err
	}
	return a.e, a.envSel != nil, nil
}

// pm2App is one app of an ecosystem file while parseApp reads it: our own config document,
// built field by field, and the PM2 fields read by hand.
type pm2App struct {
	at   string     // the app in errors: apps[i]
	ours *yaml.Node // our config document: a mapping
	e    App

	script, interpreter, mode string
	args, nodeArgs            []string
	command                   []string
	env, envSel, port         *yaml.Node
	logs                      []string
	mergeLogs                 *bool // nil: not given (PM2's default is false)
	stamp, hasFormat          bool
	hasInstances              bool
}

// put adds the field k of our config document.
func (a *pm2App) put(k string, v *yaml.Node) {
	a.ours.Content = append(a.ours.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k}, v)
}

// readFields reads each field of the app object in order: env_NAME kept for envName, a field
// of ours passed on, one that means nothing here ignored or warned about, one refused unless
// at PM2's default, and the rest read by hand (byHand). A field PM2 does not know is an error.
func (a *pm2App) readFields(app *yaml.Node, envName string) error {
	for i := 0; i+1 < len(app.Content); i += 2 {
		k, v := app.Content[i].Value, app.Content[i+1]
		if strings.HasPrefix(k, "env_") {
			if k == "env_"+envName {
				a.envSel = v
			}
			continue
		}
		f, known := pm2Fields[k]
		if !known {
			return unknownField(a.at, k)
		}
		switch f.kind {
		case fieldTaken:
			switch f.ours {
			case "log_date_format":
				a.hasFormat = true
			case "instances":
				a.hasInstances = true
			}
			a.put(f.ours, v)
			continue
		case fieldIgnored:
			continue
		case fieldWarned:
			if !f.atDefault(v) {
				a.e.Warnings = append(a.e.Warnings, fmt.Sprintf("%s.%s: ignored: %s", a.at, k, f.why))
			}
			continue
		case fieldRefused:
			if f.atDefault(v) {
				continue
			}
			return fmt.Errorf("%s.%s: not supported here: %s", a.at, k, f.why)
		}
		if err := a.byHand(f.ours, v); err != nil {
			return fmt.Errorf("%s.%s: %w", a.at, k, err)
		}
	}
	return nil
}

// byHand reads a field that is not one of ours as it is: ours is its canonical name.
func (a *pm2App) byHand(ours string, v *yaml.Node) error {
	var err error
	switch ours {
	case "name":
		err = v.Decode(&a.e.Name)
	case "script":
		err = v.Decode(&a.script)
	case "interpreter":
		err = v.Decode(&a.interpreter)
	case "args":
		a.args, err = pm2List(v)
	case "node_args":
		a.nodeArgs, err = pm2List(v)
	case "exec_mode":
		a.mode, err = pm2ExecMode(v)
	case "env":
		a.env = v
	case "port": // PM2's shortcut for env.PORT
		a.port = v
	case "time":
		err = v.Decode(&a.stamp)
	case "stop_exit_codes": // a code or a list of them
		if v.Kind == yaml.ScalarNode {
			v = &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{v}}
		}
		a.put("stop_exit_codes", v)
	case "merge_logs":
		var m bool
		if err = v.Decode(&m); err == nil {
			a.mergeLogs = &m
		}
	case "out_file", "error_file", "log_file":
		var p string
		if p, err = pm2LogPath(v); err == nil && p != "" {
			a.logs = append(a.logs, p)
		}
	}
	return err
}

// pm2List reads args or node_args: a list, or a string PM2 splits on spaces too.
func pm2List(v *yaml.Node) ([]string, error) {
	var l []string
	if v.Kind == yaml.SequenceNode {
		err := v.Decode(&l)
		return l, err
	}
	var s string
	if err := v.Decode(&s); err != nil {
		return l, err
	}
	return strings.Fields(s), nil
}

// pm2ExecMode reads exec_mode, in either of PM2's spellings.
func pm2ExecMode(v *yaml.Node) (string, error) {
	var mode string
	if err := v.Decode(&mode); err != nil {
		return mode, err
	}
	switch mode {
	case "cluster", "cluster_mode":
		return ExecCluster, nil
	case "fork", "fork_mode":
		return ExecFork, nil
	}
	return mode, fmt.Errorf("%q: want cluster (every instance on the shared port) or fork (each a process of its own, no shared port)", mode)
}

// pm2LogPath reads out_file, error_file or log_file: a path, "" for none; false is none too.
func pm2LogPath(v *yaml.Node) (string, error) {
	if v.Tag == "!!bool" {
		if v.Value == "true" { // PM2's log_file: true is its own default path
			return "", errors.New("true: PM2's default log path under ~/.pm2 is not used here: give a path, or drop it and run with -log-dir DIR for one file per instance")
		}
		return "", nil
	}
	var p string
	err := v.Decode(&p)
	return p, err
}

// derive completes what PM2 derives from the fields read: the log stamp of time: true, the
// app's name, its command line and its exec_mode.
func (a *pm2App) derive() error {
	if a.stamp && !a.hasFormat { // PM2's time: true
		a.put("log_date_format", &yaml.Node{Kind: yaml.ScalarNode, Value: DefaultLogDateFormat})
	}
	if a.script == "" {
		return fmt.Errorf("%s.script: missing: the program to run", a.at)
	}
	if a.e.Name == "" { // PM2's default name
		a.e.Name = strings.TrimSuffix(filepath.Base(a.script), filepath.Ext(a.script))
	}
	if err := checkAppName(a.e.Name); err != nil {
		return fmt.Errorf("%s.name: %w", a.at, err)
	}
	a.command = ecosystemCommand(a.script, a.interpreter, a.nodeArgs, a.args)
	if a.mode == "" {
		// PM2's default: cluster mode for an app given instances, else fork (one process
		// that binds what it wants itself), as `pm2 start` runs it. (PM2 makes only Node
		// apps clusters; here any program that takes the slot's socket is one.)
		a.mode = ExecFork
		if a.hasInstances {
			a.mode = ExecCluster
		}
	}
	if len(a.nodeArgs) > 0 && a.interpreter == "none" {
		return fmt.Errorf("%s.node_args: %q with interpreter: none: there is no interpreter to pass them to: drop node_args, or name the interpreter", a.at, a.nodeArgs)
	}
	a.put("exec_mode", &yaml.Node{Kind: yaml.ScalarNode, Value: a.mode})
	return nil
}

// envFields merges port, env and env_NAME (in that order, the later winning) into our env,
// and in cluster mode makes PORT (and HOST) the address we listen on.
func (a *pm2App) envFields() error {
	if a.env == nil && a.envSel == nil && a.port == nil {
		return nil
	}
	merged := map[string]string{}
	if a.port != nil {
		var p string
		if err := a.port.Decode(&p); err != nil {
			return fmt.Errorf("%s.port: %w", a.at, err)
		}
		merged["PORT"] = p // env.PORT, when given, wins (applied after)
	}
	for _, n := range []*yaml.Node{a.env, a.envSel} {
		if n == nil {
			continue
		}
		var m map[string]string
		if err := n.Decode(&m); err != nil {
			return fmt.Errorf("%s.env: %w", a.at, err)
		}
		for k, v := range m {
			merged[k] = v
		}
	}
	// In fork mode the program binds PORT itself, as under PM2: no socket of ours.
	if port, ok := merged["PORT"]; ok && a.mode != ExecFork {
		listen, err := ecosystemListen(port, merged["HOST"])
		if err != nil {
			return fmt.Errorf("%s.env.PORT: %w", a.at, err)
		}
		a.put("listen", &yaml.Node{Kind: yaml.ScalarNode, Value: listen})
	}
	var n yaml.Node
	if err := n.Encode(merged); err != nil {
		return fmt.Errorf("%s.env: %w", a.at, err)
	}
	a.put("env", &n)
	return nil
}

// logFile makes out_file, error_file and log_file the app's one log file, when they name
// one path and merge_logs is true.
func (a *pm2App) logFile() error {
	if len(a.logs) == 0 {
		return nil
	}
	logs := a.logs
	slices.Sort(logs)
	if logs = slices.Compact(logs); len(logs) > 1 {
		// A worker's stdout and stderr are one pipe here, logged line by line in order;
		// two files would need two pipes per worker and two log sinks.
		return fmt.Errorf("%s.out_file, error_file: %v: separate files for stdout and stderr are not supported here (a worker's output is one stream); "+
			"give out_file and error_file the same path, or log_file alone, with merge_logs: true", a.at, logs)
	}
	// PM2's merge_logs defaults to false, and then each instance writes a file of its
	// own (NAME-0.log, NAME-1.log); one merged file where PM2 would write several would
	// surprise, so an unset merge_logs is refused like false, with what to write instead.
	switch {
	case a.mergeLogs == nil:
		return fmt.Errorf("%s.merge_logs: not set, and PM2 then writes one file per instance beside %s: "+
			"set merge_logs: true for one file at %s, or drop out_file/error_file/log_file and run with -log-dir DIR for one file per instance (DIR/worker-SLOT.log)", a.at, logs[0], logs[0])
	case !*a.mergeLogs:
		return fmt.Errorf("%s.merge_logs: false: one file per instance is -log-dir DIR here (DIR/worker-SLOT.log) instead of out_file; set merge_logs: true for one file", a.at)
	}
	a.e.LogFile = logs[0]
	return nil
}

// config adds the command line to our document, and decodes and validates it as any
// config: the app's Config.
func (a *pm2App) config() error {
	var cmdNode yaml.Node
	if err := cmdNode.Encode(a.command); err != nil {
		return err
	}
	a.put("command", &cmdNode)
	var c Config
	if err := a.ours.Decode(&c); err != nil {
		return fmt.Errorf("%s: %w", a.at, nameField(a.ours, err))
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%s: %w", a.at, err)
	}
	a.e.Config = c
	return nil
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
