package shop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/onehost/onehost/internal/jsonstr"
	"github.com/onehost/onehost/internal/sqlitec"
)

// PageSize is the number of products on a page; Pages is the number of pages.
const (
	PageSize = 20
	Pages    = ProductCount / PageSize
)

// errClosed reports a call on a closed Store.
var errClosed = errors.New("products store is closed")

// StoreOptions configures OpenStore. The zero value works.
type StoreOptions struct {
	// Conns is the number of read-only connections, so of queries that run at once.
	// Default runtime.GOMAXPROCS(0): one in a prefork worker.
	Conns int
}

// Store reads the products database. Every call runs its query: nothing is cached.
// Connections are internal/sqlitec's, below database/sql, so that a page costs no Go
// allocation and text is escaped straight from SQLite's memory.
//
// The connections are read-only and use locking_mode=EXCLUSIVE, which for a read-only
// connection means: take the shared lock at the first read and keep it. The file is
// never written in place (EnsureProducts replaces it whole by a rename, which open
// connections do not see), so readers in every worker share it without the lock and
// unlock system calls SQLite would otherwise make around each query.
type Store struct {
	conns     chan *reader // the idle connections; closed by Close
	n         int          // how many OpenStore opened
	closeOnce sync.Once
	closeErr  error
}

type reader struct {
	*sqlitec.Conn
	page sqlitec.Stmt // the page query
}

const sqlPage = `SELECT id, sku, name, category, description, price_cents, stock
FROM products ORDER BY id LIMIT 20 OFFSET ?1`

// OpenStore opens the products database at path, which must exist and hold
// ProductCount products (EnsureProducts writes one).
func OpenStore(ctx context.Context, path string, opts StoreOptions) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open products database: %w", err)
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open products database: %w", err)
	}
	n := opts.Conns
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	s := &Store{conns: make(chan *reader, n)}
	for range n {
		r, err := openReader(path)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("open products database %s: %w", path, err)
		}
		s.conns <- r
		s.n++
	}
	return s, nil
}

func openReader(path string) (*reader, error) {
	c, err := sqlitec.Open(path, sqlite3.SQLITE_OPEN_READONLY)
	if err != nil {
		return nil, err
	}
	r := &reader{Conn: c}
	err = func() error {
		if err := c.Exec(`PRAGMA locking_mode=EXCLUSIVE; PRAGMA query_only=ON;`); err != nil {
			return err
		}
		count, err := c.Prepare(`SELECT count(*) FROM products`)
		if err != nil {
			return err
		}
		defer c.Finalize(count)
		if rc := c.Step(count); rc != sqlite3.SQLITE_ROW {
			return c.ErrorFor(rc)
		}
		if n := c.ColumnInt64(count, 0); n != ProductCount {
			return fmt.Errorf("%d products, want %d: delete the file to have it generated again", n, ProductCount)
		}
		r.page, err = c.Prepare(sqlPage)
		return err
	}()
	if err != nil {
		c.Close()
		return nil, err
	}
	return r, nil
}

// Close closes the connections, waiting for the queries in progress. Calls after Close
// fail.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		for range s.n {
			r := <-s.conns
			errs = append(errs, r.Close())
		}
		close(s.conns)
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("close products database: %w", err)
		}
	})
	return s.closeErr
}

func (s *Store) get() (*reader, error) {
	r, ok := <-s.conns
	if !ok {
		return nil, errClosed
	}
	return r, nil
}

// queryPage runs the page query for page (1..Pages) and calls row for each product; the
// byte slices are SQLite's memory, valid only during the call.
func (s *Store) queryPage(page int, row func(id int64, sku, name, category, desc []byte, cents, stock int64)) error {
	r, err := s.get()
	if err != nil {
		return err
	}
	defer func() { s.conns <- r }()
	c, st := r.Conn, r.page
	c.BindInt64(st, 1, int64(page-1)*PageSize)
	defer c.Reset(st)
	rc := c.Step(st)
	for ; rc == sqlite3.SQLITE_ROW; rc = c.Step(st) {
		row(c.ColumnInt64(st, 0), c.ColumnText(st, 1), c.ColumnText(st, 2), c.ColumnText(st, 3),
			c.ColumnText(st, 4), c.ColumnInt64(st, 5), c.ColumnInt64(st, 6))
	}
	if rc != sqlite3.SQLITE_DONE {
		return fmt.Errorf("read products page %d: %w", page, c.ErrorFor(rc))
	}
	return nil
}

// AppendPageJSON appends page (1..Pages) as a JSON object to dst:
// {"page":1,"per_page":20,"total":5000,"pages":250,"products":[{"id":1,"sku":...,"name":...,
// "category":...,"description":...,"price":"12.34","price_cents":1234,"stock":7},...]}.
// Text is escaped for HTML safety too (<, >, & as \u003c, \u003e, \u0026), as
// encoding/json does.
func (s *Store) AppendPageJSON(dst []byte, page int) ([]byte, error) {
	dst = append(dst, `{"page":`...)
	dst = strconv.AppendInt(dst, int64(page), 10)
	dst = append(dst, `,"per_page":20,"total":5000,"pages":250,"products":[`...)
	first := true
	err := s.queryPage(page, func(id int64, sku, name, category, desc []byte, cents, stock int64) {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, `{"id":`...)
		dst = strconv.AppendInt(dst, id, 10)
		dst = append(dst, `,"sku":`...)
		dst = jsonstr.AppendHTMLSafe(dst, sku)
		dst = append(dst, `,"name":`...)
		dst = jsonstr.AppendHTMLSafe(dst, name)
		dst = append(dst, `,"category":`...)
		dst = jsonstr.AppendHTMLSafe(dst, category)
		dst = append(dst, `,"description":`...)
		dst = jsonstr.AppendHTMLSafe(dst, desc)
		dst = append(dst, `,"price":"`...)
		dst = appendPrice(dst, cents)
		dst = append(dst, `","price_cents":`...)
		dst = strconv.AppendInt(dst, cents, 10)
		dst = append(dst, `,"stock":`...)
		dst = strconv.AppendInt(dst, stock, 10)
		dst = append(dst, '}')
	})
	if err != nil {
		return dst, err
	}
	return append(dst, ']', '}'), nil
}

// Page returns page (1..Pages) as Products, appended to dst[:0].
func (s *Store) Page(dst []Product, page int) ([]Product, error) {
	dst = dst[:0]
	err := s.queryPage(page, func(id int64, sku, name, category, desc []byte, cents, stock int64) {
		dst = append(dst, Product{ID: id, SKU: string(sku), Name: string(name), Category: string(category),
			Description: string(desc), PriceCents: cents, Stock: stock})
	})
	return dst, err
}

// appendPrice appends cents as a decimal amount with two places: 1234 -> 12.34.
func appendPrice(dst []byte, cents int64) []byte {
	dst = strconv.AppendInt(dst, cents/100, 10)
	return append(dst, '.', byte('0'+cents/10%10), byte('0'+cents%10))
}
