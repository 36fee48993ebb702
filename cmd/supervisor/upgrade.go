package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// upgrader replaces the running supervisor's image with a new binary, in place: the same
// pid (systemd's MAINPID, the watchdog and NotifyAccess=main see no change), the same
// arguments and environment. Nothing is handed over explicitly: every descriptor of ours
// is close-on-exec, so at the exec each worker reads EOF on its channel, serves on, and
// rejoins the new image at its app's rendezvous socket (internal/cluster's adopt.go), which
// takes its socket and queue back, as after a kill -9, but with the workers still our
// children. Between the two images the kernel keeps delivering connections to the
// workers' sockets (the steering program stays attached to the port's group), so none is
// refused.
type upgrader struct {
	fl            *fleet
	log           *zap.Logger
	defaultBinary string      // the binary this supervisor was started from (its path, which a deploy replaces)
	req           chan string // the binary to execute, handed to the main loop
	busy          atomic.Bool // an upgrade was asked for and has not failed (success ends the image)
}

// check refuses an upgrade that would lose requests or end in a binary that cannot run:
// every app's workers must be able to rejoin (cmd/worker's can; other programs die with
// their supervisor), and the binary must be a supervisor that runs here.
func (u *upgrader) check(bin string) error {
	for _, a := range u.fl.apps {
		if a.current() == nil {
			continue
		}
		if a.opt.Adopt == "" || a.cfg.Fork() {
			return fmt.Errorf("app %q runs %s, whose workers cannot rejoin a new supervisor (only the worker beside this supervisor can): stop and run the new binary instead",
				a.name, a.cfg.Command[0])
		}
	}
	if !filepath.IsAbs(bin) {
		return fmt.Errorf("binary %q: want an absolute path", bin)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		return fmt.Errorf("%w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", bin)
	}
	// A binary that cannot even print its usage would leave the workers waiting for a
	// supervisor that never comes.
	out, err := runFor(5*time.Second, bin, "-h")
	if err != nil {
		return fmt.Errorf("%s -h: %w (%s)", bin, err, out)
	}
	if !bytes.Contains(out, []byte("supervisor run")) {
		return fmt.Errorf("%s -h does not print the supervisor's usage: not a supervisor binary", bin)
	}
	// The new binary judges this very command line and configuration (run -check): one
	// that cannot take them, or hangs on them, is refused while nothing is given up yet.
	if len(os.Args) < 2 || os.Args[1] != "run" {
		return errors.New("this supervisor was not started as `supervisor run ...`: its command line cannot be given to the new binary")
	}
	if out, err := runFor(10*time.Second, bin, append([]string{"run", "-check"}, os.Args[2:]...)...); err != nil {
		return fmt.Errorf("%s run -check with this supervisor's arguments: %w (%s)", bin, err, out)
	}
	return nil
}

// runFor runs bin with args for at most d and returns its output (stdout and stderr),
// trimmed.
func runFor(d time.Duration, bin string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return bytes.TrimSpace(out.Bytes()), err
}

// exec re-executes the supervisor as bin; it returns only if the exec failed.
func (u *upgrader) exec(bin string, lf *logFile) error {
	u.log.Info("upgrading in place: re-executing; the workers serve on and rejoin the new binary",
		zap.String("binary", bin), zap.Int("pid", os.Getpid()))
	u.log.Sync()
	if lf != nil {
		lf.Sync()
	}
	argv := append([]string{bin}, os.Args[1:]...)
	err := syscall.Exec(bin, argv, os.Environ())
	if err == nil {
		err = errors.New("exec returned")
	}
	return fmt.Errorf("exec %s: %w", bin, err)
}
