// `supervisor save` and `resurrect`: the running apps written to a dump file and started
// from it again, as PM2's dump.pm2.

package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/safepath"
)

// notInherited are the variables of the supervisor's environment that belong to how it
// was started (systemd's, an upgrade's), not to the apps: a dump leaves them out.
var notInherited = []string{"NOTIFY_SOCKET=", "LISTEN_", "WATCHDOG_", envUpgradeFallback, envUpgradeFailed, envUpgradeApps}

// saveDump is POST /save's body: the dump of the running supervisor.
func (f *fleet) saveDump() (control.Dump, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return control.Dump{}, fmt.Errorf("save: %w", err)
	}
	d := control.Dump{Version: 1, SavedAt: time.Now().UTC(), Cwd: cwd, Args: f.runArgs}
	for _, kv := range os.Environ() {
		if !slices.ContainsFunc(notInherited, func(p string) bool { return strings.HasPrefix(kv, p) }) {
			d.Env = append(d.Env, kv)
		}
	}
	for _, a := range f.live() {
		da := control.DumpApp{Name: a.name, Mode: a.mode(), Status: "stopped"}
		if sup := a.current(); sup != nil {
			da.Status, da.Instances = "running", len(sup.Status())
		}
		d.Apps = append(d.Apps, da)
	}
	return d, nil
}

// maxDumpSize bounds the dump resurrect reads (a real one is a few kilobytes).
const maxDumpSize = 16 << 20

// defaultDumpPath is the dump beside the control socket.
func defaultDumpPath(socket string) string {
	return strings.TrimSuffix(socket, ".sock") + ".dump.json"
}

// runSave is `supervisor save [-file PATH]`.
func runSave(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("supervisor save", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", control.DefaultSocket(getenv), "control socket path")
	file := fs.String("file", "", "the dump file (default: beside the control socket, SOCKET without .sock + .dump.json)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("save: unexpected argument %q: every app is saved", fs.Arg(0))
	}
	if err := findSocket(fs, socket, stderr); err != nil { // an installed unit's (startup), when the default is not there
		return err
	}
	if err := control.CheckSocketPath(*socket); err != nil {
		return err
	}
	body, err := controlCall(ctx, *socket, "POST", "/save", nil)
	if err != nil {
		return fmt.Errorf("save: %w", err)
	}
	var d control.Dump
	if err := json.Unmarshal(body, &d); err != nil {
		return fmt.Errorf("save: decode: %w", err)
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
	fmt.Fprintf(stdout, "saved %d app(s) to %s (supervisor resurrect starts them again)\n", len(d.Apps), path)
	return nil
}

// runResurrect is `supervisor resurrect [-file PATH]`: a background start from the dump,
// in its directory with its environment, then each app brought to its saved state
// (scale, stopped, or deleted when it was not in the dump).
func runResurrect(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("supervisor resurrect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", control.DefaultSocket(getenv), "control socket path of the saved supervisor (where its dump lies by default)")
	file := fs.String("file", "", "the dump file (default: beside the control socket)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("resurrect: unexpected argument %q", fs.Arg(0))
	}
	path := cmp.Or(*file, defaultDumpPath(*socket))
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
	if err := json.Unmarshal(b, &d); err != nil || d.Version != 1 {
		return fmt.Errorf("resurrect: %s is not a dump of supervisor save (version %d, %v)", path, d.Version, err)
	}
	runArgs := d.Args
	sock, ok := flagValue(runArgs, "socket")
	if !ok {
		sock = cmp.Or(d.Socket, *socket)
		runArgs = append([]string{"-socket", sock}, runArgs...)
	}
	var quiet bytes.Buffer // the table comes once the apps are as saved
	if err := startBackground(ctx, runArgs, d.Cwd, d.Env, getenv, &quiet); err != nil {
		return fmt.Errorf("resurrect: %w", err)
	}
	st, err := statusWithin(ctx, control.NewClient(sock).HTTP(), sock, 10*time.Second)
	if err != nil {
		return fmt.Errorf("resurrect: %w", err)
	}
	saved := map[string]control.DumpApp{}
	for _, a := range d.Apps {
		saved[a.Name] = a
	}
	var errs []error
	for _, a := range st.Apps {
		q := url.Values{}
		if a.Name != "" {
			q.Set("app", a.Name)
		}
		s, ok := saved[a.Name]
		var err error
		switch {
		case !ok:
			_, err = controlCall(ctx, sock, "POST", "/delete", q)
		case s.Status == "stopped":
			_, err = controlCall(ctx, sock, "POST", "/stop", q)
		case s.Mode == cluster.ExecCluster && s.Instances > 0 && s.Instances != a.Workers:
			q.Set("n", strconv.Itoa(s.Instances))
			_, err = controlCall(ctx, sock, "POST", "/scale", q)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("app %s: %w", a.Name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("resurrect: started, but not every app as saved: %w", err)
	}
	if err := printStatus(ctx, control.NewClient(sock).HTTP(), sock, stdout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "resurrected from %s (saved %s)\n", path, d.SavedAt.Format(time.RFC3339))
	return nil
}
