package balancer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// AgentState is what a host's agent says of it, read the way HAProxy's agent-check reads
// the same line.
type AgentState struct {
	// Live: the host takes new connections. "drain", "maint", "down", "fail", "stopped"
	// or a weight of 0% say no; "up", "ready" or a weight above 0 say yes.
	Live bool
	// Weight is the percentage of the host's configured weight the agent announced; 100
	// when it announced none; at most MaxAgentWeight.
	Weight int
}

// MaxAgentWeight is the highest weight an agent's line can give a host, in percent: HAProxy
// caps a server's weight at 256, and so does the nftables checker, so that an agent that
// says "up 2500%" (a squatter on the agent's port, say) cannot take nearly all of the map,
// nor a huge one make the ruleset huge.
const MaxAgentWeight = 256

// ParseAgentReply reads one agent line: words separated by spaces, tabs or commas, in any
// order, case-insensitive ("up 50%", "ready", "drain", "down#maintenance"). Unknown words
// are ignored, as HAProxy ignores them; a line with no word HAProxy knows is an error. A
// weight above MaxAgentWeight (however many digits) is MaxAgentWeight; a negative one is
// an error, as in HAProxy.
//
// Unlike HAProxy, which remembers a "drain" until the agent says "ready", the answer is
// read alone: the checker asks again every interval, so each line is the whole state.
func ParseAgentReply(line string) (AgentState, error) {
	line, _, _ = strings.Cut(line, "\n")
	line = strings.TrimRight(line, "\r")
	st := AgentState{Live: true, Weight: 100}
	known, out := false, false
	for _, w := range strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == ',' }) {
		w, _, _ = strings.Cut(w, "#") // "down#reason"
		w = strings.ToLower(w)
		switch {
		case w == "up" || w == "ready":
			known = true
		case w == "drain" || w == "maint" || w == "down" || w == "fail" || w == "stopped":
			known, out = true, true
		case strings.HasSuffix(w, "%"):
			n, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSuffix(w, "%"), "+"), 10, 16)
			if err != nil && !errors.Is(err, strconv.ErrRange) {
				return AgentState{}, fmt.Errorf("read agent reply %q: weight %q is not a percentage", line, w)
			}
			st.Weight, known = int(min(n, MaxAgentWeight)), true // out of range: n is the type's maximum
		case strings.HasPrefix(w, "maxconn:"):
			known = true
		}
	}
	if !known {
		return AgentState{}, fmt.Errorf("read agent reply %q: no state or weight in it", line)
	}
	st.Live = !out && st.Weight > 0
	return st, nil
}

// AskAgent connects to an agent at addr, reads its one line and parses it. A host whose
// agent cannot be reached within timeout is an error (the checker takes it out).
func AskAgent(ctx context.Context, addr string, timeout time.Duration) (AgentState, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return AgentState{}, fmt.Errorf("ask agent %s: %w", addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReaderSize(c, 256).ReadString('\n')
	if err != nil && line == "" {
		return AgentState{}, fmt.Errorf("ask agent %s: %w", addr, err)
	}
	return ParseAgentReply(line)
}
