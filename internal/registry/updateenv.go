package registry

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/onehost/onehost/internal/cluster"
	"go.uber.org/zap"
)

// ErrNoFile: --update-env on a supervisor started without a configuration file.
var ErrNoFile = errors.New("update-env: this supervisor was started without a configuration file (-config), so there is no env to read again: " +
	"put the env in a file (env: in configs/cluster.yaml, or an ecosystem file) and run the supervisor with -config FILE")

// UpdateEnv reads the configuration file again (with the -env NAME and -only NAME the
// supervisor was started with) and gives the named apps (every app for "") the env it has
// now: workers started from then on get it, so the reload or restart that follows rolls it
// into every worker. Only env is taken; the other fields the file changed are named in
// the notes, as are apps the file added or dropped, since they take the supervisor run
// again with the file. Nothing is changed when the file cannot be read or an app's new env
// cannot be rolled in alone (a cluster app's PORT or HOST: EnvOnlyChanges).
func (r *Registry) UpdateEnv(name string) (notes []string, err error) {
	if r.setup.Reread == nil {
		return nil, ErrNoFile
	}
	apps, err := r.pick(name)
	if err != nil {
		return nil, err
	}
	// One update at a time, and a.config() is what a stopped app starts from again (startApp,
	// under ops too).
	r.ops.Lock()
	defer r.ops.Unlock()
	specs, err := r.setup.Reread()
	if err != nil {
		return nil, fmt.Errorf("update-env: %w (nothing changed: the workers keep their env)", err)
	}
	label := func(a *app) string {
		if a.name == "" {
			return "the app"
		}
		return "app " + a.name
	}
	type change struct {
		a   *app
		env map[string]string
	}
	var changes []change
	for _, a := range apps {
		i := slices.IndexFunc(specs, func(sp cluster.App) bool { return sp.Name == a.name })
		if i < 0 {
			notes = append(notes, fmt.Sprintf("%s is no longer in the file: its env stays as it was (supervisor stop %s stops it)", label(a), a.name))
			continue
		}
		next, cur := specs[i].Config, a.config()
		fields, err := cluster.EnvOnlyChanges(*cur, next)
		if err != nil {
			return nil, fmt.Errorf("update-env: %s: %w (nothing changed)", label(a), err)
		}
		switch {
		case maps.Equal(cur.Env, next.Env):
			notes = append(notes, fmt.Sprintf("%s: env unchanged in the file", label(a)))
		default:
			notes = append(notes, fmt.Sprintf("%s: env updated (%s)", label(a), envDiff(cur.Env, next.Env)))
		}
		if len(fields) > 0 {
			notes = append(notes, fmt.Sprintf("%s: %s changed in the file too, and a reload rolls in env alone: "+
				"stop the supervisor and run it again with the file for those", label(a), strings.Join(fields, ", ")))
		}
		changes = append(changes, change{a, next.Env})
	}
	if name == "" || name == "all" {
		for _, sp := range specs {
			if !slices.ContainsFunc(r.apps, func(a *app) bool { return a.name == sp.Name }) {
				notes = append(notes, fmt.Sprintf("app %s is new in the file and does not run here: run the supervisor again with the file to start it", sp.Name))
			}
		}
	}
	for _, c := range changes {
		c.a.setEnv(c.env)
		sup := c.a.current()
		if sup != nil {
			if err := sup.SetEnv(c.env); err != nil {
				return notes, r.wrap(c.a, err)
			}
		}
		c.a.log.Info("env read again from the configuration file (--update-env)", zap.Int("variables", len(c.env)))
	}
	return notes, nil
}

// envDiff names the variables added, changed and removed between two envs, never their
// values (a secret's among them).
func envDiff(cur, next map[string]string) string {
	var added, changed, removed []string
	for k, v := range next {
		old, ok := cur[k]
		switch {
		case !ok:
			added = append(added, k)
		case old != v:
			changed = append(changed, k)
		}
	}
	for k := range cur {
		if _, ok := next[k]; !ok {
			removed = append(removed, k)
		}
	}
	var parts []string
	for _, p := range []struct {
		what string
		keys []string
	}{{"added", added}, {"changed", changed}, {"removed", removed}} {
		if len(p.keys) > 0 {
			slices.Sort(p.keys)
			parts = append(parts, p.what+" "+strings.Join(p.keys, ", "))
		}
	}
	return strings.Join(parts, "; ")
}
