package shop

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/onehost/onehost/internal/sqlitec"
)

// ProductCount is the number of rows the generator writes and Open expects.
const ProductCount = 5000

// Schema is the products database's schema. It lives in its own file because the feed
// database's schema is fixed by the challenge.
const Schema = `CREATE TABLE products (
  id          INTEGER PRIMARY KEY,
  sku         TEXT    NOT NULL UNIQUE,
  name        TEXT    NOT NULL,
  category    TEXT    NOT NULL,
  description TEXT    NOT NULL,
  price_cents INTEGER NOT NULL CHECK (price_cents > 0),
  stock       INTEGER NOT NULL CHECK (stock >= 0)
) STRICT;`

// Product is one row of the products table.
type Product struct {
	ID          int64
	SKU         string
	Name        string
	Category    string
	Description string
	PriceCents  int64
	Stock       int64
}

// Word lists of the generator; changing them changes every generated database (and the
// hash the tests pin).
var (
	genAdjectives = []string{"Brushed", "Compact", "Classic", "Folding", "Heavy-duty", "Insulated",
		"Modular", "Nordic", "Portable", "Rustic", "Slimline", "Stackable", "Vintage", "Weatherproof"}
	genNouns = []string{"Kettle", "Desk Lamp", "Bookshelf", "Camping Stove", "Monitor Arm", "Storage Crate",
		"Garden Bench", "Spice Rack", "Wall Clock", "Plant Stand", "Bread Bin", "Coat Stand", "Tool Chest",
		"Bike Rack", "Laundry Basket", "Desk Organiser"}
	genCategories = []string{"kitchen", "lighting", "furniture", "outdoor", "office", "storage", "home", "workshop"}
	genMaterials  = []string{"stainless steel", "solid oak", "recycled polymer", "bamboo", "cast iron",
		"tempered glass", "enamelled steel", "birch plywood"}
	genFinishes = []string{"matte black", "natural", "satin white", "brushed copper", "graphite", "sage green"}
)

// specialNames are rows whose names need escaping in HTML or JSON, on the first page so
// that every test and benchmark of page 1 meets them.
var specialNames = map[int64]string{
	3:  "Salt & Pepper Mill Set",
	7:  `<script>alert("xss")</script> Deluxe Kettle`,
	11: `Bob's "Best" Bread Bin`,
}

// splitmix64 is the generator's PRNG: fixed, so a database is the same wherever and
// whenever it is generated.
type splitmix64 struct{ s uint64 }

func (r *splitmix64) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func (r *splitmix64) pick(list []string) string { return list[r.next()%uint64(len(list))] }

// GenerateProducts returns the ProductCount rows, the same on every call.
func GenerateProducts() []Product {
	r := splitmix64{s: 6} // the "$6 server"
	ps := make([]Product, ProductCount)
	for i := range ps {
		id := int64(i + 1)
		p := Product{ID: id, SKU: "SKU-" + pad5(id)}
		p.Name = r.pick(genAdjectives) + " " + r.pick(genNouns) + " " + string(rune('A'+r.next()%26)) + "-" + strconv.Itoa(int(100+r.next()%900))
		if s, ok := specialNames[id]; ok {
			p.Name = s
		}
		p.Category = r.pick(genCategories)
		p.Description = "Made of " + r.pick(genMaterials) + " with a " + r.pick(genFinishes) + " finish."
		p.PriceCents = int64(199 + r.next()%99800)
		p.Stock = int64(r.next() % 501)
		ps[i] = p
	}
	return ps
}

func pad5(n int64) string {
	s := strconv.FormatInt(n, 10)
	for len(s) < 5 {
		s = "0" + s
	}
	return s
}

