package cli

import (
	"context"
	"fmt"
	"time"
)

// Drain is `supervisor drain [-quiet 2s] [-timeout 60s]`: the host out of its balancer
// (the agent answers drain, the workers close kept-alive connections after their next
// response); it returns once the balancer has stopped sending requests, the workers'
// request counters (summed) unchanged for -quiet. Past -timeout it fails, the host left
// drained.
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
	var quiet, timeout time.Duration
	if cmd == "drain" {
		fs.DurationVar(&quiet, "quiet", 2*time.Second, "return once no request came for this long (more than the workers' stats_interval, 1s by default, at which the counters are read)")
		fs.DurationVar(&timeout, "timeout", 60*time.Second, "fail if requests still come after this long")
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
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = c.Drain(pctx, cmd == "drain")
	cancel()
	if err != nil {
		return prefixed(cmd, err)
	}
	if cmd == "ready" {
		fmt.Fprintln(env.Stdout, "ready: the agent answers the host's state again, the workers keep connections alive")
		return nil
	}
	began := time.Now()
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
