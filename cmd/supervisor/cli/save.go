package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/onehost/onehost/internal/safepath"
)

// Save is `supervisor save [-file PATH]`, as `pm2 save`: the running apps and their scale
// to a dump beside the control socket (or at PATH), which resurrect starts from.
func Save(ctx context.Context, env Env, args []string) error {
	fs := flags(env, "save")
	socket := socketFlag(fs, env)
	file := fs.String("file", "", "the dump file (default: beside the control socket, SOCKET without .sock + .dump.json)")
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
	d.Socket = *socket
	path := cmp.Or(*file, defaultDumpPath(*socket))
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

// defaultDumpPath is the dump beside the control socket.
func defaultDumpPath(socket string) string {
	return strings.TrimSuffix(socket, ".sock") + ".dump.json"
}
