package systemd

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// ListenPIDShim is the hidden command the supervisor starts its workers through: systemd's
// socket activation says an inherited socket is the program's only if LISTEN_PID is its
// pid, and libsystemd, go-systemd, gunicorn, Puma and Unicorn check it. A Go parent cannot
// set it (no code runs between fork and exec), so the child runs this first: it sets
// LISTEN_PID to its own pid and replaces itself with the program, which keeps the pid, the
// descriptors and the rest of the environment. As systemd-socket-activate does.
const ListenPIDShim = "exec-with-listen-pid"

// ExecWithListenPID runs `supervisor exec-with-listen-pid -- PROGRAM ARGS...`. It returns
// only on failure.
func ExecWithListenPID(args []string) error {
	ppid := os.Getppid()
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return errors.New(ListenPIDShim + ": no program given")
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		return fmt.Errorf("%s: %w", ListenPIDShim, err)
	}
	// Setenv replaces an inherited LISTEN_PID in place: exec's environment must not hold
	// two, of which a program's getenv would take the first.
	if err := os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid())); err != nil {
		return fmt.Errorf("%s: %w", ListenPIDShim, err)
	}
	// The unit's AmbientCapabilities=CAP_BPF is for the supervisor's steering program, and
	// ambient capabilities survive execve: without this every worker would hold CAP_BPF
	// too. The supervisor cannot lower it for its children itself: capabilities belong to a
	// thread, and it forks from any of its threads (nor would AllThreadsSyscall work, cgo
	// being linked). execve keeps the calling thread's, so lower it on this one and exec
	// from it. The supervisor keeps its own CAP_BPF, which its map updates may need
	// (before Linux 6.5, unprivileged_bpf_disabled refuses every bpf(2) command without
	// it). An error (EINVAL: a kernel without CAP_BPF) leaves nothing to lower.
	runtime.LockOSThread()
	unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_LOWER, unix.CAP_BPF, 0, 0)
	// The parent-death signal the supervisor gives every worker (SIGKILL) is kept per
	// thread, on the main one; an exec from another thread would drop it, and a program
	// that cannot rejoin would serve on after a kill -9 of the supervisor. So set it on
	// this thread too; a parent gone meanwhile (before the signal was armed here) is
	// seen by the parent pid having changed. (A worker that can rejoin clears it itself.)
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err == nil && os.Getppid() != ppid {
		return fmt.Errorf("%s: the supervisor (pid %d) is gone", ListenPIDShim, ppid)
	}
	if err := syscall.Exec(path, args, os.Environ()); err != nil {
		return fmt.Errorf("%s: exec %s: %w", ListenPIDShim, path, err)
	}
	return nil
}
