package cluster

import (
	"fmt"
	"os/exec"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/onehost/onehost/internal/cron"
)

// The fields of Config that PM2's ecosystem file has and the supervisor took later:
// autorestart, watch, cron_restart, instance_var, increment_var, log_date_format. Their
// checks are here, the code that acts on them in watch.go, restart.go and spawn.go.

// WatchPaths is PM2's watch: true (the app's directory, "."), false, a path, or a list.
type WatchPaths []string

// UnmarshalYAML accepts a boolean, a string or a list of strings.
func (w *WatchPaths) UnmarshalYAML(v *yaml.Node) error {
	bad := &valueError{line: v.Line, col: v.Column, msg: "not a watch value",
		fix: "write true (the app's directory), false, a path or a list of paths"}
	switch v.Kind {
	case yaml.ScalarNode:
		var b bool
		if v.Tag == "!!bool" && v.Decode(&b) == nil {
			*w = nil
			if b {
				*w = WatchPaths{"."}
			}
			return nil
		}
		if v.Value == "" {
			return bad
		}
		*w = WatchPaths{v.Value}
		return nil
	case yaml.SequenceNode:
		var l []string
		if err := v.Decode(&l); err != nil {
			return bad
		}
		if len(l) == 0 { // PM2: an empty list is the app's directory
			l = []string{"."}
		}
		*w = l
		return nil
	}
	return bad
}

// validatePM2 checks the PM2 fields, naming the field and what to write instead.
func (c Config) validatePM2() error {
	if c.CronRestart != "" {
		if _, err := cron.Parse(c.CronRestart); err != nil {
			return fmt.Errorf("cron_restart: %w (or drop cron_restart: `supervisor reload` from your own timer does the same)", err)
		}
	}
	for _, p := range c.Watch {
		if p == "" || strings.ContainsRune(p, 0) {
			return fmt.Errorf("watch: %q is not a path: write true (the app's directory), a path or a list of paths", p)
		}
	}
	for _, p := range c.IgnoreWatch {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return fmt.Errorf("ignore_watch: %q is not a glob pattern (path.Match: *, ?, [a-z]): write names or patterns such as node_modules, logs or *.log", p)
		}
	}
	if len(c.IgnoreWatch) > 0 && len(c.Watch) == 0 {
		return fmt.Errorf("ignore_watch: given without watch, which is off: set watch: true (or paths), or drop ignore_watch")
	}
	for _, v := range []struct{ field, name string }{{"instance_var", c.InstanceVar}, {"increment_var", c.IncrementVar}} {
		if v.name != "" && (strings.ContainsAny(v.name, "= \t\n\x00") || len(v.name) > 256) {
			return fmt.Errorf("%s: %q is not a variable name: want letters, digits and _ (PM2's default instance_var is NODE_APP_INSTANCE)", v.field, v.name)
		}
	}
	if v := c.IncrementVar; v != "" {
		if base, ok := c.Env[v]; ok {
			if _, err := strconv.Atoi(base); err != nil {
				return fmt.Errorf("increment_var: %s: env.%s is %q, not a number to count up from: set env.%s to the first instance's number (PM2 starts from it, or from 0)", v, v, base, v)
			}
		}
		if v == "PORT" && !c.Fork() {
			return fmt.Errorf("increment_var: PORT in cluster mode: every instance serves the one shared port here (env.PORT): " +
				"set exec_mode: fork for a port of its own per instance (each binds it itself), or drop increment_var")
		}
	}
	for _, code := range c.StopExitCodes {
		if code < 0 || code > 255 {
			return fmt.Errorf("stop_exit_codes: %d is not an exit code: want 0 to 255", code)
		}
	}
	if c.LogDateFormat != "" {
		if _, err := parseDateFormat(c.LogDateFormat); err != nil {
			return fmt.Errorf("log_date_format: %w", err)
		}
	}
	return nil
}

// stopsFor reports whether a worker that ended with err (cmd.Wait's) stays stopped:
// autorestart: false, or an exit code of stop_exit_codes.
func (c Config) stopsFor(err error) bool {
	if !c.autoRestart() {
		return true
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode() // -1 for a signal: in no list
	} else if err != nil {
		return false
	}
	return slices.Contains(c.StopExitCodes, code)
}

// EnvOnlyChanges compares the configuration running (cur) with the one read again from
// its file (next) for an env update (`reload --update-env`): it returns the fields other
// than env whose values differ, by their YAML names, which a reload does not apply (they
// take the supervisor started again with the file), and an error when next's env cannot be
// rolled in alone: a cluster app's env.PORT or env.HOST name the address its sockets serve.
func EnvOnlyChanges(cur, next Config) ([]string, error) {
	if !cur.Fork() && !next.Fork() {
		for _, k := range []string{"PORT", "HOST"} {
			if cur.Env[k] != next.Env[k] {
				return nil, fmt.Errorf("env.%s: %q in the file, %q running: it names the address the cluster's sockets serve, which a reload keeps: "+
					"stop the supervisor and run it again with the file for the new address", k, next.Env[k], cur.Env[k])
			}
		}
	}
	var changed []string
	cv, nv := reflect.ValueOf(cur), reflect.ValueOf(next)
	t := cv.Type()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "env" || name == "" {
			continue
		}
		if !reflect.DeepEqual(cv.Field(i).Interface(), nv.Field(i).Interface()) {
			changed = append(changed, name)
		}
	}
	slices.Sort(changed)
	return changed, nil
}
