package main

// Taking over from a node that outlived its supervisor. The supervisor runs this program
// as a fork app; across the supervisor's upgrade (an exec) or a kill -9 of it, the node
// does not die with it (init clears the parent-death signal the supervisor sets), so the
// fleet's log keeps this host's replica and leader. The node the next supervisor starts
// finds the old one through the pid file in the log directory and stops it the planned way
// (SIGTERM: step-down, then exit) before it opens the same store.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/procstat"
)

func init() {
	if os.Getenv(ipc.EnvAdopt) != "" {
		if err := ipc.OutliveParent(); err != nil {
			fmt.Fprintln(os.Stderr, "lognode:", err, "(it dies with its supervisor)")
		}
	}
}

// pidFile is where a running node writes its pid.
func pidFile(dir string) string { return filepath.Join(dir, "lognode.pid") }

// takeOver stops the node whose pid dir's pid file names, if it still runs this program,
// and waits (up to wait) for it to exit; then writes this process's pid. release removes
// the file if it is still this process's.
func takeOver(dir string, wait time.Duration, log *zap.Logger) (release func(), err error) {
	path := pidFile(dir)
	if b, err := os.ReadFile(path); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid != os.Getpid() && isLogNode(pid) {
			log.Info("a node from an earlier supervisor runs on this log: stopping it first (planned: it steps down)", zap.Int("old_pid", pid))
			if err := syscall.Kill(pid, syscall.SIGTERM); err == nil {
				deadline := time.Now().Add(wait)
				for isLogNode(pid) {
					if time.Now().After(deadline) {
						syscall.Kill(pid, syscall.SIGKILL)
						return nil, fmt.Errorf("the earlier node (pid %d) did not stop within %v of SIGTERM: killed it; start again", pid, wait)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	me := strconv.Itoa(os.Getpid())
	if err := os.WriteFile(path, []byte(me+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return func() {
		if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == me {
			os.Remove(path)
		}
	}, nil
}

// isLogNode reports whether pid runs (not a zombie) a program named lognode.
func isLogNode(pid int) bool {
	if !procstat.Running("", pid) {
		return false
	}
	cmd, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	argv0, _, _ := bytes.Cut(cmd, []byte{0})
	return filepath.Base(string(argv0)) == "lognode"
}
