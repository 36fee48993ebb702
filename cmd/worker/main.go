// Command worker is the reference HTTP worker: the "$12 Server Challenge" feed API on a
// shared WAL SQLite file, served alone on a SO_REUSEPORT socket or under the supervisor on
// an inherited one.
//
// Usage:
//
//	worker [-db PATH] [-host HOST] [-port PORT]      serve (env SQLITE_PATH, JWT_SECRET, HOST, PORT)
//	worker -check [FLAGS]                            judge serve's flags and environment, print ok
//	worker seed -db PATH [-tokens PATH] [-n 20000]   write the challenge's seed database
//	worker seed-products -db PATH                    write the products database (docs/workloads.md)
//
// Signals: TERM or INT drains (stop accepting, finish in-flight requests, close idle
// keep-alives) within -drain-timeout; a second one closes everything at once.
//
// Files: config.go holds the serve flags and environment, parsed and checked into a
// serveConfig; serve.go runs a worker as named steps (open the store, listen, join the
// supervisor, serve, drain) and checks the JWT secret; check.go is -check, the same
// judgement without serving (what `supervisor run -check` asks of the worker).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/onehost/onehost/internal/buildinfo"
	"github.com/onehost/onehost/internal/ipc"
)

// init clears the parent-death signal the supervisor gives every worker when it is told
// where to rejoin (ipc.EnvAdopt): this worker outlives a kill -9 or an upgrade of its
// supervisor, serves on and rejoins the next one, whatever path it was started by. Here
// and not in run: the kernel keeps the signal on the thread that exec'd, the main thread,
// and Go runs init functions there (main may have moved to another thread by then).
func init() {
	if os.Getenv(ipc.EnvAdopt) != "" {
		if err := ipc.OutliveParent(); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err, "(it dies with its supervisor)")
		}
	}
}

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// run is the whole program, so tests can call it in-process or re-execute the test binary
// as a worker.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	err := runCommand(ctx, args, getenv, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // -h printed the flags: asked for, not an error
	}
	return err
}

const usage = `usage:
  worker [serve] [-db PATH] [-host HOST] [-port PORT] ...   serve (env SQLITE_PATH, JWT_SECRET, HOST, PORT)
  worker [serve] -check [FLAGS]                            judge serve's flags and environment as a start would, print ok
  worker seed -db PATH [-tokens PATH] [-n 20000]           write the challenge's seed database
  worker seed-products -db PATH                            write the products database (docs/workloads.md)
  worker version|--version
Run 'worker COMMAND -h' for a command's flags; serve's follow.`

func runCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "-h", "-help", "--help", "help":
			fmt.Fprintln(stdout, usage)
			return runServe(ctx, []string{"-h"}, getenv, stdout, stdout) // serve's flags, on stdout too
		case "version", "--version", "-version":
			_, err := fmt.Fprintln(stdout, buildinfo.String("worker"))
			return err
		}
	}
	if len(args) > 0 && args[0] == "seed" {
		return runSeed(ctx, args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "seed-products" {
		return runSeedProducts(ctx, args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:]
	}
	return runServe(ctx, args, getenv, stdout, stderr)
}
