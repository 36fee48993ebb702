package cli

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/term"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/monit"
	"github.com/onehost/onehost/internal/procstat"
)

// Monit is `supervisor monit [-interval 1s] [-once]`: a live view of the workers and the
// host, as `pm2 monit`. On a terminal it takes the alternate screen and redraws every
// interval until q or ^C; otherwise (a pipe, a file) or with -once it prints one frame.
func Monit(ctx context.Context, env Env, args []string) error {
	fs := flags(env, "monit")
	socket := socketFlag(fs, env)
	interval := fs.Duration("interval", time.Second, "how often to read the supervisor and the host and redraw")
	once := fs.Bool("once", false, "print one frame and exit (also what happens when stdout is not a terminal)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("monit: unexpected argument %q", fs.Arg(0))
	}
	if *interval < 100*time.Millisecond {
		return fmt.Errorf("monit: -interval %v: want at least 100ms", *interval)
	}
	c, err := client(fs, socket, env)
	if err != nil {
		return err
	}
	m := &monit.Monitor{
		Status: func(ctx context.Context) (control.Status, error) {
			// A wedged supervisor must not freeze the screen: one interval late is a miss.
			return c.StatusWithin(ctx, max(*interval, 2*time.Second))
		},
		ReadHost: func() (procstat.Host, error) { return procstat.ReadHost("") },
		Now:      time.Now,
		Interval: *interval,
	}
	out, isFile := env.Stdout.(*os.File)
	if *once || !isFile || !term.IsTerminal(int(out.Fd())) {
		width := 100
		if n, err := strconv.Atoi(env.Getenv("COLUMNS")); err == nil && n > 0 {
			width = n
		}
		return monit.Once(ctx, m, width, env.Stdout)
	}
	return monit.Live(ctx, m, out)
}
