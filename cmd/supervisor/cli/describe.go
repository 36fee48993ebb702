package cli

import (
	"context"
	"fmt"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/monit"
)

// Describe is `supervisor describe APP [-json]`, as `pm2 describe`: one app's cwd,
// command, env names, restarts, uptime and workers.
func Describe(ctx context.Context, env Env, args []string) error {
	fs := flags(env, "describe")
	socket := socketFlag(fs, env)
	asJSON := fs.Bool("json", false, "print it as JSON")
	pos, c, err := parseClient(fs, socket, env, "describe", args)
	if err != nil {
		return err
	}
	app, err := oneApp("describe", pos)
	if err != nil {
		return err
	}
	if *asJSON {
		body, err := c.Call(ctx, "GET", control.PathDescribe, control.AppQuery(app))
		if err != nil {
			return prefixed("describe", err)
		}
		_, err = env.Stdout.Write(body)
		return err
	}
	d, err := c.Describe(ctx, app)
	if err != nil {
		return prefixed("describe", err)
	}
	monit.PrintDescribe(env.Stdout, d)
	return nil
}

// printNotes prints what the supervisor noted of a command (reload -update-env: the env's
// changes, and what else the file changed that a reload does not take).
func printNotes(env Env, notes []string) {
	for _, n := range notes {
		fmt.Fprintln(env.Stdout, n)
	}
}
