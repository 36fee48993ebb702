package appspec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/ipc"
)

// askWorkerTimeout bounds `worker -check`, which parses and stats and returns at once.
const askWorkerTimeout = 10 * time.Second

// askWorker has our worker judge its own settings: `OURS -check ARGS...` with the app's
// arguments, in the workers' directory and environment (lc.Environ, the app's env over it,
// and HOST and PORT of the address the supervisor will hand it), so that COMPRESS,
// COMMIT_WINDOW and every other setting are refused here by the code that reads them at
// start, never by a copy of its rules that could drift. The worker names the first
// setting it refuses; one whose variable is in judged (already named by the checks above,
// with the fix where the unit gives it) is left out, as is a worker too old to know -check
// (it would start as before; nothing here to judge it by).
func (lc LaunchCheck) askWorker(cfg cluster.Config, workDir string, judged []string) error {
	args := cfg.Command[1:]
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:]
	}
	prog := Abs(workDir, cfg.Command[0])
	if executable(prog) != nil {
		return nil // the command's error, above
	}
	ctx, cancel := context.WithTimeout(context.Background(), askWorkerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, append([]string{"-check"}, args...)...)
	cmd.Dir, cmd.Env, cmd.WaitDelay = workDir, lc.workerEnv(cfg), time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr // stdout: "ok"
	err := cmd.Run()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("command: %s -check, our worker's check of its settings, did not answer within %v", cfg.Command[0], askWorkerTimeout)
	}
	if exit := (*exec.ExitError)(nil); !errors.As(err, &exit) {
		return fmt.Errorf("command: %s -check, our worker's check of its settings: %w", cfg.Command[0], err)
	}
	verdict := lastLine(stderr.String())
	verdict = strings.TrimPrefix(verdict, "worker: ")
	switch {
	case strings.Contains(verdict, "flag provided but not defined: -check"):
		return nil
	case slices.Contains(judged, envVar(verdict)):
		return nil
	case verdict == "":
		verdict = fmt.Sprintf("exited with %v and said nothing", err)
	}
	return fmt.Errorf("worker -check: %s (set under env: in %s, in the env file, or by a flag in command)", verdict, lc.file())
}

// workerEnv is the environment the check runs in: the workers', the app's env over it
// (in a fixed order), less what the supervisor sets for each worker itself (the socket,
// the channel, the slot), and with HOST and PORT of the address the supervisor binds and
// hands over (not in fork mode, where the worker binds its own): a JWT secret is judged
// against the address that will serve it.
func (lc LaunchCheck) workerEnv(cfg cluster.Config) []string {
	perWorker := []string{ipc.EnvFD, ipc.EnvListenFDs, ipc.EnvListenPID, ipc.EnvAdopt, ipc.EnvAdoptWait, ipc.EnvWorkerID}
	var env []string
	for _, kv := range lc.Environ {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains(perWorker, k) {
			env = append(env, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.Env)) {
		env = append(env, k+"="+cfg.Env[k])
	}
	if !cfg.Fork() {
		if host, port, err := net.SplitHostPort(cfg.WithDefaults().Listen); err == nil {
			env = append(env, "HOST="+host, "PORT="+port)
		}
	}
	return env
}

// envVar is the variable an error of the worker names first ("COMPRESS (-compress): ..."
// is COMPRESS), "" when it begins otherwise.
func envVar(msg string) string {
	end := strings.IndexFunc(msg, func(r rune) bool { return !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') })
	if end < 0 {
		end = len(msg)
	}
	return msg[:end]
}

// lastLine is the last line of s that is not blank: where the worker's main prints its
// error, after any log lines and flag usage.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
