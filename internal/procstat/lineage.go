package procstat

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Lineage is where a process sits among the others: its parent and its process group.
type Lineage struct {
	PPID int // 0 for the kernel's own roots (and init)
	PGID int
	// Zombie: the process has exited and waits for its parent to reap it.
	Zombie bool
	// Start is when it started, in clock ticks after boot: with the pid, it tells one
	// process from a later one that got the same pid.
	Start uint64
}

// ReadLineage reads process pid's parent and process group from /proc/PID/stat. root is
// /proc's path ("" for /proc).
func ReadLineage(root string, pid int) (Lineage, error) {
	if root == "" {
		root = "/proc"
	}
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return Lineage{}, fmt.Errorf("read process %d: %w", pid, err)
	}
	st, err := parseStat(b)
	if err != nil {
		return Lineage{}, fmt.Errorf("read process %d: %w", pid, err)
	}
	return Lineage{PPID: st.ppid, PGID: st.pgrp, Zombie: st.state == 'Z', Start: st.starttime}, nil
}

// Children lists the pids whose parent is process pid, from the kernel's list of each of
// its threads' children (/proc/PID/task/TID/children), or where the kernel keeps none
// (CONFIG_PROC_CHILDREN off) by the parent field of every process in /proc. root is
// /proc's path ("" for /proc).
func Children(root string, pid int) ([]int, error) {
	if root == "" {
		root = "/proc"
	}
	tasks, err := os.ReadDir(filepath.Join(root, strconv.Itoa(pid), "task"))
	if err != nil {
		return nil, fmt.Errorf("list children of %d: %w", pid, err)
	}
	var kids []int
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "task", t.Name(), "children"))
		if errors.Is(err, fs.ErrNotExist) && len(kids) == 0 {
			return childrenByScan(root, pid)
		}
		if err != nil {
			continue // a thread that ended meanwhile
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				kids = append(kids, c)
			}
		}
	}
	return kids, nil
}

func childrenByScan(root string, pid int) ([]int, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("list children of %d: %w", pid, err)
	}
	var kids []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := ReadLineage(root, c); err == nil && l.PPID == pid {
			kids = append(kids, c)
		}
	}
	return kids, nil
}
