package cluster

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// What the supervisor does with each of the fields of PM2's ecosystem file (PM2 7's app
// schema, lib/API/schema.json, with its aliases): every one is known, so a file PM2 takes
// is never refused for a field at PM2's default; a field that means nothing here is
// accepted (with a warning when it is not at its default); a field whose value would
// make this supervisor do something else than PM2 is refused with what to do instead.

type fieldKind int

const (
	fieldTaken   fieldKind = iota // becomes the Config field ours
	fieldByHand                   // read by parseApp (ours: the name it goes by)
	fieldIgnored                  // means nothing here, at any value: silent
	fieldWarned                   // means nothing here: a warning unless at PM2's default
	fieldRefused                  // refused unless at PM2's default, with what to do instead
)

type pm2Field struct {
	kind fieldKind
	ours string // fieldTaken: the Config field's YAML name; fieldByHand: the canonical name
	// def is PM2's default as a YAML scalar ("true", "false"); a null, or a value equal
	// to it, is at the default. "" : no default, so only null (and false) are.
	def string
	why string // fieldWarned: what the warning says; fieldRefused: what to do instead
}

// pm2Fields maps every app field of PM2's schema to what becomes of it.
var pm2Fields = map[string]pm2Field{
	// What to run.
	"name": {kind: fieldByHand, ours: "name"}, "script": {kind: fieldByHand, ours: "script"}, "exec": {kind: fieldByHand, ours: "script"},
	"args": {kind: fieldByHand, ours: "args"}, "interpreter": {kind: fieldByHand, ours: "interpreter"}, "exec_interpreter": {kind: fieldByHand, ours: "interpreter"},
	"node_args": {kind: fieldByHand, ours: "node_args"}, "interpreter_args": {kind: fieldByHand, ours: "node_args"}, "interpreterArgs": {kind: fieldByHand, ours: "node_args"},
	"exec_mode": {kind: fieldByHand, ours: "exec_mode"}, "cwd": {kind: fieldTaken, ours: "cwd"}, "instances": {kind: fieldTaken, ours: "instances"},
	"env": {kind: fieldByHand, ours: "env"}, "port": {kind: fieldByHand, ours: "port"},
	"instance_var": {kind: fieldTaken, ours: "instance_var", def: "NODE_APP_INSTANCE"}, "increment_var": {kind: fieldTaken, ours: "increment_var"},
	// Start, stop, restarts.
	"wait_ready": {kind: fieldTaken, ours: "wait_ready"}, "listen_timeout": {kind: fieldTaken, ours: "listen_timeout"},
	"kill_timeout": {kind: fieldTaken, ours: "kill_timeout"}, "kill_signal": {kind: fieldTaken, ours: "kill_signal"},
	"shutdown_with_message": {kind: fieldTaken, ours: "shutdown_with_message"},
	"max_memory_restart":    {kind: fieldTaken, ours: "max_memory_restart"}, "min_uptime": {kind: fieldTaken, ours: "min_uptime"},
	"max_restarts": {kind: fieldTaken, ours: "max_restarts"}, "restart_delay": {kind: fieldTaken, ours: "restart_delay"},
	"exp_backoff_restart_delay": {kind: fieldTaken, ours: "exp_backoff_restart_delay"},
	"autorestart":               {kind: fieldTaken, ours: "autorestart", def: "true"},
	"stop_exit_codes":           {kind: fieldByHand, ours: "stop_exit_codes"},
	"cron_restart":              {kind: fieldTaken, ours: "cron_restart"}, "cron": {kind: fieldTaken, ours: "cron_restart"},
	"watch": {kind: fieldTaken, ours: "watch", def: "false"}, "ignore_watch": {kind: fieldTaken, ours: "ignore_watch"},
	"watch_delay": {kind: fieldTaken, ours: "watch_delay"},
	// Logs.
	"merge_logs": {kind: fieldByHand, ours: "merge_logs"}, "combine_logs": {kind: fieldByHand, ours: "merge_logs"},
	"out_file": {kind: fieldByHand, ours: "out_file"}, "out": {kind: fieldByHand, ours: "out_file"}, "output": {kind: fieldByHand, ours: "out_file"}, "out_log": {kind: fieldByHand, ours: "out_file"},
	"error_file": {kind: fieldByHand, ours: "error_file"}, "error": {kind: fieldByHand, ours: "error_file"}, "err": {kind: fieldByHand, ours: "error_file"},
	"err_file": {kind: fieldByHand, ours: "error_file"}, "err_log": {kind: fieldByHand, ours: "error_file"},
	"log_file": {kind: fieldByHand, ours: "log_file"}, "log": {kind: fieldByHand, ours: "log_file"},
	"log_date_format": {kind: fieldTaken, ours: "log_date_format"}, "time": {kind: fieldByHand, ours: "time", def: "false"},
	"log_type":     {kind: fieldWarned, why: "the supervisor's log is JSON or console lines by -log-format (json for a collector), not by app"},
	"disable_logs": {kind: fieldWarned, def: "false", why: "every line a worker writes is logged here; -log-level warn leaves the workers' output (info) out"},
	// PM2's own machinery, with nothing to do here.
	"vizion": {kind: fieldIgnored}, "pmx": {kind: fieldIgnored}, "automation": {kind: fieldIgnored}, "windowsHide": {kind: fieldIgnored},
	"source_map_support": {kind: fieldIgnored}, "disable_source_map_support": {kind: fieldIgnored}, "force": {kind: fieldIgnored},
	"username": {kind: fieldIgnored}, "kill_retry_time": {kind: fieldIgnored}, "write": {kind: fieldIgnored}, "execute_command": {kind: fieldIgnored},
	"install_url": {kind: fieldIgnored}, "post_update": {kind: fieldIgnored}, "name_prefix": {kind: fieldIgnored},
	"trace":                {kind: fieldWarned, def: "false", why: "PM2 Plus's transaction tracing; there is none here (metrics: -metrics HOST:PORT, status, monit)"},
	"disable_trace":        {kind: fieldIgnored},
	"v8":                   {kind: fieldWarned, def: "false", why: "PM2 Plus's V8 metrics; there are none here (metrics: -metrics HOST:PORT, status, monit)"},
	"event_loop_inspector": {kind: fieldWarned, def: "false", why: "PM2 Plus's event loop metrics; there are none here"},
	"deep_monitoring":      {kind: fieldWarned, def: "false", why: "PM2 Plus's monitoring; there is none here (metrics: -metrics HOST:PORT, status, monit)"},
	"io":                   {kind: fieldWarned, why: "PM2 Plus's APM settings; there is no APM here"},
	"namespace":            {kind: fieldWarned, why: "apps are named by name here; commands take a name (or none for all)"},
	"append_env_to_name":   {kind: fieldWarned, def: "false", why: "the app keeps its name here whatever -env says"},
	"watch_options":        {kind: fieldWarned, why: "chokidar's options; the watch here is inotify (recursive, dotfiles and node_modules left out): use ignore_watch and watch_delay"},
	"treekill":             {kind: fieldWarned, def: "true", why: "a stopped worker's whole process group is stopped here, SIGKILL after kill_timeout"},
	// Different behaviour: refused unless at the default.
	"autostart": {kind: fieldRefused, def: "true", why: "every app of the file starts here: drop autostart and leave the app out with -only NAME (another app), or `supervisor stop APP` once started"},
	"filter_env": {kind: fieldRefused, def: "false", why: "the workers get the supervisor's environment here: start the supervisor with only what the apps may see " +
		"(env -i PATH=$PATH supervisor run ..., or its systemd unit, which sets its own) and give each app the rest in env"},
	"pid_file": {kind: fieldRefused, why: "no pid files are written here: `supervisor status -json` gives every worker's pid"},
	"pid":      {kind: fieldRefused, why: "no pid files are written here: `supervisor status -json` gives every worker's pid"},
	"uid":      {kind: fieldRefused, why: "the workers run as the supervisor's user: run it as that user (`supervisor startup -user USER` writes the unit)"},
	"user":     {kind: fieldRefused, why: "the workers run as the supervisor's user: run it as that user (`supervisor startup -user USER` writes the unit)"},
	"gid":      {kind: fieldRefused, why: "the workers run as the supervisor's group: run it as that user and group (systemd's User= and Group=)"},
}

// atDefault reports whether v is at f's default: null, the default's value, or false
// for a field without one.
func (f pm2Field) atDefault(v *yaml.Node) bool {
	if v.Kind != yaml.ScalarNode {
		return false
	}
	return v.Tag == "!!null" || v.Value == f.def || (f.def == "" && v.Tag == "!!bool" && v.Value == "false")
}

// closest is the PM2 field nearest to an unknown name (a misspelling), "" if none is close.
func closest(name string) string {
	best, bestD := "", 3
	for k := range pm2Fields {
		if d := editDistance(strings.ToLower(name), strings.ToLower(k)); d < bestD || (d == bestD && k < best) {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is Levenshtein's.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// unknownField is the error of a field PM2's schema does not have.
func unknownField(at, k string) error {
	hint := ""
	if c := closest(k); c != "" {
		hint = fmt.Sprintf(" (did you mean %s?)", c)
	}
	return fmt.Errorf("%s.%s: not a field of PM2's ecosystem file%s: fix its name or drop it (docs/supervisor.md lists what each PM2 field does here)", at, k, hint)
}
