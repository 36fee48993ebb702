package procstat

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// TreeConfig says which process tree a Tree reads. The zero value of each field but the
// roots works.
type TreeConfig struct {
	// PID is the root of the tree.
	PID int
	// PIDs are more roots, for a program whose processes do not all descend from one
	// (PM2's daemon beside the launcher that started it): the tree is theirs and PID's
	// together, each process counted once. Optional when PID is set.
	PIDs []int
	// Root is the proc file system to read. Default "/proc".
	Root string
	// Rescan is how many readings apart the whole of /proc is scanned for new members of
	// the tree; between scans only the processes already known are read. Default 5.
	Rescan int
}

// Tree reads a process tree's CPU time and memory on demand, cheaply enough for a
// supervisor to poll each of its workers every second: a full scan of /proc (every
// process's stat, to find descendants) only every Rescan readings, and between scans only
// the stat and statm files of the processes already known. A process forked since the last
// scan is missed until the next; its CPU time is not lost (it is counted in full when
// first seen, or through its parent's reaped-children times if it was already gone), only
// its memory shows late. The accounting is Sampler's (see the package doc). Not safe for
// concurrent use.
type Tree struct {
	st     *state
	rescan int
	reads  int
}

// TreeUsage is one reading of a tree.
type TreeUsage struct {
	// CPU is the tree's user and kernel time since its processes started: that of the
	// processes alive now and of their children they have reaped. The growth between two
	// readings is the tree's CPU over that time, exited children's included.
	CPU time.Duration
	// User and System split CPU into user and kernel time.
	User, System time.Duration
	// RSS is the sum of the members' resident memory. Pages a forked child still shares
	// with its parent are counted in each, as ps and top count them.
	RSS int64
	// Procs is the number of processes in the tree.
	Procs int
}

// NewTree returns a Tree rooted at cfg.PID and cfg.PIDs. A root that is not running is
// left out (a process that takes its pid later does not join); NewTree fails if none is.
func NewTree(cfg TreeConfig) (*Tree, error) {
	if cfg.Root == "" {
		cfg.Root = "/proc"
	}
	if cfg.Rescan <= 0 {
		cfg.Rescan = 5
	}
	roots := cfg.PIDs
	if cfg.PID != 0 {
		roots = append([]int{cfg.PID}, roots...)
	}
	if len(roots) == 0 {
		return nil, errors.New("read process tree: no pid")
	}
	st := newState(cfg.Root)
	var errs []error
	for _, pid := range roots {
		if pid <= 0 {
			return nil, fmt.Errorf("read process tree: bad pid %d", pid)
		}
		if err := st.addRoot(pid); err != nil {
			errs = append(errs, err)
		}
	}
	if len(st.roots) == 0 {
		return nil, fmt.Errorf("read process tree: %w", errors.Join(errs...))
	}
	// Unlike a Sampler's baseline, the first reading counts each process's whole time:
	// the tree's CPU is since it started, as ps shows it.
	st.baseline = false
	return &Tree{st: st, rescan: cfg.Rescan}, nil
}

// Read takes one reading. It fails once no process of the tree is left.
func (t *Tree) Read() (TreeUsage, error) {
	var tree map[key]procStat
	if t.reads%t.rescan == 0 {
		tree = t.st.scanTree()
	} else {
		tree = t.known()
	}
	t.reads++
	if len(tree) == 0 {
		return TreeUsage{}, fmt.Errorf("read process tree of %d: no process left", t.st.roots[0].pid)
	}
	t.st.account(tree)
	var rss int64
	for k := range tree {
		rss += t.st.rss(k.pid)
	}
	tick := time.Second / time.Duration(t.st.hz)
	u, s := time.Duration(t.st.user)*tick, time.Duration(t.st.sys)*tick
	return TreeUsage{CPU: u + s, User: u, System: s, RSS: rss, Procs: len(tree)}, nil
}

// PIDs lists the processes of the tree at the last Read, in increasing order.
func (t *Tree) PIDs() []int {
	out := make([]int, 0, len(t.st.procs))
	for k := range t.st.procs {
		out = append(out, k.pid)
	}
	slices.Sort(out)
	return out
}

// known reads the processes found before that are still alive.
func (t *Tree) known() map[key]procStat {
	tree := make(map[key]procStat, len(t.st.procs))
	for k := range t.st.procs {
		b, err := t.st.readFile(filepath.Join(t.st.root, strconv.Itoa(k.pid), "stat"))
		if err != nil {
			continue // exited
		}
		if ps, err := parseStat(b); err == nil && ps.starttime == k.start {
			tree[k] = ps
		}
	}
	return tree
}
