package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/onehost/onehost/internal/applog"
	"github.com/onehost/onehost/internal/appspec"
	"github.com/onehost/onehost/internal/registry"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
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
	reg           *registry.Registry
	log           *zap.Logger
	defaultBinary string // the binary this supervisor was started from (its path, which a deploy replaces)
	// args are run's arguments, environ the environment without the upgrade's variables:
	// what the new image gets.
	args, environ []string
	// allowed are the other binaries an upgrade may execute (-upgrade-binary), absolute
	// paths; defaultBinary always may.
	allowed []string
	req     chan string // the binary to execute, handed to the main loop
	busy    atomic.Bool // an upgrade was asked for and has not failed (success ends the image)
	// failed is the error (a string) of the upgrade whose new image gave this one back
	// (fallback), shown in the status until the next upgrade.
	failed atomic.Value
}

// check refuses an upgrade that would lose requests, end in a binary that cannot run, or
// hand the supervisor to whoever could write the binary: every app's workers must be able
// to rejoin (cmd/worker's can; other programs die with their supervisor), the binary must
// be this supervisor's own path or one named by -upgrade-binary, nobody but its owner (this
// supervisor's user or root) may write it or its directory (checkUpgradeFile), and it must
// be a supervisor that runs here. It returns the path to execute: bin with every symbolic
// link resolved, once, so that what was checked is what runs.
func (u *upgrader) check(bin string) (string, error) {
	// Each app's cluster read once (Clusters): a `stop APP` between two reads once made
	// the second nil, a panic in the main loop on the SIGUSR2 path.
	for _, c := range u.reg.Clusters() {
		if c.Sup == nil || c.Name == appspec.LogNodeApp { // the log node outlives the exec (appspec/lognode.go)
			continue
		}
		if err := c.Sup.CanRejoin(); err != nil || c.Config.Fork() {
			return "", fmt.Errorf("app %q runs %s, whose workers cannot rejoin a new supervisor (%v; cmd/worker's can): stop and run the new binary instead",
				c.Name, c.Config.Command[0], err)
		}
	}
	if !filepath.IsAbs(bin) {
		return "", fmt.Errorf("binary %q: want an absolute path", bin)
	}
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is bin's, not the component's that failed
		}
		return "", fmt.Errorf("%s: %w", bin, err)
	}
	if !u.mayRun(real) {
		return "", fmt.Errorf("binary %s: an upgrade re-executes this supervisor's own binary (%s), or one that its command line names: "+
			"start it with -upgrade-binary %s to allow this one", bin, u.defaultBinary, bin)
	}
	if err := checkUpgradeFile(real); err != nil {
		return "", err
	}
	// A binary that cannot even print its usage would leave the workers waiting for a
	// supervisor that never comes.
	out, err := runFor(5*time.Second, real, "-h")
	if err != nil {
		return "", fmt.Errorf("%s -h: %w (%s)", bin, err, out)
	}
	if !bytes.Contains(out, []byte("supervisor run")) {
		return "", fmt.Errorf("%s -h does not print the supervisor's usage: not a supervisor binary", bin)
	}
	// The new binary judges this very command line and configuration (run -check): one
	// that cannot take them, or hangs on them, is refused while nothing is given up yet.
	if out, err := runFor(10*time.Second, real, append([]string{"run", "-check"}, u.args...)...); err != nil {
		return "", fmt.Errorf("%s run -check with this supervisor's arguments: %w (%s)", bin, err, out)
	}
	return real, nil
}

// mayRun says whether real (a path without symbolic links) is this supervisor's own binary
// or one of -upgrade-binary's, each resolved now: a link among them may point elsewhere
// since the start (a deploy's "current" link), as long as the file it names passes the
// same checks.
func (u *upgrader) mayRun(real string) bool {
	for _, p := range append([]string{u.defaultBinary}, u.allowed...) {
		if r, err := filepath.EvalSymlinks(p); err == nil && r == real {
			return true
		}
	}
	return false
}

