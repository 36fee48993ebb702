// The host's place behind a balancer: the agent HAProxy asks (internal/agent), and
// `supervisor drain` and `ready`, which take the host out of it and back.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/onehost/onehost/internal/agent"
	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
)

// agentStopGrace is how long the agent stays up after the supervisor began stopping, at
// least: it answers "drain" meanwhile, so that HAProxy, asking every agent-inter (1 s in
// the documented setting), hears it at least once before the port goes silent (a silent
// agent is ignored, and the HTTP check alone decides).
const agentStopGrace = 2 * time.Second

// agentState is the host's state for the agent: the cluster-mode apps' workers (a fork
// app has no socket of ours a balancer sends to; the fork apps' when there is no other),
// the drain and the stop. It reads snapshots only: never waits for a cluster's loop.
func (f *fleet) agentState() agent.State {
	st := agent.State{Drained: f.drained.Load(), Stopping: f.stopping.Load()}
	clusters := false
	for _, a := range f.apps {
		clusters = clusters || !a.config().Fork()
	}
	for _, a := range f.apps {
		if clusters && a.config().Fork() {
			continue
		}
		if sup := a.current(); sup != nil {
			sv := sup.Serving()
			st.Online += sv.Online
			st.Desired += sv.Desired
		}
	}
	return st
}

// setDrained takes the host out of its balancer (true) or back (false): the agent answers
// "drain" (or its whole state again), and every running app's workers close each kept-alive
// connection after its next response (or keep them alive again).
func (f *fleet) setDrained(on bool) error {
	f.drained.Store(on)
	var errs []error
	for _, a := range f.apps {
		if sup := a.current(); sup != nil {
			if err := sup.SetHostDrained(on); err != nil && !errors.Is(err, cluster.ErrStopped) {
				errs = append(errs, f.wrap(a, err))
			}
		}
	}
	return errors.Join(errs...)
}

// agentAddress is the agent's HOST:PORT: the -agent flag's, else the configuration's
// (agent:), which must agree when several apps set it.
func agentAddress(flagValue string, specs []cluster.App) (string, error) {
	if flagValue != "" {
		return flagValue, (cluster.Config{Agent: flagValue}).Validate()
	}
	addr := ""
	for _, sp := range specs {
		if a := sp.Config.Agent; a != "" && addr != "" && a != addr {
			return "", fmt.Errorf("agent: app %s says %q and another %q: the agent is the supervisor's, one for the host: set one (or -agent HOST:PORT)", sp.Name, a, addr)
		} else if a != "" {
			addr = a
		}
	}
	return addr, nil
}

// runDrain is `supervisor drain` and `supervisor ready`. Drain returns once the balancer
// has stopped sending requests: the workers' request counters (summed) stayed unchanged
// for -quiet; past -timeout it fails, the host left drained.
func runDrain(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("supervisor "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", control.DefaultSocket(getenv), "control socket path")
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
	if err := findSocket(fs, socket, stderr); err != nil { // an installed unit's (startup), when the default is not there
		return err
	}
	if err := control.CheckSocketPath(*socket); err != nil {
		return err
	}
	c := control.NewClient(*socket).HTTP()
	if err := post(ctx, c, *socket, cmd); err != nil {
		return err
	}
	if cmd == "ready" {
		fmt.Fprintln(stdout, "ready: the agent answers the host's state again, the workers keep connections alive")
		return nil
	}
	began := time.Now()
	fmt.Fprintf(stdout, "drained: the agent answers drain, the workers close kept-alive connections; waiting for %v without a request (at most %v)\n", quiet, timeout)
	var last, first uint64
	lastChange := began
	for i := 0; ; i++ {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := fetchStatus(sctx, c, *socket)
		cancel()
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
			fmt.Fprintf(stdout, "quiet: no request for %v; %d requests served since the drain (took %v)\n",
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

// post sends POST /cmd and reads the answer's error, if any.
func post(ctx context.Context, c *http.Client, socket, cmd string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", "http://supervisor/"+cmd, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("reach the supervisor at %s (is `supervisor run` running?): %w", socket, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 300 {
		var e control.ErrorReply
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s: %s", cmd, e.Error)
		}
		return fmt.Errorf("%s: %s", cmd, resp.Status)
	}
	return nil
}
