package main

import (
	"fmt"
	"io"

	"github.com/onehost/onehost/internal/ceiling"
)

// announce prints what the sweep will run and about how long it takes. Each mode runs the
// workloads it serves (a peer only its own), one server start per N.
func (f *sweepFlags) announce(stderr io.Writer) {
	c, nlist := f.c, f.nlist
	runs, starts := 0, 0
	for _, m := range splitList(*f.modes) {
		k := 0
		for _, w := range splitList(c.workloads) {
			if ceiling.ServesWorkload(m, w) {
				k++
			}
		}
		runs += len(nlist) * k
		if k > 0 {
			starts += len(nlist)
		}
	}
	runs, starts = runs**f.repeat, starts**f.repeat
	f.announced = runs
	rounds := ""
	if *f.repeat > 1 {
		rounds = fmt.Sprintf(" in %d rounds", *f.repeat)
	}
	fmt.Fprintf(stderr, "ceiling sweep: N=%v modes=%s workloads=%s, %d runs of %v (+%v warm-up)%s: about %.0f s\n",
		nlist, *f.modes, c.workloads, runs, c.d, c.warmup, rounds, f.estimate(starts, runs))
}

// reannounce says the sweep's length again when the peers found here (s's plan) leave
// runs out that announce counted: a missing pm2 or nginx, node without zstd.
func (f *sweepFlags) reannounce(s *ceiling.Sweeper, stderr io.Writer) {
	starts, runs := s.Planned()
	if runs == f.announced {
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
