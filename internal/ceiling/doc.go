// Package ceiling finds and explains the single-host ceiling of the cluster: it runs the
// scaling sweep (the supervisor with N workers against one GOMAXPROCS=N worker, a load
// generator pinned to other cores), measures what each run cost (server CPU per request,
// bytes per request, the generator's own CPU, host CPU and loopback bytes from /proc),
// names what ran out first (Judge: cpu, nic, generator, fd or sqlite), fits a small model
// that extends the measured points to more cores and faster links (Fit, Model.Predict),
// and draws the results as SVG without dependencies (Chart).
//
// The sweep starts real processes (bin/supervisor, bin/worker, bin/autocannon or wrk) and
// reads Linux /proc; everything else is pure functions of recorded Runs, so a result file
// from another machine can be modelled and plotted here. The NIC is emulated by shaping a
// private network namespace's loopback (see package linkshape). The sweep sends traffic
// to 127.0.0.1 only, unless it is given load hosts (LoadHosts): then autocannon runs on
// them over ssh (package loadhosts) against the server on SweepConfig.ListenHost, and
// their results are merged (MergeOutcomes).
//
// The sweep's files: sweep.go holds its configuration and setup (SweepConfig, NewSweeper,
// the cores each run is pinned to); sweepplan.go its plan and the loops that run it (Sweep,
// NIC); measure.go the measuring of one run (Measure and its steps, from placing the
// generator to the verdict); server.go the servers it starts. The peers: peers.go says
// which modes are peers and finds their programs; peerstart.go starts and stops them (PM2,
// nginx); peercompare.go compares our cluster with them. The fleet: fleet.go holds its
// configuration and the loop over sizes and balancers; fleetmeasure.go measures one fleet
// run; fleetreport.go and fleetplots.go summarise and draw the results. One database for
// the fleet (`ceiling fleet -log`): fleetlog.go starts the hosts with their write log and
// runs the phases, fleetlogload.go is its load and histograms, fleetlogfaults.go its lag,
// its faults and its pairs check.
//
// Non-goals: a load generator of its own (it drives bin/autocannon or wrk), statistical
// rigour beyond one run per cell (the sweep is a map of where the ceiling lies, and each
// run says how it was measured so it can be repeated).
package ceiling
