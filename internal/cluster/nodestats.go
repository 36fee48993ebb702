package cluster

import (
	"bytes"
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"time"

	"go.uber.org/zap"
)

// What the Node preload (nodepreload/preload.cjs) tells the supervisor over Node's IPC
// channel besides "onehost:listening": its app's counters, for the status columns our own
// workers fill over our ipc, and the host the app asked for where the slot's socket is
// bound wider. A Node app never speaks our ipc (speaksIPC stays false: it is not asked
// for stats nor judged silent), so the preload pushes these on its own.

// Environment of the preload's drain and counters.
const (
	envNodeGrace = "ONEHOST_NODE_GRACE_MS" // how long a drain keeps idle keep-alive connections
	envNodeStats = "ONEHOST_NODE_STATS_MS" // how often it reports its counters
)

// nodeIdleGrace is how long a draining Node worker keeps its idle keep-alive connections
// open, as our own worker's -idle-grace (1 s): long enough for a request a client has
// already sent on one to arrive (the client of a busy connection sends its next request
// within a round trip, much later on a starved host), at most half of kill_timeout, so
// that the SIGKILL after it is never what ends a drain that went well.
func nodeIdleGrace(killTimeout time.Duration) time.Duration {
	return min(time.Second, killTimeout/2)
}

// nodeMsg is one of the preload's messages: {"onehost":"stats",…}, {"onehost":"host",…},
// and an app port's {"onehost":"listen",…} and {"onehost":"listening",…} (nodelisten.go).
type nodeMsg struct {
	Onehost     string  `json:"onehost"`
	Requests    uint64  `json:"requests"`
	Connections int64   `json:"connections"`
	At          float64 `json:"at"`    // when the counts were taken: the app's monotonic clock, ms
	Host        string  `json:"host"`  // the host the app asked for
	Bound       string  `json:"bound"` // the address fd 3 is bound on
	Kept        bool    `json:"kept"`  // the preload closes connections to other addresses
	Seq         int64   `json:"seq"`   // "listen": the request's number, for the answer
	Port        int     `json:"port"`  // "listen": the port the app asked for
	Addr        string  `json:"addr"`  // "listening": the app port it listens on
}

// parseNodeMsg reads a line of the Node channel as a preload message, ok false for
// anything else (Node's own messages, the app's).
func parseNodeMsg(line []byte) (m nodeMsg, ok bool) {
	if len(line) == 0 || line[0] != '{' || !bytes.Contains(line, []byte(`"onehost"`)) {
		return m, false
	}
	if err := json.Unmarshal(line, &m); err != nil || m.Onehost == "" {
		return m, false
	}
	return m, true
}

// nodeMessage acts on a preload message (loop only).
func (s *Supervisor) nodeMessage(p *proc, m nodeMsg) {
	switch m.Onehost {
	case "stats":
		// The rate by the app's clock: messages the loop reads late arrive together, and
		// the supervisor's clock would make a burst of them a huge rate.
		if p.nodeCounters && m.At > p.nodeAt && m.Requests >= p.prevReq {
			p.rps = float64(m.Requests-p.prevReq) / ((m.At - p.nodeAt) / 1000)
		}
		p.nodeCounters, p.nodeAt = true, m.At
		p.requests, p.prevReq, p.connections = m.Requests, m.Requests, m.Connections
	case "host":
		s.nodeHost(p, m)
	case "listening":
		s.appServing(p, m.Addr)
	}
}

// nodeHost says, once per host asked, where the app's host and the slot's socket differ
// (loop only): what is bound, what the preload does about it, and the setting that
// chooses.
func (s *Supervisor) nodeHost(p *proc, m nodeMsg) {
	if s.nodeHostSaid == nil {
		s.nodeHostSaid = map[string]bool{}
	}
	if s.nodeHostSaid[m.Host] {
		return
	}
	s.nodeHostSaid[m.Host] = true
	_, port, _ := net.SplitHostPort(s.addr)
	want := "listen: " + net.JoinHostPort(m.Host, port) + " (ecosystem.config.js: env.HOST: '" + m.Host + "'; the command line: -listen)"
	if m.Kept {
		p.log.Warn("the app listens on "+m.Host+" but the slot's socket is bound on every interface ("+s.addr+"): "+
			"the preload closes connections made to any other address as they are accepted, so the app answers on "+m.Host+" only; "+
			"the port still accepts connections on every interface (and closes them): to bind it on "+m.Host+" alone, set "+want,
			zap.String("host", m.Host), zap.String("addr", s.addr))
		return
	}
	if sameHost(m.Host, m.Bound) {
		return
	}
	p.log.Warn("the app asks for host "+m.Host+" but the supervisor's listen binds "+s.addr+": the listen address decides; "+
		"to serve "+m.Host+", set "+want, zap.String("host", m.Host), zap.String("addr", s.addr))
}

// sameHost reports whether the host an app asks for is the address bound: equal
// addresses, or localhost and a loopback address.
func sameHost(host, bound string) bool {
	b, err := netip.ParseAddr(bound)
	if err != nil {
		return false
	}
	b = b.Unmap()
	if strings.EqualFold(host, "localhost") {
		return b.IsLoopback()
	}
	h, err := netip.ParseAddr(host)
	return err == nil && h.Unmap() == b
}
