package cli

import (
	"context"
	"fmt"
)

// Reload is `supervisor reload [APP|FILE] [-update-env]`, as `pm2 reload`: a rolling reload
// of every worker, none of their requests lost (fork apps restart); FILE: its apps.
func Reload(ctx context.Context, env Env, args []string) error {
	return roll(ctx, env, "reload", args)
}

// Restart is `supervisor restart [APP] [-update-env]`, as `pm2 restart`: each worker
// stopped before its successor starts; a stopped app starts again.
func Restart(ctx context.Context, env Env, args []string) error {
	return roll(ctx, env, "restart", args)
}

func roll(ctx context.Context, env Env, cmd string, args []string) error {
	fs := flags(env, cmd)
	socket := socketFlag(fs, env)
	updateEnv := fs.Bool("update-env", false, "read the configuration file again (with run's -env NAME) and roll its env into every worker (pm2 --update-env); other fields changed are named, not applied")
	pos, c, err := parseClient(fs, socket, env, cmd, args)
	if err != nil {
		return err
	}
	apps, err := appsArg(cmd, pos)
	if err != nil {
		return err
	}
	do := c.Reload
	if cmd == "restart" {
		do = c.Restart
	}
	for _, app := range apps {
		notes, err := do(ctx, app, *updateEnv)
		if err != nil {
			return prefixed(cmd, err)
		}
		printNotes(env, notes)
	}
	if cmd == "reload" {
		fmt.Fprintln(env.Stdout, "reloaded")
		return nil
	}
	// As pm2 does after restart and scale, the table, so the new workers are seen.
	fmt.Fprintln(env.Stdout, "restarted")
	return printStatus(ctx, c, env)
}
