package cli

import (
	"context"
	"fmt"
)

// Stop is `supervisor stop APP|all` (pm2 stop: listed as stopped, the supervisor stays),
// and without an app the whole supervisor, returning at once (kill waits for it).
func Stop(ctx context.Context, env Env, args []string) error {
	fs := flags(env, "stop")
	socket := socketFlag(fs, env)
	pos, c, err := parseClient(fs, socket, env, "stop", args)
	if err != nil {
		return err
	}
	app, err := oneApp("stop", pos)
	if err != nil {
		return err
	}
	if app == "" {
		if _, err := c.StopSupervisor(ctx); err != nil {
			return prefixed("stop", err)
		}
		fmt.Fprintln(env.Stdout, "stopping")
		return nil
	}
	if err := c.Stop(ctx, app); err != nil {
		return prefixed("stop", err)
	}
	fmt.Fprintln(env.Stdout, "stopped")
	return printStatus(ctx, c, env)
}
