package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/ceiling"
)

// runPin replaces this process with COMMAND, restricted to the given cores: taskset
// without util-linux, so a bare machine needs nothing but these binaries. The pid stays
// the same (exec), so the sweep reads the command's /proc entries under the pid it
// started.
func runPin(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("ceiling pin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cpus := fs.String("cpus", "", "cpu list, as taskset -c takes it: 0-3,8")
	cgroup := fs.String("cgroup", "", "a cgroup directory to join first (its cgroup.procs), so the command and all it starts run in it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cgroup != "" {
		if err := os.WriteFile(filepath.Join(*cgroup, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return fmt.Errorf("pin: join cgroup: %w", err)
		}
	}
	if fs.NArg() == 0 {
		return errors.New("pin: no command given")
	}
	list, err := ceiling.ParseCPUList(*cpus)
	if err != nil {
		return err
	}
	path, err := exec.LookPath(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("pin: %w", err)
	}
	// Affinity is per thread; exec keeps only the calling thread, so set and exec on one.
	runtime.LockOSThread()
	var set unix.CPUSet
	for _, c := range list {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin to %s: %w", *cpus, err)
	}
	return fmt.Errorf("pin: exec %s: %w", path, syscall.Exec(path, fs.Args(), os.Environ()))
}

// selfPin is the sweep's Pin: it runs argv through `ceiling pin` (this executable).
func selfPin(self string) func(cpus []int, argv []string) []string {
	return func(cpus []int, argv []string) []string {
		return append([]string{self, "pin", "-cpus", ceiling.FormatCPUList(cpus), "--"}, argv...)
	}
}
