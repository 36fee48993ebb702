package writelog

// Read your writes for clients that carry nothing. Each host's applier reports the last
// sequence it applied, and whether the host serves, on AppliedSubject.<host> (plain NATS,
// not stored) after every batch and every ReportEvery while idle; every process of every
// host hears every report. A write owner answers a write once every live host that serves
// (heard within LiveWithin, in the balancer by its own word) has applied it
// (WaitApplied), so a read sent anywhere in the balancer afterwards sees it. A host that
// does not apply in time (WaitBound) stops being waited for until it has caught up; before
// that, once it has been behind a serving host for LagBound, the host itself says it does
// not serve (Serving), and its agent takes it out of the balancer. Hosts that do not serve
// are neither waited for nor compared with: when the host that had applied the most
// leaves (its node stopped), the others are not "behind" it.
//
// What remains: a host that stalls is still sent reads from the moment it says it does
// not serve until its balancer has heard it (HAProxy's HTTP check of /health, or the
// agent after the supervisor's next stats round, each about a second), and a write
// acknowledged meanwhile without it may be read there.
//
// Report: applied(8) pending(8) serving(1), big endian: pending is how many messages the
// stream held past applied when they were delivered.

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/fleetspec"
)

// hostState is what this process knows of one host's applier.
type hostState struct {
	applied  uint64
	heard    time.Time
	serving  bool // by its own report
	excluded bool // missed a WaitBound: not waited for until caught up
}

// progress is the hosts' applied sequences as heard, and this host's serving state.
type progress struct {
	cfg  Config
	self string
	sub  *nats.Subscription
	nc   *nats.Conn
	// nodeOK reports whether this host's own node answers (Log.Serving's first test).
	nodeOK func() bool

	mu        sync.Mutex
	hosts     map[string]*hostState
	changed   chan struct{} // closed and replaced at every change
	reporting bool          // this process follows the log (Follow runs)
	own       uint64        // what this process applied last
	pending   uint64

	serving      bool      // caught up once and not lagging since
	servingSince time.Time // when serving last became true
	behindSince  time.Time // this host behind another since (zero: not behind)
	why          string    // why not serving
}

func (p *progress) init(cfg Config) {
	p.cfg, p.self = cfg, cfg.Spec.Self
	p.hosts = map[string]*hostState{}
	p.changed = make(chan struct{})
	p.why = "not caught up with the write log yet"
}

// subscribe starts hearing every host's reports.
func (p *progress) subscribe(nc *nats.Conn) error {
	p.nc = nc
	sub, err := nc.Subscribe(fleetspec.AppliedSubject+".*", func(m *nats.Msg) {
		if len(m.Data) < 17 {
			return
		}
		host := strings.TrimPrefix(m.Subject, fleetspec.AppliedSubject+".")
		p.note(host, binary.BigEndian.Uint64(m.Data), m.Data[16] == 1, time.Now())
	})
	if err != nil {
		return fmt.Errorf("hear the hosts' progress: %w", err)
	}
	p.sub = sub
	return nil
}

// note records host's report (loop of the subscription, or this process's applier).
func (p *progress) note(host string, applied uint64, serving bool, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.hosts[host]
	if h == nil {
		h = &hostState{}
		p.hosts[host] = h
	}
	h.heard, h.serving = now, serving
	if applied > h.applied {
		h.applied = applied
	}
	if h.excluded && h.applied >= p.maxAppliedLocked(now, "") {
		h.excluded = false
		p.cfg.Logger.Info("write log: host caught up: waited for again", zap.String("host", host), zap.Uint64("applied", h.applied))
	}
	p.judgeLocked(now)
	close(p.changed)
	p.changed = make(chan struct{})
}

// maxAppliedLocked is the highest sequence a live host that serves applied, but not.
func (p *progress) maxAppliedLocked(now time.Time, but string) uint64 {
	var m uint64
	for name, h := range p.hosts {
		if name != but && h.serving && now.Sub(h.heard) <= p.cfg.LiveWithin && h.applied > m {
			m = h.applied
		}
	}
	return m
}

// judgeLocked updates whether this host serves: it must have been heard (its applier
// runs), have caught up once, and not have been behind another live host for LagBound.
func (p *progress) judgeLocked(now time.Time) {
	self := p.hosts[p.self]
	if self == nil || now.Sub(self.heard) > p.cfg.LiveWithin {
		p.serving, p.behindSince, p.why = false, time.Time{}, "this host applies nothing: no write owner follows the log here"
		return
	}
	behind := self.applied < p.maxAppliedLocked(now, p.self)
	switch {
	case !behind:
		p.behindSince = time.Time{}
		if !p.serving {
			p.servingSince = now
		}
		p.serving, p.why = true, ""
	case p.behindSince.IsZero():
		p.behindSince = now
	}
	if behind && p.serving && now.Sub(p.behindSince) > p.cfg.LagBound {
		p.serving = false
		p.why = fmt.Sprintf("this host's apply lags the fleet's by %v", now.Sub(p.behindSince).Round(time.Millisecond))
	}
}

