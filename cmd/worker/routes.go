package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/heavy"
	"github.com/onehost/onehost/internal/http1"
	"github.com/onehost/onehost/internal/shop"
)

// router sends the workload routes (docs/workloads.md) to their handlers and every other
// request to the feed API, whose 404 and 405 answers are unchanged.
type router struct {
	feed, heavy, shop http1.Handler
}

func (rt *router) ServeHTTP1(w *http1.Response, r *http1.Request) {
	switch {
	case heavy.Serves(r.Path):
		rt.heavy.ServeHTTP1(w, r)
	case shop.Serves(r.Path):
		rt.shop.ServeHTTP1(w, r)
	default:
		rt.feed.ServeHTTP1(w, r)
	}
}

// MayBlock is http1.Blocker for the loop transport: the workload routes only read (and
// compute); the feed says which of its requests wait.
func (rt *router) MayBlock(r *http1.Request) bool {
	if heavy.Serves(r.Path) || shop.Serves(r.Path) {
		return false
	}
	if b, ok := rt.feed.(http1.Blocker); ok {
		return b.MayBlock(r)
	}
	return true
}

// defaultProductsPath is where the products database lives unless PRODUCTS_PATH or
// -products says otherwise: beside the feed database.
func defaultProductsPath(feedDB string) string {
	return filepath.Join(filepath.Dir(feedDB), "products.db")
}

// openWorkloads generates the products database if it is missing, opens it, and returns
// the router in front of feed, with the function that closes what it opened.
func openWorkloads(ctx context.Context, productsPath string, feed http1.Handler, log *zap.Logger) (http1.Handler, func() error, error) {
	created, err := shop.EnsureProducts(ctx, productsPath)
	if err != nil {
		return nil, nil, err
	}
	if created {
		log.Info("products database generated", zap.String("products", productsPath))
	}
	store, err := shop.OpenStore(ctx, productsPath, shop.StoreOptions{})
	if err != nil {
		return nil, nil, err
	}
	rt := &router{
		feed:  feed,
		heavy: heavy.NewHandler(heavy.Config{}),
		shop:  shop.NewHandler(shop.Config{Store: store, Logger: log}),
	}
	return rt, store.Close, nil
}

// runSeedProducts is `worker seed-products -db PATH`: write the products database if it
// is missing (the worker does the same at start) and print its content hash.
func runSeedProducts(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker seed-products", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", getenv("PRODUCTS_PATH"), "products database to create if missing (env PRODUCTS_PATH)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *db == "" {
		return errors.New("seed-products: -db is required (the products database to create)")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("seed-products: unexpected argument %q", fs.Arg(0))
	}
	created, err := shop.EnsureProducts(ctx, *db)
	if err != nil {
		return err
	}
	sum, err := shop.ProductsHash(*db)
	if err != nil {
		return err
	}
	state := "exists, left as it is"
	if created {
		state = "written"
	}
	fmt.Fprintf(stdout, "products database %s %s: %d products, content hash %s\n", *db, state, shop.ProductCount, sum)
	return nil
}
