// Command autocannon is a Go load generator with autocannon's command line and output,
// built on internal/loadgen: a lean HTTP/1.1 client that costs a fraction of Node
// autocannon's CPU per request, records latency in microseconds, and with -R runs an
// open-loop schedule measured from each request's due time (no coordinated omission).
//
//	go run ./bench/autocannon -c 5 -p 2 -d 20 -w 1 http://127.0.0.1:3000/
//	go run ./bench/autocannon users ...   (scripted user journeys)
//
// Differences from autocannon: only http://; latency has microsecond resolution (floats
// in ms); -w sets GOMAXPROCS (OS threads) instead of starting worker_threads; -n hides only
// the progress line; the tables go to stdout and the progress line to stderr. The JSON
// output has autocannon's fields plus "mode", "rate", "per_second" (each sample: t,
// requests, bytes, errors), "generator" (its CPU: workers, cpu_user_s, cpu_sys_s,
// max_worker_cpu, avg_worker_cpu, cpu_us_per_req, bound; and "verdict", whether it kept up
// in every second: package genhealth, docs/bench.md) and, with --server-pid,
// "server" (the server's CPU per request, peak RSS, bytes per request, host CPU split and
// per-second samples), "wire_bytes_per_req" (response bytes read, heads and bodies as
// sent, compressed or not, per response) and, with --check-decode, "bad_bodies" (bodies
// that did not decode as their Content-Encoding said).
//
// The connections are spread over source addresses (--local-addrs, or by default on a
// loopback target 127.0.0.2, .3, …: internal/srcaddr) and opened at a bounded pace
// (--connect-rate); the JSON says so in "spread" (addrs, auto, connections,
// max_per_pair), "connect_rate" (per second; 0: all at once) and "reconnects".
//
// Files of `autocannon users`: users.go runs the command (a run or a search) and gives its
// verdict; users_flags.go holds its flags (usersOptions); users_search.go the search for the
// largest passing number of users; users_split.go a run split over child processes (one
// part per child, their messages, the merged progress); users_report.go the printed and
// JSON report.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/onehost/onehost/internal/buildinfo"
	"github.com/onehost/onehost/internal/loadgen"
	"github.com/onehost/onehost/internal/procstat"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "autocannon:", err)
		os.Exit(1)
	}
}

// run parses the command line, runs the load and prints the result. Interrupting it
// ends the run early and still prints what was measured.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && buildinfo.IsVersionArg(args[0]) {
		_, err := fmt.Fprintln(stdout, buildinfo.String("autocannon"))
		return err
	}
	if len(args) > 0 && args[0] == "users" {
		return runUsers(ctx, args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "merge" {
		return runMerge(args[1:], stdout, stderr)
	}
	o, err := parseArgs(args, getenv)
	if err != nil {
		return err
	}
	if o.help {
		_, err := io.WriteString(stdout, usage)
		return err
	}

	if w := bodyWarning(o.method, o.body); w != "" {
		fmt.Fprintln(stderr, w)
	}

	// A worker is an OS thread running the load, as a worker_thread is in autocannon.
	prev := runtime.GOMAXPROCS(o.workers)
	defer runtime.GOMAXPROCS(prev)

	cfg := loadgen.Config{
		URL:            o.url,
		Method:         o.method,
		Headers:        o.headers,
		Body:           o.body,
		Connections:    o.connections,
		Pipelining:     o.pipelining,
		Duration:       o.duration,
		Amount:         o.amount,
		Rate:           o.rate(),
		LocalAddrs:     o.localAddrs,
		ConnectRate:    o.connectRate,
		Timeout:        o.timeout,
		Workers:        o.workers,
		SampleInterval: o.sampleInt,
		Saturation:     o.saturation,
	}
	if o.checkDecode {
		cfg.CheckBody = checkBody
	}
	var progress *progressPrinter
	if !o.json && !o.noProgress && (o.amount > 0 || o.duration > 2*time.Second) {
		progress = &progressPrinter{w: stderr, tty: isTerminal(stderr), interval: o.sampleInt}
		if o.amount == 0 {
			progress.total = o.duration
		}
		cfg.Progress = progress.update
	}

	var sampler *procstat.Sampler
	if o.serverPID > 0 {
		sampler, err = procstat.Start(procstat.Config{PID: o.serverPID, Interval: o.sampleInt, Conns: true})
		if err != nil {
			return fmt.Errorf("sample server: %w", err)
		}
	}
	if !o.json {
		banner(stdout, o)
	}
	res, err := loadgen.Run(ctx, cfg)
	if progress != nil {
		progress.done()
	}
	var srv *procstat.Summary
	if sampler != nil {
		s := sampler.Stop()
		srv = &s
	}
	if err != nil {
		return err
	}
	if o.histLog != "" {
		if err := writeHistLog(o.histLog, loadgenLog(res)); err != nil {
			return err
		}
	}
	r := newReport(o, res, srv)
	if o.json {
		return json.NewEncoder(stdout).Encode(r)
	}
	printText(stdout, o, r)
	return nil
}

// isTerminal reports whether w is a character device (a terminal), where the progress
// line can be rewritten in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// bodyWarning is the one-line warning for a body sent with GET, the default method: the
// seed's PATCH command without -m PATCH gets a 405 for every request, and nothing else
// would say why.
func bodyWarning(method string, body []byte) string {
	if len(body) == 0 || (method != "" && method != "GET") {
		return ""
	}
	return "warning: -b/--body is sent with GET (the default method); did you mean -m POST, PUT or PATCH?"
}
