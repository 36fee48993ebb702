package cli

import (
	"context"
	"fmt"
)

// Flush is `supervisor flush [APP]`, as `pm2 flush`: the log files emptied.
func Flush(ctx context.Context, env Env, args []string) error {
	fs := flags(env, "flush")
	socket := socketFlag(fs, env)
	pos, c, err := parseClient(fs, socket, env, "flush", args)
	if err != nil {
		return err
	}
	app, err := oneApp("flush", pos)
	if err != nil {
		return err
	}
	files, err := c.Flush(ctx, app)
	if err != nil {
		return prefixed("flush", err)
	}
	if len(files) == 0 {
		fmt.Fprintln(env.Stdout, "flushed: no log file (the supervisor logs to its stderr; supervisor start keeps files)")
	}
	for _, f := range files {
		fmt.Fprintln(env.Stdout, "flushed", f)
	}
	return nil
}
