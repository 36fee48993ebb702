package cli

import (
	"context"
	"fmt"

	"github.com/onehost/onehost/internal/cluster"
)

// Scale is `supervisor scale [APP] N|+N|-N`, as `pm2 scale`.
func Scale(ctx context.Context, env Env, args []string) error {
	fs := flags(env, "scale")
	socket := socketFlag(fs, env)
	pos, c, err := parseClient(fs, socket, env, "scale", args)
	if err != nil {
		return err
	}
	var app, n string
	switch len(pos) {
	case 1:
		n = pos[0]
	case 2:
		app, n = pos[0], pos[1]
	default:
		return fmt.Errorf("scale: want [APP] N, +N or -N")
	}
	if app, err = appName("scale", app); err != nil {
		return err
	}
	if _, _, err := cluster.ParseScale(n); err != nil {
		return fmt.Errorf("scale: %w", err)
	}
	if err := c.Scale(ctx, app, n); err != nil {
		return prefixed("scale", err)
	}
	fmt.Fprintln(env.Stdout, "scaled")
	return printStatus(ctx, c, env)
}
