package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// healthProbe checks the database every interval in its own goroutine and keeps the last
// answer for the stats the worker sends its supervisor: those are asked for every second
// and must be answered at once, even while the database is slow, or the supervisor's
// heartbeat would kill a worker that is merely busy. (GET /health runs its own check on
// every request; this probe is only the supervisor's view.)
type healthProbe struct {
	check    func(context.Context) error
	log      *zap.Logger
	interval time.Duration
	timeout  time.Duration
	// last is "" while the database is healthy, else why not; nil before the first check.
	last atomic.Pointer[string]
	done sync.WaitGroup
}

// startHealthProbe checks now and then every second (each check bounded by 2 s, as GET
// /health is) until ctx ends; wait returns once it has stopped.
func startHealthProbe(ctx context.Context, check func(context.Context) error, log *zap.Logger) *healthProbe {
	p := &healthProbe{check: check, log: log, interval: time.Second, timeout: 2 * time.Second}
	p.done.Add(1)
	go p.run(ctx)
	return p
}

func (p *healthProbe) run(ctx context.Context) {
	defer p.done.Done()
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, p.timeout)
		err := p.check(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		why := ""
		if err != nil {
			why = err.Error()
		}
		// Log changes only: a database that stays broken is one line, not one a second.
		if prev := p.last.Swap(&why); prev == nil || *prev != why {
			if why != "" {
				p.log.Error("database unhealthy", zap.String("error", why))
			} else if prev != nil {
				p.log.Info("database healthy again")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// result is the last answer: healthy, or not and why. Before the first check ends it is
// neither (false, ""), which the supervisor reads as "not known yet".
func (p *healthProbe) result() (healthy bool, why string) {
	l := p.last.Load()
	if l == nil {
		return false, ""
	}
	return *l == "", *l
}

// wait returns once the probe has stopped (after its ctx ended).
func (p *healthProbe) wait() { p.done.Wait() }
