package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/contentcoding"
	"github.com/onehost/onehost/internal/heavy"
	"github.com/onehost/onehost/internal/http1"
	"github.com/onehost/onehost/internal/shop"
)

// router sends the workload routes (docs/workloads.md) to their handlers and every other
// request to the feed API, whose 404 and 405 answers are unchanged. It compresses the
// answers of the routes -compress names.
type router struct {
	feed, heavy, shop http1.Handler
	comp              *contentcoding.Compressor // nil: compression off
	routes            compressRoutes
	scratch           sync.Pool // *[]byte: a compressed body before it is copied back
}

func (rt *router) ServeHTTP1(w *http1.Response, r *http1.Request) {
	var route compressRoutes
	switch {
	case heavy.Serves(r.Path):
		route = routeHeavy
		rt.heavy.ServeHTTP1(w, r)
	case shop.Serves(r.Path):
		if string(r.Path) == shop.HelloPath {
			route = routeHello
		} else if string(r.Path) != shop.CatalogPath { // precompressed: shop negotiates it
			route = routeProducts
		}
		rt.shop.ServeHTTP1(w, r)
	default:
		route = routeFeed
		rt.feed.ServeHTTP1(w, r)
	}
	if rt.comp != nil && rt.routes&route != 0 {
		rt.compress(w, r)
	}
}

// compress encodes a 200's body in the coding the request prefers among -compress's.
// HEAD is encoded too: its Content-Length is then the one GET would send.
func (rt *router) compress(w *http1.Response, r *http1.Request) {
	// Every answer of a compressed route depends on Accept-Encoding, errors included.
	w.AddHeader("Vary", "Accept-Encoding")
	if w.Status != 0 && w.Status != 200 {
		return // errors are small; a 304 has no body
	}
	var ae [256]byte // the join of an Accept-Encoding sent on several lines; on the stack
	k, ok := rt.comp.Choose(r.HeaderList(ae[:0], "Accept-Encoding"), len(w.Body))
	if !ok {
		w.Error(406, "not acceptable: Accept-Encoding refuses identity and every coding offered")
		return
	}
	if k == contentcoding.Identity {
		return
	}
	buf, _ := rt.scratch.Get().(*[]byte)
	if buf == nil {
		buf = new([]byte)
	}
	out, err := rt.comp.Append((*buf)[:0], k, w.Body)
	if err == nil {
		w.Body = append(w.Body[:0], out...)
		w.AddHeader("Content-Encoding", k.String())
	}
	// On an error (none is expected: the encoders write to memory) the body goes plain.
	*buf = out[:0]
	rt.scratch.Put(buf)
}

// compressRoutes is a set of routes that -compress-routes names.
type compressRoutes uint8

const (
	routeHeavy compressRoutes = 1 << iota
	routeProducts
	routeFeed
	routeHello
)

type namedRoute struct {
	name  string
	route compressRoutes
}

var routeNames = []namedRoute{{"heavy", routeHeavy}, {"products", routeProducts}, {"feed", routeFeed}, {"hello", routeHello}}

// compressConfig is -compress, -compress-routes and -compress-min.
type compressConfig struct {
	codings contentcoding.Config
	routes  compressRoutes
}

func parseCompress(codings, routes, minSize string) (compressConfig, error) {
	var c compressConfig
	var err error
	if c.codings, err = contentcoding.ParseCodings(codings); err != nil {
		return c, fmt.Errorf("COMPRESS (-compress): %w", err)
	}
	for _, name := range strings.Split(routes, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(routeNames, func(r namedRoute) bool { return r.name == name })
		if i < 0 {
			if name == "static" {
				return c, errors.New("COMPRESS_ROUTES (-compress-routes): static is always served precompressed (gzip, zstd, br at their best levels); name only heavy, products, feed or hello")
			}
			return c, fmt.Errorf("COMPRESS_ROUTES (-compress-routes) %q: unknown route %q, want heavy, products, feed or hello", routes, name)
		}
		c.routes |= routeNames[i].route
	}
	n, err := strconv.Atoi(minSize)
	if err != nil || n < 0 {
		return c, fmt.Errorf("COMPRESS_MIN (-compress-min) %q: want a number of bytes >= 0", minSize)
	}
	c.codings.MinSize = max(n, 1) // 0 in Config means the default; 0 here means every body
	return c, nil
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
func openWorkloads(ctx context.Context, productsPath string, feed http1.Handler, cc compressConfig, log *zap.Logger) (http1.Handler, func() error, error) {
	comp, err := contentcoding.NewCompressor(cc.codings)
	if err != nil {
		return nil, nil, err
	}
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
		feed:   feed,
		heavy:  heavy.NewHandler(heavy.Config{}),
		shop:   shop.NewHandler(shop.Config{Store: store, Logger: log}),
		comp:   comp,
		routes: cc.routes,
	}
	if comp != nil {
		log.Info("compression on", zap.Stringer("codings", cc.codings), zap.Int("min_bytes", cc.codings.MinSize))
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
