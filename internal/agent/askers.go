package agent

import (
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// Asker is one address that asked the agent, as it last did.
type Asker struct {
	Addr string    `json:"addr"`
	Last time.Time `json:"last"`
	// Answer is the line it was last given, without its newline.
	Answer string `json:"answer"`
	// HeardDrain is when it was last told "drain" (zero: never); HeardReady when it was
	// last told "ready".
	HeardDrain time.Time `json:"heard_drain,omitzero"`
	HeardReady time.Time `json:"heard_ready,omitzero"`
	// Said is the first line it sent after its check (HAProxy's agent-send), printable,
	// at most 64 bytes: "" when it sends nothing.
	Said string `json:"said,omitempty"`

	// owed: it heard "drain" and has not been told "ready" since.
	owed bool
}

// maxAskers bounds the addresses remembered: the oldest goes past it.
const maxAskers = 32

// askers are who asked, by address. The accept loop answers, lingering connections record
// what they were sent, and readers (the status) copy; all under mu.
type askers struct {
	mu sync.Mutex
	by map[string]*Asker
	// readyUntil: SetReady's window, in which an asker not yet told "ready" since readyFrom
	// is told it once.
	readyFrom, readyUntil time.Time
}

// answer is the line for host at now, given the host's state, and remembers it.
func (a *askers) answer(host string, st State, now time.Time) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := a.by[host]
	if k == nil {
		if len(a.by) >= maxAskers {
			oldest := ""
			for h, x := range a.by {
				if oldest == "" || x.Last.Before(a.by[oldest].Last) {
					oldest = h
				}
			}
			delete(a.by, oldest)
		}
		k = &Asker{Addr: host}
		a.by[host] = k
	}
	inWindow := now.Before(a.readyUntil) && k.HeardReady.Before(a.readyFrom)
	line := Answer(st, k.owed || inWindow)
	k.Last, k.Answer = now, strings.TrimSuffix(line, "\n")
	switch {
	case strings.HasPrefix(line, "drain"):
		k.HeardDrain, k.owed = now, true
	case strings.HasPrefix(line, "up ready"):
		k.HeardReady, k.owed = now, false
	}
	return line
}

// unsaid takes back what answer recorded for host when line could not be written: a
// "ready" not delivered is owed still.
func (a *askers) unsaid(host, line string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if k := a.by[host]; k != nil && strings.HasPrefix(line, "up ready") {
		k.owed, k.HeardReady = true, time.Time{}
	}
}

// said records the first bytes host sent after its check.
func (a *askers) said(host string, b []byte) {
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r > 0x7e {
			return -1
		}
		return r
	}, line)
	if len(line) > 64 {
		line = line[:64]
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if k := a.by[host]; k != nil {
		k.Said = line
	}
}

// SetReady has the agent tell every asker "ready" once, for ReadyFor from now: the
// operator wants the host back in, whatever drained it (this agent before a restart, or
// the runtime API).
func (s *Server) SetReady() {
	now := s.cfg.Now()
	s.askers.mu.Lock()
	defer s.askers.mu.Unlock()
	s.askers.readyFrom, s.askers.readyUntil = now, now.Add(s.cfg.ReadyFor)
}

// Askers are the addresses that asked, the latest first.
func (s *Server) Askers() []Asker {
	s.askers.mu.Lock()
	defer s.askers.mu.Unlock()
	out := make([]Asker, 0, len(s.askers.by))
	for _, k := range s.askers.by {
		out = append(out, *k)
	}
	slices.SortFunc(out, func(x, y Asker) int { return y.Last.Compare(x.Last) })
	return out
}

// hostOf is the IP of addr (its port changes with every check).
func hostOf(addr net.Addr) string {
	if ta, ok := addr.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	h, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return h
}
