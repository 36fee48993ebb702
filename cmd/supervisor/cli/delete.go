package cli

import (
	"context"
	"fmt"
)

// Delete is `supervisor delete APP|all`, as `pm2 delete`: stopped and out of the list.
func Delete(ctx context.Context, env Env, args []string) error {
	fs := flags(env, "delete")
	socket := socketFlag(fs, env)
	pos, c, err := parseClient(fs, socket, env, "delete", args)
	if err != nil {
		return err
	}
	app, err := oneApp("delete", pos)
	if err != nil {
		return err
	}
	if app == "" {
		return fmt.Errorf("delete: name the app to delete (or all; supervisor kill stops the whole supervisor)")
	}
	if err := c.Delete(ctx, app); err != nil {
		return prefixed("delete", err)
	}
	fmt.Fprintln(env.Stdout, "deleted")
	return printStatus(ctx, c, env)
}
