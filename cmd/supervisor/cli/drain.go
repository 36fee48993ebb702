package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/onehost/onehost/internal/control"
)

// Drain is `supervisor drain [-quiet 2s] [-timeout 60s] [-heard 10s] [-no-balancer]`: the
// host out of its balancer (the agent answers drain, the workers close kept-alive
// connections after their next response). It first waits until a balancer has heard the
// drain (an asker of the agent was told "drain": it names it), and fails when none asks
// within -heard, naming the agent's address: a balancer that cannot reach the agent
// ignores it, and the host never leaves. Then it returns once the balancer has stopped
// sending requests, the workers' request counters (summed) unchanged for -quiet. Past
// -timeout it fails, the host left drained. -no-balancer: a host with none, nothing to
// hear it.
func Drain(ctx context.Context, env Env, args []string) error {
	return drain(ctx, env, "drain", args)
}

// Ready is `supervisor ready`: the host back in its balancer.
func Ready(ctx context.Context, env Env, args []string) error {
	return drain(ctx, env, "ready", args)
}

func drain(ctx context.Context, env Env, cmd string, args []string) error {
	fs := flags(env, cmd)
	socket := socketFlag(fs, env)
	var quiet, timeout, heard time.Duration
	var noBalancer bool
	if cmd == "drain" {
		fs.DurationVar(&quiet, "quiet", 2*time.Second, "return once no request came for this long (more than the workers' stats_interval, 1s by default, at which the counters are read)")
		fs.DurationVar(&timeout, "timeout", 60*time.Second, "fail if requests still come after this long")
		fs.DurationVar(&heard, "heard", 10*time.Second, "fail if no balancer has asked the agent (and heard drain) within this long")
		fs.BoolVar(&noBalancer, "no-balancer", false, "this host has no balancer: do not wait for one to hear the drain")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q: the whole host is drained or made ready", cmd, fs.Arg(0))
	}
	if quiet <= 0 && cmd == "drain" {
		return fmt.Errorf("quiet: %v: want a duration above 0, such as 2s", quiet)
	}
	if timeout < quiet {
		return fmt.Errorf("timeout: %v is shorter than -quiet %v: it could never be met", timeout, quiet)
	}
	c, err := client(fs, socket, env)
	if err != nil {
		return err
	}
	began := time.Now()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = c.Drain(pctx, cmd == "drain")
	cancel()
	if err != nil {
		return prefixed(cmd, err)
	}
	if cmd == "ready" {
		fmt.Fprintln(env.Stdout, "ready: the agent tells every balancer ready (ending the drain, whoever set it) and answers the host's state again; the workers keep connections alive")
		return nil
	}
	if !noBalancer {
		if err := waitHeard(ctx, c, env, began, heard); err != nil {
			return err
		}
	}
	fmt.Fprintf(env.Stdout, "drained: the agent answers drain, the workers close kept-alive connections; waiting for %v without a request (at most %v)\n", quiet, timeout)
	var last, first uint64
	lastChange := began
	for i := 0; ; i++ {
		st, err := c.StatusWithin(ctx, 10*time.Second)
		if err != nil {
			return fmt.Errorf("drain: the host is drained; watching its requests: %w", err)
		}
		var total uint64
		for _, w := range st.Workers {
			total += w.Requests
		}
		now := time.Now()
		switch {
		case i == 0:
			first = total
		case total != last:
			lastChange = now
		}
		last = total
		if now.Sub(lastChange) >= quiet {
			fmt.Fprintf(env.Stdout, "quiet: no request for %v; %d requests served since the drain (took %v)\n",
				quiet, last-min(first, last), now.Sub(began).Round(10*time.Millisecond))
			return nil
		}
		if now.Sub(began) >= timeout {
			return fmt.Errorf("drain: requests still arriving after %v (%d since the drain, the last %v ago): "+
				"is the balancer sending here by other means than this agent (no agent-check on its server line, an L4 balancer without a checker)? "+
				"The host stays drained: `supervisor ready` undoes it", timeout, last-min(first, last), now.Sub(lastChange).Round(10*time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitHeard waits until an asker of the agent was told "drain" after began, and names it;
// it fails when the supervisor has no agent, or none asks within d.
func waitHeard(ctx context.Context, c *control.Client, env Env, began time.Time, d time.Duration) error {
	deadline := began.Add(d)
	for {
		st, err := c.StatusWithin(ctx, 10*time.Second)
		if err != nil {
			return fmt.Errorf("drain: the host is drained; watching for a balancer to hear it: %w", err)
		}
		if st.Agent == "" {
			return fmt.Errorf("drain: the host is drained, but this supervisor runs no agent (-agent HOST:PORT, or agent: in its configuration), so no balancer hears it: " +
				"HAProxy's agent-check must ask one; -no-balancer for a host that has no balancer (`supervisor ready` undoes the drain)")
		}
		for _, a := range st.AgentAskers {
			if !a.HeardDrain.Before(began) {
				fmt.Fprintf(env.Stdout, "%s heard drain %.1f s later\n", askerName(a), a.HeardDrain.Sub(began).Seconds())
				return nil
			}
		}
		if time.Now().After(deadline) {
			asked := "no balancer has ever asked it"
			if len(st.AgentAskers) > 0 {
				a := st.AgentAskers[0]
				asked = fmt.Sprintf("the last ask was %s's, %s ago", askerName(a), time.Since(a.Last).Round(100*time.Millisecond))
			}
			return fmt.Errorf("drain: no balancer asked the agent at %s within %v of the drain (%s): nothing has taken this host out, since a balancer that cannot reach the agent ignores it; "+
				"is the balancer's agent-check pointing at %s (agent-port)? The host stays drained: `supervisor ready` undoes it; -no-balancer for a host that has none",
				st.Agent, d, asked, st.Agent)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// askerName is how an asker is named: by what it says it is (HAProxy's agent-send), and
// its address.
func askerName(a control.AgentAsker) string {
	switch said := strings.ToLower(a.Said); {
	case strings.Contains(said, "haproxy"):
		return "HAProxy at " + a.Addr
	case strings.Contains(said, "nft"):
		return "the nftables checker at " + a.Addr
	case a.Said != "":
		return fmt.Sprintf("%q at %s", a.Said, a.Addr)
	}
	return "a balancer at " + a.Addr
}
