// Package seed builds the "$12 Server Challenge" seed database bit for bit: 50,000 users,
// 500,000 posts and 2,016,005 likes drawn from the reference's mulberry32 stream (seed 42),
// loaded into the fixed schema, analyzed, vacuumed and left in WAL mode. It also hashes a
// database's rows the way the challenge checks them and writes the load test's token file.
package seed

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/onehost/onehost/internal/schema"
)

// Version identifies the generator's output. Bump it whenever the file Generate writes
// changes in any way (rows, schema, pragmas, layout): caches of built seeds are keyed by it.
const Version = 1

// ExpectedHash is the challenge's SHA-256 of the seed's rows (see ContentHash).
const ExpectedHash = "738d11ab3164c13177e347f75038d1e80b43c64e754544a42d1c32bd8d7bcf1d"

// Options tunes Generate. The zero value works.
type Options struct {
	// Logger receives progress lines (one per phase, at Info). Default: nil, no logs.
	Logger *zap.Logger
	// RowsPerInsert is how many rows one INSERT statement carries (at most 8191, SQLite's
	// limit of 32766 bound values over four columns). Default: 128.
	RowsPerInsert int
}

// Stats describes a finished Generate.
type Stats struct {
	Users, Posts, Likes int
	// Bytes is the size of the finished database file.
	Bytes int64
	// Load is the time spent inserting rows and building the secondary indexes; Total also
	// counts ANALYZE, VACUUM and the switch to WAL.
	Load, Total time.Duration
}

// Generate writes the seed database to path, which must not exist yet. It loads the rows
// into a scratch file beside path, vacuums that into a second temporary file, switches
// the result to WAL and only then links it to path, so a crash or a cancelled ctx never
// leaves a partial seed at path (at worst, hidden temporary files beside it).
func Generate(ctx context.Context, path string, opts Options) (Stats, error) {
	start := time.Now()
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	if opts.RowsPerInsert <= 0 {
		opts.RowsPerInsert = 128
	}
	if _, err := os.Lstat(path); err == nil {
		return Stats{}, fmt.Errorf("generate seed: %s already exists", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Stats{}, fmt.Errorf("generate seed: %w", err)
	}

	// Both files are created empty, which claims unique names: SQLite treats an empty
	// file as a new database, and VACUUM INTO accepts an empty target.
	loadPath, err := createEmpty(path, "load")
	if err != nil {
		return Stats{}, err
	}
	defer removeDB(loadPath)
	outPath, err := createEmpty(path, "tmp")
	if err != nil {
		return Stats{}, err
	}
	defer removeDB(outPath) // after the link below, this only drops the temporary name

	st, err := fill(ctx, loadPath, outPath, opts, log)
	if err != nil {
		return Stats{}, err
	}
	removeDB(loadPath) // free the disk space before the last step
	if err := finish(ctx, outPath); err != nil {
		return Stats{}, err
	}
	if fi, err := os.Stat(outPath + "-wal"); err == nil && fi.Size() > 0 {
		return Stats{}, fmt.Errorf("finish seed: %s-wal still holds %d bytes", outPath, fi.Size())
	}
	// CreateTemp made the file private; the seed is meant to be read by other users too.
	if err := os.Chmod(outPath, 0o644); err != nil {
		return Stats{}, fmt.Errorf("finish seed: %w", err)
	}
	// Link, unlike rename, refuses to replace a path that appeared while we worked.
	if err := os.Link(outPath, path); err != nil {
		return Stats{}, fmt.Errorf("publish seed: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return Stats{}, fmt.Errorf("stat seed: %w", err)
	}
	st.Bytes = fi.Size()
	st.Total = time.Since(start)
	log.Info("seed generated", zap.String("path", path), zap.Int64("bytes", st.Bytes),
		zap.Duration("load", st.Load), zap.Duration("total", st.Total))
	return st, nil
}

// createEmpty creates a new empty hidden file beside path and returns its name.
func createEmpty(path, kind string) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*."+kind)
	if err != nil {
		return "", fmt.Errorf("create %s file: %w", kind, err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("close %s file: %w", kind, err)
	}
	return f.Name(), nil
}

// removeDB removes a database file and the side files SQLite may have left beside it.
func removeDB(path string) {
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		_ = os.Remove(path + suffix)
	}
}

// openOne opens the database at path with a single connection, since the pragmas set on
// it are per connection.
func openOne(ctx context.Context, path string) (*sql.DB, *sql.Conn, error) {
	dsn, err := fileURI(path, "")
	if err != nil {
		return nil, nil, err
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("connect %s: %w", path, err)
	}
	return db, conn, nil
}

// fileURI turns a file path into an SQLite URI filename with the given query. The driver
// takes everything after a "?" in a plain path as its own parameters, so a URI, with the
// path escaped, is the only form that opens any path.
func fileURI(path, query string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", path, err)
	}
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: query}
	return u.String(), nil
}

