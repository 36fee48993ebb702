// Command seedgen builds the seed database at the path given as its only argument and
// checks its content hash. seedtest runs it (through go run) when the tests are built with
// the race detector, which slows the SQLite engine about twentyfold: a build that takes
// seconds natively takes many minutes instrumented.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/onehost/onehost/internal/seed"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: seedgen PATH")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "seedgen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, path string) error {
	st, err := seed.Generate(ctx, path, seed.Options{})
	if err != nil {
		return err
	}
	if err := seed.Check(ctx, path); err != nil {
		_ = os.Remove(path)
		return err
	}
	fmt.Printf("built %s in %v (load %v), %d bytes, hash ok\n", path, st.Total, st.Load, st.Bytes)
	return nil
}