// startReporting and stopReporting bracket Follow.
func (p *progress) startReporting(applied uint64) {
	p.mu.Lock()
	p.reporting, p.own = true, applied
	p.mu.Unlock()
	p.applied(applied, 0)
}

// reportNow sends this host's report at once, if this process reports, and returns
// whether it does.
func (p *progress) reportNow() bool {
	p.mu.Lock()
	reporting, seq, pending := p.reporting, p.own, p.pending
	p.mu.Unlock()
	if reporting {
		p.applied(seq, pending)
	}
	return reporting
}

func (p *progress) stopReporting() {
	p.mu.Lock()
	p.reporting = false
	p.mu.Unlock()
}

// applied records and reports what this process's applier applied, and whether the
// host serves as judged with it.
func (p *progress) applied(seq, pending uint64) {
	nodeOK := p.nodeOK()
	now := time.Now()
	p.mu.Lock()
	p.own, p.pending = seq, pending
	self := p.hosts[p.self]
	if self == nil {
		self = &hostState{}
		p.hosts[p.self] = self
	}
	self.heard = now
	if seq > self.applied {
		self.applied = seq
	}
	p.judgeLocked(now)
	serving := p.serving && nodeOK
	self.serving = serving
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	p.publish(seq, pending, serving)
}

func (p *progress) publish(seq, pending uint64, serving bool) {
	var b [17]byte
	binary.BigEndian.PutUint64(b[:], seq)
	binary.BigEndian.PutUint64(b[8:], pending)
	if serving {
		b[16] = 1
	}
	p.nc.Publish(fleetspec.AppliedSubject+"."+p.self, b[:]) // an error: disconnected; the next report tells
}

// reportLoop repeats this host's report while this process follows the log, and judges
// the serving state again as time passes (a host can go silent).
func (l *Log) reportLoop() {
	defer l.done.Done()
	t := time.NewTicker(l.cfg.ReportEvery)
	defer t.Stop()
	p := &l.prog
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		if p.reportNow() {
			continue
		}
		p.mu.Lock()
		p.judgeLocked(time.Now())
		p.mu.Unlock()
	}
}

// WaitApplied returns once every live host that serves and is waited for has applied seq
// (this host's applier included), or ctx ends. A host still short of it WaitBound after the
// call began is no longer waited for (logged), until it reports it has caught up.
func (l *Log) WaitApplied(ctx context.Context, seq uint64) error {
	p := &l.prog
	start := time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		now := time.Now()
		p.mu.Lock()
		ok := true
		for name, h := range p.hosts {
			if h.excluded || !h.serving || now.Sub(h.heard) > p.cfg.LiveWithin || h.applied >= seq {
				continue
			}
			if now.Sub(start) >= p.cfg.WaitBound {
				h.excluded = true
				p.cfg.Logger.Warn("write log: host did not apply in time: no longer waited for until it catches up",
					zap.String("host", name), zap.Uint64("applied", h.applied), zap.Uint64("want", seq), zap.Duration("waited", now.Sub(start)))
				continue
			}
			ok = false
		}
		ch := p.changed
		p.mu.Unlock()
		if ok {
			return nil
		}
		wait := max(p.cfg.WaitBound-now.Sub(start), time.Millisecond)
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ch:
		case <-timer.C:
		case <-ctx.Done():
			return fmt.Errorf("wait for the hosts to apply %d: %w", seq, ErrUndecided)
		}
	}
}

// Serving returns "" while this host may take traffic, else why not: its own log node is
// not running, no node answers, no applier runs here, it has not caught up since it
// started, or its apply has lagged another host's for LagBound.
func (l *Log) Serving() string {
	switch {
	case l.leaving.Load():
		return "this host's log node is stopping"
	case !l.local.IsConnected():
		return "this host's log node does not answer"
	case !l.nc.IsConnected():
		return "no log node answers"
	}
	p := &l.prog
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.judgeLocked(now)
	if p.why == "" && now.Sub(p.servingSince) < announceFor {
		// The writers learn that this host serves from its reports: only once they have
		// heard it (and wait for it) may the balancer send it reads.
		return "announcing to the fleet that this host serves"
	}
	return p.why
}

// announceFor is how long a host that has caught up waits before it takes traffic: two
// reports' time, so that every writer has heard it serves and waits for it.
const announceFor = 600 * time.Millisecond

// MinLiveApplied is the lowest sequence a live host has applied (what the stream must
// keep after), and whether any host is live.
func (l *Log) MinLiveApplied() (uint64, bool) {
	p := &l.prog
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	var m uint64
	live := false
	for _, h := range p.hosts {
		if now.Sub(h.heard) > p.cfg.LiveWithin {
			continue
		}
		if !live || h.applied < m {
			m = h.applied
		}
		live = true
	}
	return m, live
}

// Leads reports whether this host is the first, by name, of the live hosts: the one
// that takes the snapshots.
func (l *Log) Leads() bool {
	p := &l.prog
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for name, h := range p.hosts {
		if now.Sub(h.heard) <= p.cfg.LiveWithin && name < p.self {
			return false
		}
	}
	return true
}