// EnsureProducts makes sure a products database exists at path, generating it if it
// does not; it reports whether this call generated it. It is safe when several processes
// start at once: an exclusive flock on path+".lock" (left in place) serialises them, the
// database is written to a temporary file in the same directory, synced, and renamed to
// path, so that no process ever opens a partial file. The directory must exist.
func EnsureProducts(ctx context.Context, path string) (bool, error) {
	if _, err := os.Stat(path); err == nil {
		return false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("check products database: %w", err)
	}
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return false, fmt.Errorf("lock products database: %w", err)
	}
	defer lock.Close() // releases the flock
	for {
		err = unix.Flock(int(lock.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return false, fmt.Errorf("lock products database: %w", err)
	}
	if _, err := os.Stat(path); err == nil {
		return false, nil // another process wrote it while we waited
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("generate products database: %w", err)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return false, fmt.Errorf("generate products database: %w", err)
	}
	tmpName := tmp.Name()
	tmp.Close()
	defer func() {
		for _, suffix := range []string{"", "-journal"} {
			_ = os.Remove(tmpName + suffix) // gone after the rename; leftovers on failure
		}
	}()
	if err := writeProducts(tmpName); err != nil {
		return false, fmt.Errorf("generate products database: %w", err)
	}
	if err := syncPath(tmpName); err != nil {
		return false, fmt.Errorf("generate products database: %w", err)
	}
	if err := os.Rename(tmpName, path); err != nil {
		return false, fmt.Errorf("generate products database: %w", err)
	}
	if err := syncPath(dir); err != nil {
		return false, fmt.Errorf("generate products database: %w", err)
	}
	return true, nil
}

// writeProducts writes the schema and the rows into the (empty) file at path.
func writeProducts(path string) (err error) {
	c, err := sqlitec.Open(path, sqlite3.SQLITE_OPEN_READWRITE|sqlite3.SQLITE_OPEN_CREATE)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := c.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	// journal_mode=OFF: a failed build is thrown away whole, never recovered.
	if err := c.Exec(`PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; ` + Schema + ` BEGIN;`); err != nil {
		return err
	}
	st, err := c.Prepare(`INSERT INTO products(id, sku, name, category, description, price_cents, stock) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)`)
	if err != nil {
		return err
	}
	for _, p := range GenerateProducts() {
		c.BindInt64(st, 1, p.ID)
		c.BindText(st, 2, p.SKU)
		c.BindText(st, 3, p.Name)
		c.BindText(st, 4, p.Category)
		c.BindText(st, 5, p.Description)
		c.BindInt64(st, 6, p.PriceCents)
		c.BindInt64(st, 7, p.Stock)
		rc := c.Step(st)
		if rc != sqlite3.SQLITE_DONE {
			return fmt.Errorf("insert product %d: %w", p.ID, c.ErrorFor(rc))
		}
		c.Reset(st)
	}
	return c.Exec(`COMMIT; PRAGMA journal_mode=DELETE; ANALYZE;`)
}

func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// ProductsHash returns the SHA-256, in hex, of the rows of the products database at path
// in id order (every column, separated by 0x1f, rows ended by 0x1e): the same for every
// database the generator writes, whatever SQLite's file layout.
func ProductsHash(path string) (string, error) {
	c, err := sqlitec.Open(path, sqlite3.SQLITE_OPEN_READONLY)
	if err != nil {
		return "", fmt.Errorf("hash products database: %w", err)
	}
	defer c.Close()
	st, err := c.Prepare(`SELECT id, sku, name, category, description, price_cents, stock FROM products ORDER BY id`)
	if err != nil {
		return "", fmt.Errorf("hash products database: %w", err)
	}
	h := sha256.New()
	var buf []byte
	rc := c.Step(st)
	for ; rc == sqlite3.SQLITE_ROW; rc = c.Step(st) {
		buf = buf[:0]
		for i := range int32(7) {
			if i > 0 {
				buf = append(buf, 0x1f)
			}
			buf = append(buf, c.ColumnText(st, i)...)
		}
		buf = append(buf, 0x1e)
		h.Write(buf)
	}
	if rc != sqlite3.SQLITE_DONE {
		return "", fmt.Errorf("hash products database: %w", c.ErrorFor(rc))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
