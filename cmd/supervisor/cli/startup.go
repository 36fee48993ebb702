package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/onehost/onehost/internal/appspec"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/detach"
)

// Startup is `supervisor startup`, PM2's `pm2 startup` for systemd: it prints a unit that
// runs `supervisor run -config FILE` at boot, hardened as configs/onehost.service is, and
// the two commands that install and start it. It installs nothing itself: the commands
// need root, and a user reads what they run as root first.
//
// Unlike pm2 startup it needs no `pm2 save`: the unit names the configuration file, which
// is the process list. The unit runs what `supervisor run -config FILE` runs where startup
// is typed (appspec.PlanUnit); what it can see would fail now is said on stderr, and the
// unit is printed anyway, since the env file may be written after it.
func Startup(ctx context.Context, env Env, args []string) error {
	fs := flags(env, "startup")
	req := appspec.UnitRequest{Getenv: env.Getenv, Warnings: env.Stderr}
	fs.StringVar(&req.Config, "config", "", "the configuration the unit runs (our YAML or a PM2 ecosystem file); made absolute (default: the running supervisor's, from its directory; else ecosystem.config.js, ..., "+defaultConfig+" here)")
	fs.StringVar(&req.Name, "name", "", "the unit's name, also its runtime directory /run/NAME with the control socket (default: the only app's name, else the file's name without extensions; for ecosystem.* its directory's name)")
	fs.StringVar(&req.User, "user", "", "the user the service runs as (default: the current user)")
	fs.StringVar(&req.Dir, "dir", "", "the unit's WorkingDirectory, where the configuration's relative paths (command, script, cwd, the env's paths) resolve, as they do for `supervisor run` (default: the current directory)")
	fs.StringVar(&req.EnvFile, "env-file", "", "a file of KEY=VALUE lines (mode 0600: it may hold secrets) the unit reads with EnvironmentFile=; the workers inherit them (the feed worker: SQLITE_PATH and JWT_SECRET_FILE)")
	fs.StringVar(&req.EnvName, "env", "", "with an ecosystem file: the unit runs with -env NAME (pm2 start --env NAME)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("startup: unexpected argument %q", fs.Arg(0))
	}
	if req.Config == "" {
		if err := startupConfig(ctx, env, &req); err != nil {
			return err
		}
	}
	bin, err := os.Executable()
	if err == nil {
		bin, err = filepath.EvalSymlinks(bin)
	}
	if err != nil {
		return fmt.Errorf("startup: find the supervisor binary: %w", err)
	}
	req.Bin = bin
	u, err := appspec.PlanUnit(req)
	if err != nil {
		return err
	}
	if err := u.Write(env.Stdout); err != nil {
		return err
	}
	flags := fmt.Sprintf("-config %s -name %s -user %s -dir %s", u.Config, u.Name, u.User, u.Dir)
	if u.EnvFile != "" {
		flags += " -env-file " + u.EnvFile
	}
	flags += u.EnvArg
	fmt.Fprintf(env.Stdout, "\n# To install and start it at boot (as pm2 startup), run:\n"+
		"#   %s startup %s | sudo tee /etc/systemd/system/%s.service >/dev/null\n"+
		"#   sudo systemctl daemon-reload && sudo systemctl enable --now %s\n"+
		"# then: systemctl reload %s (rolling reload), journalctl -u %s (logs), supervisor status\n"+
		"# (without -socket, the commands find %s when no other supervisor runs)\n",
		u.Bin, flags, u.Name, u.Name, u.Name, u.Name, u.Socket)
	return nil
}

// startupConfig finds what a bare `startup` (pm2 startup, which takes the running
// processes) makes the unit of: the configuration the running supervisor runs, from its
// directory; else the first of start's files here (ecosystem.config.js, ...).
func startupConfig(ctx context.Context, env Env, req *appspec.UnitRequest) error {
	socket := control.DefaultSocket(env.Getenv)
	fs := flags(env, "startup")
	if err := findSocket(fs, &socket, env); err == nil {
		if st, err := control.NewClient(socket).StatusWithin(ctx, 2*time.Second); err == nil && st.Config != "" {
			req.Config = st.Config
			if req.Dir == "" {
				req.Dir = st.Cwd
			}
			fmt.Fprintf(env.Stderr, "supervisor startup: the unit of the running supervisor's configuration, %s (from %s; -config chooses another)\n", st.Config, st.Cwd)
			return nil
		}
	}
	if f, ok := detach.DefaultFile(); ok {
		req.Config = f
		return nil
	}
	return fmt.Errorf("startup: no configuration: no supervisor with one runs at %s, and none of %s is here: give -config FILE", socket, strings.Join(detach.DefaultStartFiles, ", "))
}