// closeOne closes what openOne opened, keeping the first error.
func closeOne(db *sql.DB, conn *sql.Conn, err *error) {
	cerr := conn.Close()
	if dberr := db.Close(); cerr == nil {
		cerr = dberr
	}
	if cerr != nil && *err == nil {
		*err = fmt.Errorf("close database: %w", cerr)
	}
}

// fill loads the rows into the empty database at loadPath, analyzes it and vacuums it into
// the empty file at outPath.
func fill(ctx context.Context, loadPath, outPath string, opts Options, log *zap.Logger) (st Stats, err error) {
	db, conn, err := openOne(ctx, loadPath)
	if err != nil {
		return st, err
	}
	defer closeOne(db, conn, &err)

	// No journal and no syncs: the file is scratch until it is complete. A 64 MiB cache
	// keeps most of the indexes that take random inserts (usernames, the likes primary
	// key) in memory. Bigger is slower: every cached page is a separate allocation that
	// the driver's allocator hands back with one madvise call each when the connection
	// closes (measured: 256 MiB cost about 8 s more than 64 MiB; 32 MiB is on par).
	if err := execAll(ctx, conn,
		"PRAGMA journal_mode=OFF",
		"PRAGMA synchronous=OFF",
		"PRAGMA cache_size=-65536",
		"PRAGMA temp_store=MEMORY",
	); err != nil {
		return st, fmt.Errorf("prepare seed load: %w", err)
	}

	loadStart := time.Now()
	if st, err = load(ctx, conn, opts, log); err != nil {
		return st, err
	}
	st.Load = time.Since(loadStart)
	log.Info("seed loaded", zap.Duration("elapsed", st.Load))

	t := time.Now()
	if err := execAll(ctx, conn, "ANALYZE"); err != nil {
		return st, fmt.Errorf("analyze seed: %w", err)
	}
	log.Info("seed analyzed", zap.Duration("elapsed", time.Since(t)))
	// VACUUM INTO is VACUUM without copying the result back over the original: the
	// rebuilt file is the one we keep.
	t = time.Now()
	if _, err := conn.ExecContext(ctx, "VACUUM INTO ?", outPath); err != nil {
		return st, fmt.Errorf("vacuum seed: %w", err)
	}
	log.Info("seed vacuumed", zap.Duration("elapsed", time.Since(t)))
	return st, nil
}

// finish switches the vacuumed seed at path to WAL and checkpoints it so that the main
// file alone holds the whole database.
func finish(ctx context.Context, path string) (err error) {
	db, conn, err := openOne(ctx, path)
	if err != nil {
		return err
	}
	defer closeOne(db, conn, &err)
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode); err != nil {
		return fmt.Errorf("switch seed to wal: %w", err)
	}
	if mode != "wal" {
		return fmt.Errorf("switch seed to wal: journal_mode is %q", mode)
	}
	if err := execAll(ctx, conn, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return fmt.Errorf("checkpoint seed: %w", err)
	}
	return nil
}

func execAll(ctx context.Context, conn *sql.Conn, stmts ...string) error {
	for _, s := range stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("exec %q: %w", s, err)
		}
	}
	return nil
}

// load creates the schema and inserts every row in one transaction. The schema's
// secondary indexes are dropped first and created again after the rows are in: building
// an index from sorted data is much faster than growing it row by row, and the hashed
// content does not depend on it.
func load(ctx context.Context, conn *sql.Conn, opts Options, log *zap.Logger) (st Stats, err error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return st, fmt.Errorf("begin seed load: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, schema.SQL); err != nil {
		return st, fmt.Errorf("create schema: %w", err)
	}
	indexes, err := secondaryIndexes(ctx, tx)
	if err != nil {
		return st, err
	}
	for _, ix := range indexes {
		if _, err := tx.ExecContext(ctx, "DROP INDEX "+quoteIdent(ix.name)); err != nil {
			return st, fmt.Errorf("drop index %s: %w", ix.name, err)
		}
	}

	if st, err = insertRows(ctx, tx, opts.RowsPerInsert, log); err != nil {
		return st, err
	}

	t := time.Now()
	for _, ix := range indexes {
		if _, err := tx.ExecContext(ctx, ix.sql); err != nil {
			return st, fmt.Errorf("create index %s: %w", ix.name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return st, fmt.Errorf("commit seed load: %w", err)
	}
	log.Info("seed indexes built", zap.Duration("elapsed", time.Since(t)))
	return st, nil
}

type index struct{ name, sql string }

// secondaryIndexes lists the schema's explicit indexes in creation order (the automatic
// ones behind PRIMARY KEY and UNIQUE have no SQL and stay).
func secondaryIndexes(ctx context.Context, tx *sql.Tx) ([]index, error) {
	rows, err := tx.QueryContext(ctx,
		"SELECT name, sql FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL ORDER BY rowid")
	if err != nil {
		return nil, fmt.Errorf("list indexes: %w", err)
	}
	defer rows.Close()
	var out []index
	for rows.Next() {
		var ix index
		if err := rows.Scan(&ix.name, &ix.sql); err != nil {
			return nil, fmt.Errorf("list indexes: %w", err)
		}
		out = append(out, ix)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list indexes: %w", err)
	}
	return out, nil
}

func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
