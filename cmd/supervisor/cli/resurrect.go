package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/detach"
	"github.com/onehost/onehost/internal/safepath"
)

// maxDumpSize bounds the dump resurrect reads (a real one is a few kilobytes).
const maxDumpSize = 16 << 20

// Resurrect is `supervisor resurrect [-file PATH]`, as `pm2 resurrect`: a background start
// from the dump, in its directory with its environment, then each app brought to its
// saved state (scale, stopped, or deleted when it was not in the dump).
func Resurrect(ctx context.Context, env Env, args []string) error {
	fs := flags(env, "resurrect")
	socket := fs.String("socket", control.DefaultSocket(env.Getenv), "control socket path of the saved supervisor (where its dump lies by default)")
	file := fs.String("file", "", "the dump file (default: where save writes it: the state directory's dump.json, or beside -socket's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("resurrect: unexpected argument %q", fs.Arg(0))
	}
	path := *file
	if path == "" {
		var err error
		if path, _, err = control.Place(env.Getenv, *socket); err != nil {
			return fmt.Errorf("resurrect: %w", err)
		}
	}
	// The dump says which commands to run, where and with what environment: it is believed
	// only when this user wrote it (a regular file of ours, 0600, one link, in a directory
	// only root and we can change). Else anybody who made /tmp/onehost-UID first could have
	// their command run as us.
	b, err := safepath.ReadPrivate(path, maxDumpSize)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("resurrect: %w (supervisor save writes it)", err)
	}
	if err != nil {
		return fmt.Errorf("resurrect: refused: %w", err)
	}
	var d control.Dump
	if err := json.Unmarshal(b, &d); err != nil || d.Version != control.DumpVersion {
		return fmt.Errorf("resurrect: %s is not a dump of supervisor save (version %d, %v)", path, d.Version, err)
	}
	runArgs := d.Args
	sock, ok := detach.FlagValue(runArgs, "socket")
	if !ok {
		sock = cmp.Or(d.Socket, *socket)
		runArgs = append([]string{"-socket", sock}, runArgs...)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("resurrect: find this program: %w", err)
	}
	var quiet bytes.Buffer // the table comes once the apps are as saved
	req := detach.Request{RunArgs: runArgs, Dir: d.Cwd, Env: d.Env, Binary: exe, Getenv: env.Getenv, Stdout: &quiet}
	if err := detach.Start(ctx, req); err != nil {
		return fmt.Errorf("resurrect: %w", err)
	}
	c := control.NewClient(sock)
	st, err := c.StatusWithin(ctx, 10*time.Second)
	if err != nil {
		return fmt.Errorf("resurrect: %w", err)
	}
	saved := map[string]control.DumpApp{}
	for _, a := range d.Apps {
		saved[a.Name] = a
	}
	var errs []error
	for _, a := range st.Apps {
		s, ok := saved[a.Name]
		var err error
		switch {
		case !ok:
			err = c.Delete(ctx, a.Name)
		case s.Status == "stopped":
			err = c.Stop(ctx, cmp.Or(a.Name, "all")) // no name: the supervisor's one app, not the supervisor
		case s.Mode == cluster.ExecCluster && s.Instances > 0 && s.Instances != a.Workers:
			err = c.Scale(ctx, a.Name, strconv.Itoa(s.Instances))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("app %s: %w", a.Name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("resurrect: started, but not every app as saved: %w", err)
	}
	if err := printStatus(ctx, c, env); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "resurrected from %s (saved %s)\n", path, d.SavedAt.Format(time.RFC3339))
	return nil
}
