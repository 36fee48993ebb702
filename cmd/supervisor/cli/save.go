package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/safepath"
)

// Save is `supervisor save [-file PATH]`, as `pm2 save`: the running apps and their scale
// to a dump beside the control socket (or at PATH), which resurrect starts from.
func Save(ctx context.Context, env Env, args []string) error {
	fs := flags(env, "save")
	socket := socketFlag(fs, env)
	file := fs.String("file", "", "the dump file (default: the state directory's dump.json, $XDG_STATE_HOME/onehost or ~/.local/state/onehost, root's /var/lib/onehost; with -socket, SOCKET without .sock + .dump.json)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("save: unexpected argument %q: every app is saved", fs.Arg(0))
	}
	c, err := client(fs, socket, env)
	if err != nil {
		return err
	}
	d, err := c.Save(ctx)
	if err != nil {
		return fmt.Errorf("save: %w", err)
	}
	path, _, err := control.Place(env.Getenv, *socket)
	if err != nil && *file == "" {
		return fmt.Errorf("save: %w", err)
	}
	if *socket == control.DefaultSocket(env.Getenv) {
		// The default socket is this environment's (XDG_RUNTIME_DIR's, or /tmp's): left
		// out, resurrect takes its own environment's.
		d.Socket = ""
		if *file == "" {
			if _, err := control.PrepareStateDir(env.Getenv); err != nil {
				return fmt.Errorf("save: %w", err)
			}
		}
	} else {
		d.Socket = *socket
	}
	path = cmp.Or(*file, path)
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return fmt.Errorf("save: %w", err)
	}
	// Written whole into a new file of a random name (nothing planted beside it is
	// followed), then renamed: a crash mid-save leaves the previous dump. The dump holds the
	// environment, secrets included, and says what resurrect runs: its directory must be
	// one no other user can change.
	if err := safepath.WritePrivate(path, append(b, '\n')); err != nil {
		return fmt.Errorf("save: %w", err)
	}
	fmt.Fprintf(env.Stdout, "saved %d app(s) to %s (supervisor resurrect starts them again)\n", len(d.Apps), path)
	return nil
}
