package procstat

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Lineage is where a process sits among the others: its parent and its process group.
type Lineage struct {
	PPID int // 0 for the kernel's own roots (and init)
	PGID int
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
	return Lineage{PPID: st.ppid, PGID: st.pgrp}, nil
}
