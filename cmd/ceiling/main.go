// Command ceiling finds the single-host ceiling of the cluster: what runs out first (CPU,
// the NIC, the load generator, descriptors or SQLite's write lock) as workers are added,
// and a model that extends the measurements to more cores and faster links.
//
// Usage:
//
//	ceiling sweep [-quick] [-out DIR] [-n 1,2,4] [-repeat 3] [-workloads mix,feed,heavy,hello,static] [-peer-heavy DIR] ...
//	ceiling sweep -app 'node server.js' [-app-config FILE] [-m POST] [-path /api] [-H 'K: v'] [-b BODY] [-n 1,2,4] [-gen-cpus 10,11] ...
//	ceiling nic   [-quick] [-out DIR] [-n N] [-rates 100mbit,1gbit,10gbit] [-fifo 10] ...   (root)
//	ceiling model [-results DIR|FILE,...] [-csv FILE,...] [-fit-max-n 2] [-cores 12] [-nic 10g] [-plots DIR]
//
// `sweep` starts the cluster (bin/supervisor) and one GOMAXPROCS=N worker for each N,
// drives each workload with bin/autocannon (wrk for the mix, or when autocannon is
// missing) pinned to other cores, and writes DIR/sweep/ceiling.json (the machine, the
// command and every run) and runs.jsonl. Beside them, at the same N, it measures the
// peers when present: PM2's cluster mode running the Fastify heavy PATCH (-peer-heavy)
// and nginx serving the static page, and for the workloads that ask for a content coding
// the same two compressing per request (@fastify/compress; nginx's gzip on). With -app it sweeps the user's own program instead
// (under the supervisor, as `supervisor run -- COMMAND` runs an unmodified Node app or an
// fd 3 program), with their request, and the same script under PM2 as the peer
// (docs/ceiling.md, "Your own app on your own N-core box"). `nic` does the same inside a private network
// namespace whose loopback is shaped to each rate (DIR/nic/). `model` fits the model to
// the results (the sweep's ceiling.json, or bench/scale.sh CSVs), prints predictions and
// their error against every run (in-sample, leave-one-out, and extrapolated from N ≤ 2),
// and draws SVG plots.
// Each run prints one line: workload=heavy n=4 mode=cluster rps=... verdict=cpu evidence="...".
// With -load-hosts user@host,... (sweep and challenge) the generator runs on those hosts
// over ssh, the load split between them and started at one agreed time, the results merged
// (loadhosts.go; docs/bench.md, "Load from other hosts").
//
// `challenge` measures the "$12 Server Challenge" score: the worker (or the cluster) in a
// CPU quota (20 % of one core by default, as the published entries were measured), the
// user journey's search for the most users it holds (internal/journey), the server's CPU
// per request, and the Node peer's score in the same run (-peer-feed).
//
// `fleet` (root) runs H hosts, each a network namespace with its own cluster in a CPU
// quota, behind each balancer (HAProxy, nftables DNAT, none) and says per workload at which
// H the balancer becomes the limit, with its CPU per request beside the servers'
// (DIR/fleet/ceiling.json, its plots and progress.json beside it; docs/fleet.md).
// `fleet-config` prints the balancer's configuration for the user's own hosts, HAProxy's
// or the nftables ruleset, from the same templates (fleetconfig.go; the -host parser in
// fleethost.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/onehost/onehost/internal/buildinfo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ceiling:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  ceiling sweep [-quick] [-out DIR] [-n LIST] [-repeat K] [-modes cluster,single,pm2,nginx,pm2-compress,nginx-gzip] [-workloads LIST] [-d 3s] [-warmup 1s]
                [-peer-heavy DIR] [-pm2 PATH] [-nginx PATH] [-load-hosts user@host,... -server-host ADDR] ...
  ceiling sweep -app 'node server.js' [-app-config FILE] [-m METHOD] [-path PATH] [-H 'Name: value'] [-b BODY]
                [-n 1,2,...,10 -gen-cpus 10,11] ...   (your own app, PM2 running it beside; docs/ceiling.md)
  ceiling nic   [-quick] [-out DIR] [-n N] [-rates 100mbit,1gbit,10gbit] [-workloads heavy,static] [-fifo 10] ...
  ceiling model [-results DIR|FILE,...] [-csv FILE,...] [-fit-max-n 2] [-cores 12] [-nic 10g] [-max-cores 64] [-plots DIR]
  ceiling challenge [-instances N] [-cpu 0.2] [-users N] [-time-scale 2] [-ramp 30s] [-hold 1m] [-peer-feed DIR]
                [-load-hosts user@host,... -server-host ADDR] ...
  ceiling fleet [-hosts 1,2] [-n 1] [-balancers haproxy,nftables,none] [-host-quota 0.4] [-host-cpus 0]
                [-balancer-cpus 1] [-gen-cpus 1] [-workloads hello,static,heavy,feed] [-repeat 3] ...   (root; docs/fleet.md)
  ceiling fleet -replot DIR/fleet/ceiling.json   (draw a fleet's plots again)
  ceiling fleet -log [-hosts 1,2,3] [-rate 2000] [-repeat 3] [-faults] [-sync always] [-phases ...]
                (root: one database for the fleet, the write log measured; docs/fleet.md)
  ceiling fleet-config [-balancer haproxy|nft] -host NAME=HOST:PORT -host ... [-listen :80] [-agent-port 9777] [-check] [-o FILE]
                (your hosts' haproxy.cfg or nftables ruleset, printed; docs/fleet.md)
  ceiling pin -cpus LIST [-cgroup DIR] -- COMMAND [ARGS...]   (run COMMAND on those cores, like taskset)
  ceiling version|--version
Run 'ceiling COMMAND -h' for a command's flags.`

// run is the whole program, so tests can call it in-process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	err := runCommand(ctx, args, getenv, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // `ceiling CMD -h` printed its flags: asked for, not an error
	}
	return err
}

func runCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return fmt.Errorf("no command given")
	}
	switch args[0] {
	case "sweep":
		return runSweep(ctx, args[1:], getenv, stdout, stderr)
	case "nic":
		return runNIC(ctx, args[1:], getenv, stdout, stderr)
	case "model":
		return runModel(args[1:], stdout, stderr)
	case "pin":
		return runPin(args[1:], stderr)
	case "challenge":
		return runChallenge(ctx, args[1:], getenv, stdout, stderr)
	case "fleet":
		return runFleet(ctx, args[1:], getenv, stdout, stderr)
	case "fleet-config":
		return runFleetConfig(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return nil
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, buildinfo.String("ceiling"))
		return nil
	}
	fmt.Fprintln(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}