// checkUpgradeFile refuses a binary (a path without symbolic links) that is not an
// executable file, or that someone other than this supervisor's user and root could have
// written, through the file or its directory (a rename over it): the upgrade runs it as the
// supervisor, with its capabilities (CAP_BPF under systemd).
func checkUpgradeFile(path string) error {
	euid := uint32(os.Geteuid())
	for _, p := range []string{path, filepath.Dir(path)} {
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: cannot read its owner", p)
		}
		if p == path && (!fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0) {
			return fmt.Errorf("%s is not an executable file", path)
		}
		if st.Uid != euid && st.Uid != 0 {
			return fmt.Errorf("%s is owned by uid %d, neither this supervisor's user (%d) nor root: whoever owns it could replace the supervisor; chown it", p, st.Uid, euid)
		}
		if fi.Mode().Perm()&0o022 != 0 {
			return fmt.Errorf("%s is writable by its group or by others (mode %v): whoever can write it could replace the supervisor; chmod go-w %s", p, fi.Mode().Perm(), p)
		}
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

// exec re-executes the supervisor as bin; it returns only if the exec failed. held is
// the apps the new image must not start (heldApps).
func (u *upgrader) exec(bin string, lf *applog.File, held string) error {
	u.log.Info("upgrading in place: re-executing; the workers serve on and rejoin the new binary",
		zap.String("binary", bin), zap.Int("pid", os.Getpid()))
	u.log.Sync()
	if lf != nil {
		lf.Sync()
	}
	// The way back (fallback): this very image's file, open across the exec.
	self, err := unix.Open(selfExe, unix.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("open %s for the way back: %w", selfExe, err)
	}
	defer unix.Close(self)
	env := append(slices.Clone(u.environ), envUpgradeFallback+"="+strconv.Itoa(self))
	if held != "" {
		env = append(env, envUpgradeApps+"="+held)
	}
	argv := append([]string{bin, "run"}, u.args...)
	err = syscall.Exec(bin, argv, env)
	if err == nil {
		err = errors.New("exec returned")
	}
	return fmt.Errorf("exec %s: %w", bin, err)
}

// The way back from an upgrade (HAProxy's): before the exec the old image opens its own
// binary, /proc/self/exe, without close-on-exec, and names the descriptor in
// envUpgradeFallback. The new image that cannot take the cluster over (its workers speak
// another rendezvous protocol, its configuration fails, ...) re-executes that descriptor,
// which is the old binary's file even after a deploy replaced or removed its path, with
// the same arguments and envUpgradeFailed saying why. The old image then adopts the
// workers, which never stopped serving, and says in its status that the upgrade failed.
const (
	envUpgradeFallback = "ONEHOST_UPGRADE_FALLBACK"
	envUpgradeFailed   = "ONEHOST_UPGRADE_FAILED"
	// envUpgradeApps carries across the exec the apps that do not run as the configuration
	// says: stopped (`stop APP`) or deleted (`delete APP`). The new image reads the same
	// configuration, and would otherwise start them again (heldApps).
	envUpgradeApps = "ONEHOST_UPGRADE_APPS"
)

// isUpgradeVar says whether kv (NAME=VALUE) is one of the variables an upgrade's images
// pass each other: no worker inherits them, and the next upgrade sets its own.
func isUpgradeVar(kv string) bool {
	name, _, _ := strings.Cut(kv, "=")
	return name == envUpgradeFallback || name == envUpgradeFailed || name == envUpgradeApps
}

// withoutUpgradeVars is environ less the upgrade's variables (isUpgradeVar): what the
// workers, a new image and the way back are given.
func withoutUpgradeVars(environ []string) []string {
	return slices.DeleteFunc(slices.Clone(environ), isUpgradeVar)
}

// takeHeldApps reads envUpgradeApps: the apps this image must leave stopped or deleted,
// and the raw value for the way back (fallback.restore). An unreadable value is an error:
// starting an app the user stopped is the surprise this exists to prevent.
func takeHeldApps(getenv func(string) string) (map[string]string, string, error) {
	v := getenv(envUpgradeApps)
	if v == "" {
		return nil, "", nil
	}
	var held map[string]string
	if err := json.Unmarshal([]byte(v), &held); err != nil {
		return nil, v, fmt.Errorf("read %s from the previous binary: %w", envUpgradeApps, err)
	}
	for name, st := range held {
		if st != registry.HeldStopped && st != registry.HeldDeleted {
			return nil, v, fmt.Errorf("read %s from the previous binary: app %q is %q, want %s or %s", envUpgradeApps, name, st, registry.HeldStopped, registry.HeldDeleted)
		}
	}
	return held, v, nil
}

// fallback is the previous binary of an upgrade's new image, until the image has taken the
// cluster over (commit).
type fallback struct {
	fd   int
	log  *zap.Logger
	held string // envUpgradeApps as the previous image gave it, given back with it
	// argv and environ start the previous binary again: run's arguments, and the
	// environment without the upgrade's variables.
	argv, environ []string
}

// takeFallback reads envUpgradeFallback (nil when this image is no upgrade's).
func takeFallback(cfg Config) *fallback {
	cfg = cfg.withDefaults()
	v := cfg.Getenv(envUpgradeFallback)
	if v == "" {
		return nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		return nil
	}
	unix.CloseOnExec(fd) // not the workers'
	return &fallback{fd: fd, log: zap.NewNop(), argv: append([]string{cfg.Binary, "run"}, cfg.Args...), environ: withoutUpgradeVars(cfg.Environ)}
}

// commit closes the way back: this image runs the cluster.
func (f *fallback) commit() {
	if f != nil && f.fd >= 0 {
		unix.Close(f.fd)
		f.fd = -1
	}
}

// restore re-executes the previous binary because of cause; it returns only if that
// failed, with both errors.
func (f *fallback) restore(cause error) error {
	if cause == nil || f == nil || f.fd < 0 {
		return cause
	}
	msg := cause.Error()
	if len(msg) > 2000 {
		msg = msg[:2000]
	}
	f.log.Error("upgrade: this binary cannot take the cluster over: re-executing the previous one", zap.Error(cause))
	f.log.Sync()
	env := append(slices.Clone(f.environ), envUpgradeFailed+"="+msg)
	if f.held != "" {
		env = append(env, envUpgradeApps+"="+f.held)
	}
	unix.Syscall(unix.SYS_FCNTL, uintptr(f.fd), unix.F_SETFD, 0)
	bin := "/proc/self/fd/" + strconv.Itoa(f.fd)
	err := syscall.Exec(bin, f.argv, env)
	return fmt.Errorf("%w; and the previous binary could not be executed again: %v", cause, err)
}

// takeUpgradeFailure reads envUpgradeFailed: the error of the upgrade that gave this image
// back, "" if none.
func takeUpgradeFailure(getenv func(string) string) string { return getenv(envUpgradeFailed) }
