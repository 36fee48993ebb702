package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/monit"
)

// Upgrade is `supervisor upgrade [-binary PATH]`: the supervisor re-executes itself in
// place (kill -USR2 does too), its workers serving on; this waits for the new image's
// table.
func Upgrade(ctx context.Context, env Env, args []string) error {
	fs := flags(env, "upgrade")
	socket := socketFlag(fs, env)
	binary := fs.String("binary", "", "the new supervisor binary (default: the path the running one was started from, where a deploy puts the new one)")
	pos, c, err := parseClient(fs, socket, env, "upgrade", args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("upgrade: unexpected argument %q: the whole supervisor is upgraded (-binary PATH names the new one)", pos[0])
	}
	bin := *binary
	if bin != "" {
		if bin, err = filepath.Abs(bin); err != nil {
			return fmt.Errorf("upgrade: %w", err)
		}
	}
	if err := c.Upgrade(ctx, bin); err != nil {
		return prefixed("upgrade", err)
	}
	// The running image answered and re-executes: wait for the new one's table.
	fmt.Fprintln(env.Stdout, "upgrading")
	return waitUpgraded(ctx, c, env)
}

// waitUpgraded waits until the re-executed supervisor answers with every worker online
// (they rejoin it: none restarts), and prints its table.
func waitUpgraded(ctx context.Context, c *control.Client, env Env) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	time.Sleep(100 * time.Millisecond) // the old image's socket is gone by then
	for {
		st, err := c.Status(ctx, "")
		if err == nil && st.UpgradeError != "" {
			monit.PrintStatus(env.Stdout, st)
			return fmt.Errorf("upgrade failed: %s: the previous binary serves again, its workers kept", st.UpgradeError)
		}
		if err == nil && len(st.Workers) > 0 && monit.EveryOnline(st) {
			monit.PrintStatus(env.Stdout, st)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("upgrade: the new supervisor is not online after 60 s (%v): see its log", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
