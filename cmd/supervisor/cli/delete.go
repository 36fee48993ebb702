package cli

import (
	"cmp"
	"context"
	"fmt"
)

// Delete is `supervisor delete APP|FILE|all`, as `pm2 delete`: stopped and out of the list.
func Delete(ctx context.Context, env Env, args []string) error {
	fs := flags(env, "delete")
	socket := socketFlag(fs, env)
	pos, c, err := parseClient(fs, socket, env, "delete", args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return fmt.Errorf("delete: name the app to delete (or all; supervisor kill stops the whole supervisor)")
	}
	apps, err := appsArg("delete", pos)
	if err != nil {
		return err
	}
	for _, app := range apps {
		if err := c.Delete(ctx, cmp.Or(app, "all")); err != nil { // a file's app without a name: every app
			return prefixed("delete", err)
		}
	}
	fmt.Fprintln(env.Stdout, "deleted")
	return printStatus(ctx, c, env)
}
