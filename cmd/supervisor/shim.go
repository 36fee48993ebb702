package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// listenPIDShim is the hidden command the supervisor starts its workers through: systemd's
// socket activation says an inherited socket is the program's only if LISTEN_PID is its
// pid, and libsystemd, go-systemd, gunicorn, Puma and Unicorn check it. A Go parent cannot
// set it (no code runs between fork and exec), so the child runs this first: it sets
// LISTEN_PID to its own pid and replaces itself with the program, which keeps the pid, the
// descriptors and the rest of the environment. As systemd-socket-activate does.
const listenPIDShim = "exec-with-listen-pid"

// execWithListenPID runs `supervisor exec-with-listen-pid -- PROGRAM ARGS...`. It returns
// only on failure.
func execWithListenPID(args []string) error {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return errors.New(listenPIDShim + ": no program given")
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		return fmt.Errorf("%s: %w", listenPIDShim, err)
	}
	env := append(withoutVars(os.Environ(), "LISTEN_PID"), "LISTEN_PID="+strconv.Itoa(os.Getpid()))
	if err := syscall.Exec(path, args, env); err != nil {
		return fmt.Errorf("%s: exec %s: %w", listenPIDShim, path, err)
	}
	return nil
}
