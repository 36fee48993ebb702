// Command clientloops measures three ways for one load-generator process to hold many
// keep-alive HTTP/1.1 connections on one event loop, side by side on one identical
// workload, before the journey generator (internal/journey's loop engine) commits to one:
//
//   - epoll: our own approach, as internal/journey/loop.go: one goroutine owns an epoll
//     set (level-triggered) and a min-heap of the users' next send times, sleeping in
//     epoll_wait with the heap head as its timeout (milliseconds, rounded up);
//   - gnet: github.com/panjf2000/gnet/v2's client (one event loop, no multicore); the
//     users' timers are a min-heap owned by the loop, driven by gnet's ticker (OnTick,
//     its own goroutine) which hands due work to the loop with EventLoop.Execute;
//   - nbio: github.com/lesismal/nbio's engine (NPoller 1, level-triggered, reads in the
//     poller); each user's timer is the engine's AfterFunc (a runtime timer whose
//     callback runs on its own goroutine and writes with Conn.Write, which nbio allows
//     from any goroutine).
//
// The workload: -n users, each on its own connection, each sending GET -path every
// -interval after its previous response arrived (a user's think time), its first request
// at a random offset in [0, interval) after its connection joined the loop. Connections
// are dialled the same way for every engine, by net.Dialer in a small pool of goroutines
// at a bounded rate over -ramp (spread over -local-addrs source addresses, or on loopback
// over as many 127.0.0.x as keep each (source, destination) pair under Linux's connect()
// cliff, as bench/autocannon does), and only then handed to the engine: dialling costs the
// same and is not what is compared. Responses are framed by internal/httpframe.Parser in
// every engine, so parsing costs the same too.
//
// Measured in the hold only (the -hold after every connection was dialled and -ramp has
// passed): requests completed, the send lag (when a request went out minus when it was
// due) and the round trip, both as HdrHistograms; a 1 ms hiccup probe (how late a
// goroutine asking to wake every millisecond wakes); the process's CPU (user + system,
// getrusage) per request completed; RSS at the end of the hold; errors and reconnects.
// One JSON line goes to stdout; the exit status is non-zero when anything failed.
//
// Usage:
//
//	clientloops -engine epoll|gnet|nbio [-n 5000] [-interval 5s] [-ramp 10s] [-hold 30s]
//	            [-path /health] [-local-addrs 127.0.0.2-127.0.0.9] http://HOST:PORT
//
// bench/clientloops.sh runs the three against the project's cluster, interleaved.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/onehost/onehost/internal/srcaddr"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "clientloops:", err)
		}
		os.Exit(1)
	}
}

// The engines (-engine).
const (
	engineEpoll = "epoll"
	engineGnet  = "gnet"
	engineNbio  = "nbio"
)

// options are the command line's settings.
type options struct {
	engine   string
	users    int
	interval time.Duration
	ramp     time.Duration
	hold     time.Duration
	path     string
	addrs    []netip.Addr // -local-addrs as given
	target   *url.URL
	seed     uint64
	dialers  int
}

