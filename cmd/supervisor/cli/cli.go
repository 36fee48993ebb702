// Package cli is the supervisor's commands, one file each: what `supervisor COMMAND` reads
// from its flags and arguments, and what it prints. The commands that talk to a running
// supervisor do it through internal/control's Client; `run` builds internal/daemon's
// Config. cmd/supervisor's table names each command, its usage and its aliases.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/onehost/onehost/internal/appspec"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/detach"
)

// Env is what a command runs with: the process's environment and streams.
type Env struct {
	Getenv func(string) string
	// Environ is the process's whole environment (the workers of `run` inherit it).
	Environ        []string
	Stdout, Stderr io.Writer
	// UnitRunDir is where systemd puts a unit's RuntimeDirectory= ("" /run): the unit
	// `startup` prints has its control socket at /run/NAME/supervisor.sock.
	UnitRunDir string
}

// defaultConfig is the configuration `run` reads when given none and it exists.
const defaultConfig = detach.DefaultConfig

// flags is a command's flag set, writing its usage to stderr.
func flags(env Env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("supervisor "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	return fs
}

// socketFlag adds -socket to fs.
func socketFlag(fs *flag.FlagSet, env Env) *string {
	return fs.String("socket", control.DefaultSocket(env.Getenv), "control socket path")
}

// client is the Client of the supervisor fs's -socket names, or, when -socket was not
// given and the default is not there, of the one installed unit that runs (findSocket).
func client(fs *flag.FlagSet, socket *string, env Env) (*control.Client, error) {
	if err := findSocket(fs, socket, env); err != nil {
		return nil, err
	}
	if err := control.CheckSocketPath(*socket); err != nil {
		return nil, err
	}
	return control.NewClient(*socket), nil
}

// parseClient parses a client command's flags and arguments: the arguments may come
// before the flags, in pm2's order (`scale api +1`, `logs api 0`), or after them; a
// leading -N of scale is a count, not a flag. It returns the positional arguments and the
// client.
func parseClient(fs *flag.FlagSet, socket *string, env Env, cmd string, args []string) ([]string, *control.Client, error) {
	var pos []string
	for len(args) > 0 && (!strings.HasPrefix(args[0], "-") || (cmd == "scale" && isNumber(args[0]))) {
		pos, args = append(pos, args[0]), args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	pos = append(pos, fs.Args()...)
	c, err := client(fs, socket, env)
	return pos, c, err
}

// oneApp is [APP]: at most one argument, not a number.
func oneApp(cmd string, pos []string) (string, error) {
	if len(pos) > 1 {
		return "", fmt.Errorf("%s: unexpected argument %q: want at most one APP", cmd, pos[1])
	}
	if len(pos) == 0 {
		return "", nil
	}
	return appName(cmd, pos[0])
}

// appName refuses a number where an app's name is wanted.
func appName(cmd, name string) (string, error) {
	if isNumber(name) {
		return "", fmt.Errorf("%s: %q: want an app's name (supervisor status lists them), not a number", cmd, name)
	}
	return name, nil
}

// isNumber reports whether s is an optionally signed decimal number ("-1" is a count, not
// a flag).
func isNumber(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}

// prefixed names the command in a supervisor's error ("reload: ...").
func prefixed(cmd string, err error) error {
	if err == nil {
		return nil
	}
	if ce := (*control.Error)(nil); errors.As(err, &ce) {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	return err
}

// appsArg is [APP], where APP may be a configuration file, as pm2 takes `reload
// ecosystem.config.js`: that file's apps by name ("" for the one app of a file without
// names: every app). An argument that is no file is the app's name.
func appsArg(cmd string, pos []string) ([]string, error) {
	if len(pos) == 1 {
		if fi, err := os.Stat(pos[0]); err == nil && fi.Mode().IsRegular() {
			specs, err := (appspec.Source{Path: pos[0]}).Load()
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", cmd, pos[0], err)
			}
			names := make([]string, 0, len(specs))
			for _, sp := range specs {
				names = append(names, sp.Name)
			}
			return names, nil
		}
	}
	app, err := oneApp(cmd, pos)
	return []string{app}, err
}
