package cli

import (
	"cmp"
	"context"
	"fmt"
)

// Stop is `supervisor stop APP|FILE|all` (pm2 stop: listed as stopped, the supervisor stays),
// and without an app the whole supervisor, returning at once (kill waits for it).
func Stop(ctx context.Context, env Env, args []string) error {
	fs := flags(env, "stop")
	socket := socketFlag(fs, env)
	pos, c, err := parseClient(fs, socket, env, "stop", args)
	if err != nil {
		return err
	}
	apps, err := appsArg("stop", pos)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		if _, err := c.StopSupervisor(ctx); err != nil {
			return prefixed("stop", err)
		}
		fmt.Fprintln(env.Stdout, "stopping")
		return nil
	}
	for _, app := range apps {
		if err := c.Stop(ctx, cmp.Or(app, "all")); err != nil { // a file's app without a name: every app
			return prefixed("stop", err)
		}
	}
	fmt.Fprintln(env.Stdout, "stopped")
	return printStatus(ctx, c, env)
}
