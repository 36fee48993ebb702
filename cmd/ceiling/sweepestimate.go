package main

import (
	"fmt"
	"io"

	"github.com/onehost/onehost/internal/ceiling"
)

// announce prints what the sweep will run and about how long it takes. Each mode runs the
// workloads it serves (a peer only its own), one server start per N.
func (f *sweepFlags) announce(stderr io.Writer) {
	c := f.c
	starts, runs := f.asked()
	rounds := ""
	if *f.repeat > 1 {
		rounds = fmt.Sprintf(" in %d rounds", *f.repeat)
	}
	fmt.Fprintf(stderr, "ceiling sweep: N=%v modes=%s workloads=%s, %d runs of %v (+%v warm-up)%s: about %.0f s\n",
		f.nlist, *f.modes, c.workloads, runs, c.d, c.warmup, rounds, f.estimate(starts, runs))
}

// asked counts the server starts and runs the flags ask for, before the peers are found.
func (f *sweepFlags) asked() (starts, runs int) {
	return ceiling.PlanSize(f.nlist, splitList(*f.modes), splitList(f.c.workloads), *f.repeat)
}

// reannounce says the sweep's length again when the peers found here (s's plan) leave
// runs out that announce counted: a missing pm2 or nginx, node without zstd.
func (f *sweepFlags) reannounce(s *ceiling.Sweeper, stderr io.Writer) {
	starts, runs := s.Planned()
	if _, asked := f.asked(); runs == asked {
		return
	}
	fmt.Fprintf(stderr, "ceiling sweep: %d runs with the peers found here (see above): about %.0f s\n", runs, f.estimate(starts, runs))
}

// estimate is the seconds that starts server starts and runs measured runs take, the
// few-connection run included.
func (f *sweepFlags) estimate(starts, runs int) float64 {
	c := f.c
	perRun := c.d.Seconds() + c.warmup.Seconds() + 0.6
	if len(f.hosts.hosts) > 0 {
		perRun += 2 * f.hosts.lead.Seconds() // the warm-up and the measured run each wait for the agreed start
	}
	est := float64(runs)*perRun + float64(starts)*2.5
	if *f.imbN > 1 {
		est += c.d.Seconds() + c.warmup.Seconds() + 2.5
	}
	return est
}
