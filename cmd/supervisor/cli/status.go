package cli

import (
	"context"
	"time"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/monit"
)

// Status is `supervisor status [APP] [-json]` (ls, list; jlist is -json), as `pm2 ls`:
// every worker of every app, or of the one named.
func Status(ctx context.Context, env Env, args []string) error {
	fs := flags(env, "status")
	socket := socketFlag(fs, env)
	asJSON := fs.Bool("json", false, "print it as JSON")
	pos, c, err := parseClient(fs, socket, env, "status", args)
	if err != nil {
		return err
	}
	app, err := oneApp("status", pos)
	if err != nil {
		return err
	}
	// Status must not hang on a wedged supervisor.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if *asJSON {
		body, err := c.Call(ctx, "GET", control.PathStatus, control.AppQuery(app))
		if err != nil {
			return prefixed("status", err)
		}
		_, err = env.Stdout.Write(body)
		return err
	}
	st, err := c.Status(ctx, app)
	if err != nil {
		return prefixed("status", err)
	}
	monit.PrintStatus(env.Stdout, st)
	return nil
}

// printStatus reads the status and prints it as a table, as pm2 does after start, restart
// and scale.
func printStatus(ctx context.Context, c *control.Client, env Env) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := c.Status(ctx, "")
	if err != nil {
		return err
	}
	monit.PrintStatus(env.Stdout, st)
	return nil
}