const usage = `usage: clientloops -engine epoll|gnet|nbio [flags] http://HOST:PORT

Holds -n keep-alive connections on one event loop of the chosen engine, each sending
GET -path every -interval after its previous response, and prints one JSON line of what
the hold measured (requests, send lag, round trip, hiccups, CPU per request, RSS, errors).

flags:
`

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("clientloops", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.engine, "engine", engineEpoll, "the event loop: epoll (our own), gnet or nbio")
	fs.IntVar(&o.users, "n", 1000, "connections (users), each with one request at a time")
	fs.DurationVar(&o.interval, "interval", 5*time.Second, "each user's think time: from a response to its next request")
	fs.DurationVar(&o.ramp, "ramp", 5*time.Second, "open the connections at an even rate over this time")
	fs.DurationVar(&o.hold, "hold", 10*time.Second, "the measured window, after the ramp")
	fs.StringVar(&o.path, "path", "/health", "the request's path")
	addrs := fs.String("local-addrs", "", "spread connections round robin over these source addresses: A-B (a range) or A,B,… "+
		"(default on loopback: as many 127.0.0.x as keep each pair under the connect() cliff)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the users' first-request offsets (the same seed gives every engine the same schedule)")
	fs.IntVar(&o.dialers, "dialers", 16, "goroutines dialling (blocking net.Dialer) and handing connections to the engine")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return o, errors.New("want one target URL, http://HOST:PORT")
	}
	switch o.engine {
	case engineEpoll, engineGnet, engineNbio:
	default:
		return o, fmt.Errorf("-engine %q: want epoll, gnet or nbio", o.engine)
	}
	switch {
	case o.users <= 0:
		return o, errors.New("-n: want at least 1 connection")
	case o.interval <= 0:
		return o, errors.New("-interval: want a positive duration")
	case o.ramp < 0:
		return o, errors.New("-ramp: want zero or a positive duration")
	case o.hold <= 0:
		return o, errors.New("-hold: want a positive duration")
	case o.dialers <= 0:
		return o, errors.New("-dialers: want at least 1")
	case !strings.HasPrefix(o.path, "/") || strings.ContainsAny(o.path, " \r\n"):
		return o, fmt.Errorf("-path %q: want an absolute path without spaces", o.path)
	}
	u, err := url.Parse(fs.Arg(0))
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return o, fmt.Errorf("target %q: want http://HOST:PORT", fs.Arg(0))
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "80")
	}
	o.target = u
	if o.addrs, err = srcaddr.ParseList(*addrs); err != nil {
		return o, fmt.Errorf("-local-addrs: %w", err)
	}
	return o, nil
}

// result is the JSON line a run prints.
type result struct {
	Engine     string         `json:"engine"`
	Users      int            `json:"users"`
	Connected  int64          `json:"connected"` // connections on the engine at the end of the hold
	IntervalMS float64        `json:"interval_ms"`
	RampS      float64        `json:"ramp_s"`
	HoldS      float64        `json:"hold_s"` // as measured
	Requests   int64          `json:"requests"`
	RPS        float64        `json:"rps"`
	SendLag    summary        `json:"send_lag"`
	RoundTrip  summary        `json:"round_trip"`
	Hiccup     summary        `json:"hiccup"`
	CPUS       float64        `json:"cpu_s"`
	USPerReq   float64        `json:"us_per_req"`
	RSSMB      float64        `json:"rss_mb"`
	GCCycles   uint32         `json:"gc_cycles"` // in the hold
	Errors     int64          `json:"errors"`
	ErrorKinds map[string]int `json:"error_kinds"`
	Reconnects int64          `json:"reconnects"`
	GOMAXPROCS int            `json:"gomaxprocs"`
	Timers     string         `json:"timers"`
	Spread     srcaddr.Report `json:"spread"`
}

// summary is one histogram's p50, p99 and max in milliseconds.
type summary struct {
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	_ = getenv // no environment settings; the house signature
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	if err := checkFDLimit(o.users); err != nil {
		return err
	}
	res, err := measure(ctx, o, stderr)
	if err != nil {
		return err
	}
	line, _ := json.Marshal(res)
	fmt.Fprintf(stdout, "%s\n", line)
	switch {
	case res.Errors > 0:
		return fmt.Errorf("%d errors: %v", res.Errors, res.ErrorKinds)
	case res.Requests == 0:
		return errors.New("no request completed in the hold")
	}
	return nil
}

// checkFDLimit fails early when the descriptor limit cannot hold the connections (Go
// raises the soft limit to the hard one at start).
func checkFDLimit(users int) error {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return nil
	}
	if need := uint64(users) + 64; rl.Cur != math.MaxUint64 && rl.Cur < need {
		return fmt.Errorf("descriptor limit %d is under the %d that -n %d needs (ulimit -n)", rl.Cur, need, users)
	}
	return nil
}

func msOf(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

func gomaxprocs() int { return runtime.GOMAXPROCS(0) }
