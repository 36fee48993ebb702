// The user's own app in the sweep: their program under the supervisor at N = 1 ... cores,
// their request instead of our workloads, and the same app under PM2 as the peer.

package ceiling

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// AppWorkload names the workload of a sweep of the user's app (SweepConfig.App): their
// request, described as autocannon's flags describe it.
const AppWorkload = "app"

// AppRequest is the request of an app sweep: the autocannon flags -m, -H, -b and the
// URL's path.
func AppRequest(method, path string, headers []string, body string) Workload {
	if path == "" {
		path = "/"
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return Workload{Name: AppWorkload, Method: method, Path: path, Headers: headers, Body: body}
}

// NodeScript finds the script of a `node [OPTIONS] SCRIPT [ARGS...]` command, and its
// arguments, so PM2 can run the same app (`pm2 start SCRIPT -i N -- ARGS`). Node's own
// options are not carried to PM2: ok is false when there are any, or argv is no node
// command, so the caller can say so rather than measure a different program.
func NodeScript(argv []string) (script string, args []string, ok bool) {
	if len(argv) < 2 || filepath.Base(argv[0]) != "node" || strings.HasPrefix(argv[1], "-") {
		return "", nil, false
	}
	return argv[1], argv[2:], true
}

// appMode reports whether the sweep runs the user's app rather than our worker.
func (s *Sweeper) appMode() bool { return len(s.cfg.App) > 0 || s.cfg.AppConfig != "" }

// appClusterArgv is `supervisor run` for the user's app at n workers: their configuration
// (ours, or a PM2 ecosystem file) or a minimal one written here, so that the repository's
// configs/cluster.yaml, which the supervisor reads by default, does not apply to their app.
func (s *Sweeper) appClusterArgv(dir string, srv *Server) ([]string, error) {
	conf := s.cfg.AppConfig
	if conf == "" {
		conf = filepath.Join(dir, "app.yaml")
		if err := os.WriteFile(conf, []byte("# ceiling sweep: the user's app, every other setting the supervisor's default\nwait_ready: false\n"), 0o644); err != nil {
			return nil, fmt.Errorf("start app: write its configuration: %w", err)
		}
	}
	argv := []string{s.cfg.Supervisor, "run", "-config", conf, "-instances", fmt.Sprint(srv.N),
		"-socket", srv.socket, "-log-level", "warn"}
	if s.cfg.AppConfig == "" {
		// A given configuration says where it listens (self_bind needs a fixed port).
		argv = append(argv, "-listen", net.JoinHostPort(s.cfg.ListenHost, "0"))
	}
	if len(s.cfg.App) > 0 {
		argv = append(append(argv, "--"), s.cfg.App...)
	}
	return argv, nil
}

// findAppPM2 checks the PM2 peer of an app sweep: the script and pm2 (on node).
func (s *Sweeper) findAppPM2() string {
	if s.cfg.AppPM2Script == "" {
		return "no script for PM2 to run: -app 'node SCRIPT [ARGS]' gives one (PM2 runs the same script)"
	}
	script, err := filepath.Abs(s.cfg.AppPM2Script)
	if err != nil {
		return err.Error()
	}
	if _, err := os.Stat(script); err != nil {
		return fmt.Sprintf("the app's script: %v", err)
	}
	why := s.findPM2Binary()
	if why == "" {
		s.peers.pm2Script, s.peers.pm2Dir = script, ""
	}
	return why
}

// appDefaults fills and checks an app sweep's workloads and modes (nothing when cfg is
// not one): the app's request only, and the modes the app runs in.
func appDefaults(cfg *SweepConfig) error {
	if len(cfg.App) == 0 && cfg.AppConfig == "" {
		return nil
	}
	if cfg.Workloads == nil {
		cfg.Workloads = []Workload{AppRequest("GET", "/", nil, "")}
	}
	for _, w := range cfg.Workloads {
		if w.Name != AppWorkload {
			return fmt.Errorf("sweep config: workload %q with App: an app sweep sends the app's request (AppRequest), not our workloads", w.Name)
		}
	}
	if cfg.Modes == nil {
		cfg.Modes = []string{ModeCluster, ModePM2}
	}
	for _, m := range cfg.Modes {
		if m != ModeCluster && m != ModePM2 {
			return fmt.Errorf("sweep config: mode %q with App: the user's app runs as %s (under the supervisor) and %s (the peer)", m, ModeCluster, ModePM2)
		}
	}
	return nil
}
