package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/onehost/onehost/internal/procstat"
)

// Kill is `supervisor kill` (pm2 kill): the whole supervisor stops gracefully, and this
// returns once it is gone.
func Kill(ctx context.Context, env Env, args []string) error {
	fs := flags(env, "kill")
	socket := socketFlag(fs, env)
	wait := fs.Duration("timeout", 5*time.Minute, "how long to wait for the supervisor to be gone (its workers drain first)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("kill: unexpected argument %q: kill stops the whole supervisor (supervisor stop APP stops one app)", fs.Arg(0))
	}
	c, err := client(fs, socket, env)
	if err != nil {
		return err
	}
	// The pid of the supervisor that takes the stop, from the connection the request goes
	// on (whose owner the client has checked). An upgrade execs in place, so the pid stays
	// the one to wait for.
	pid, err := c.StopSupervisor(ctx)
	if err != nil {
		return fmt.Errorf("kill: %w", err)
	}
	if err := waitGone(ctx, *socket, pid, *wait); err != nil {
		return fmt.Errorf("kill: %w", err)
	}
	fmt.Fprintln(env.Stdout, "killed: the supervisor and its workers stopped")
	return nil
}

// waitGone waits until the supervisor at socket, of process pid (0 when unknown), has
// exited. Gone means the process has exited: it removes its socket once its workers have
// stopped, but exits a moment later (its last log lines, a -race binary's report), and a
// caller that starts another on the same port or checks the pid must not find it still
// there. Where the pid is unknown, or is this process (a supervisor run inside it), the
// socket no longer answering is all there is to see.
func waitGone(ctx context.Context, socket string, pid int, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	gone, still := func() bool { return !procstat.Running("", pid) }, fmt.Sprintf("the supervisor (pid %d) has not exited", pid)
	if pid <= 0 || pid == os.Getpid() {
		gone = func() bool {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "unix", socket)
			if err == nil {
				conn.Close()
			}
			return err != nil && ctx.Err() == nil
		}
		still = fmt.Sprintf("the supervisor at %s still answers", socket)
	}
	for !gone() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s after %v", still, wait)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
