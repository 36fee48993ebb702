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
	fifo := fs.Int("fifo", 0, "run the command at this SCHED_FIFO real-time priority (1-99; 0: the normal policy), as chrt -f does; root or CAP_SYS_NICE")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *fifo < 0 || *fifo > 99 {
		return fmt.Errorf("pin: -fifo %d: want 1-99, or 0 for the normal policy", *fifo)
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
	if *fifo > 0 {
		// Like the affinity, the policy is the thread's and passes to what it starts.
		if err := unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(*fifo)}, 0); err != nil {
			return fmt.Errorf("pin: real-time priority %d (needs root or CAP_SYS_NICE): %w", *fifo, err)
		}
	}
	return fmt.Errorf("pin: exec %s: %w", path, syscall.Exec(path, fs.Args(), os.Environ()))
}

// selfPinFIFO is the sweep's Pin: it runs argv through `ceiling pin` (this executable),
// at SCHED_FIFO priority fifo (0: the normal policy).
func selfPinFIFO(self string, fifo int) func(cpus []int, argv []string) []string {
	return func(cpus []int, argv []string) []string {
		a := []string{self, "pin", "-cpus", ceiling.FormatCPUList(cpus)}
		if fifo > 0 {
			a = append(a, "-fifo", strconv.Itoa(fifo))
		}
		return append(append(a, "--"), argv...)
	}
}
