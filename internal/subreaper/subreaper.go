// Package subreaper makes a process the child subreaper of everything it starts
// (prctl PR_SET_CHILD_SUBREAPER), and reaps the orphans that this brings it.
//
// A supervisor needs to know which processes are its workers' — to refuse them the
// commands that change the cluster, for one. Without a subreaper, a worker's child that
// forks twice (the classic daemon: fork, setsid, fork, the middle one exits) is handed to
// init and no longer descends from anything of the supervisor's. With one, the kernel
// hands such an orphan to the nearest subreaper among its ancestors: the supervisor, whose
// child it then is, so "a child of the supervisor" keeps meaning "one of its own".
//
// Orphans handed over must be waited for, or they stay zombies once they exit. Go's
// os/exec waits for the processes it starts by their pids, so the reaper must never wait
// for one of those (its Wait would fail): it waits only for a zombie child that no
// exec.Cmd of this process can be waiting for:
//   - one whose process group is neither its own pid nor this process's: the mark of an
//     orphan (a worker's descendant kept its worker's group, or made a new session whose
//     leader is gone); a child this process starts is in this process's group, or leads a
//     group of its own (Setpgid, Setsid);
//   - any other zombie child once it has stayed a zombie for Grace: a child whose exec.Cmd
//     waits is reaped by the kernel the moment it exits, since a Wait in progress is a
//     wait4 on its pid; one that stays a zombie that long has nobody waiting.
//
// Non-goals: reaping for a process that starts children without waiting for them at once
// (each is reaped after Grace regardless); an orphan that joined this process's own group
// is left to Grace too.
package subreaper

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/procstat"
)

// Config configures Start. The zero value works.
type Config struct {
	// Logger hears of each orphan reaped (debug) and of failures. Default: none.
	Logger *zap.Logger
	// Interval is how often the children are looked at besides on SIGCHLD. Default 5 s.
	Interval time.Duration
	// Grace is how long a zombie child that could be an exec.Cmd's is left for its Wait.
	// Default 30 s.
	Grace time.Duration
}

// Reaper reaps the orphans handed to this process until Close.
type Reaper struct {
	cfg  Config
	stop chan struct{}
	done chan struct{}
	once sync.Once
	// seen: zombie children by pid, with their start time and when first seen a zombie.
	seen map[int]zombie
	// reaped counts the orphans waited for (Reaped).
	reaped atomic.Int64
}

type zombie struct {
	start uint64
	since time.Time
}

// Start makes this process a child subreaper and starts reaping. The attribute stays for
// the life of the process (not inherited by its children; kept across execve).
func Start(cfg Config) (*Reaper, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 30 * time.Second
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("become child subreaper: %w", err)
	}
	r := &Reaper{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{}), seen: map[int]zombie{}}
	go r.run()
	return r, nil
}

// Close stops reaping and waits for the reaper's goroutine.
func (r *Reaper) Close() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

// Reaped is how many orphans were waited for so far.
func (r *Reaper) Reaped() int { return int(r.reaped.Load()) }

func (r *Reaper) run() {
	defer close(r.done)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-chld:
		case <-tick.C:
		}
		r.sweep(time.Now())
	}
}

// sweep waits for the zombie children that nobody else can be waiting for (see the package
// comment).
func (r *Reaper) sweep(now time.Time) {
	self, group := os.Getpid(), syscall.Getpgrp()
	kids, err := procstat.Children("", self)
	if err != nil {
		r.cfg.Logger.Warn("subreaper: list children", zap.Error(err))
		return
	}
	still := make(map[int]zombie, len(r.seen))
	for _, pid := range kids {
		l, err := procstat.ReadLineage("", pid)
		if err != nil || !l.Zombie {
			continue
		}
		z, ok := r.seen[pid]
		if !ok || z.start != l.Start {
			z = zombie{start: l.Start, since: now}
		}
		orphan := l.PGID != pid && l.PGID != group
		if !orphan && now.Sub(z.since) < r.cfg.Grace {
			still[pid] = z
			continue
		}
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if err != nil || got != pid {
			continue // another waiter took it first
		}
		r.reaped.Add(1)
		r.cfg.Logger.Debug("subreaper: reaped an orphan", zap.Int("pid", pid), zap.Int("pgid", l.PGID), zap.Int("status", ws.ExitStatus()))
	}
	r.seen = still
}
