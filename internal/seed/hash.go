package seed

import (
	"bufio"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strconv"
)

// hashQueries are the challenge's check, in its order.
var hashQueries = []string{
	"SELECT * FROM users ORDER BY id",
	"SELECT * FROM posts ORDER BY id",
	"SELECT * FROM likes ORDER BY post_id, user_id",
}

// ContentHash returns the hex SHA-256 of exactly what
//
//	sqlite3 feed.db "SELECT * FROM users ORDER BY id; SELECT * FROM posts ORDER BY id; SELECT * FROM likes ORDER BY post_id, user_id;"
//
// prints in the CLI's default list mode (fields joined by "|", NULL as an empty field, one
// row per line ending in "\n"). It streams the rows, opens the database read-only and
// handles INTEGER, TEXT, BLOB and NULL values; a REAL value is an error, since the CLI's
// float formatting is not reproduced and the challenge tables hold none. Like any reader
// of a WAL database, it may leave an empty -wal and a -shm file beside path.
func ContentHash(ctx context.Context, path string) (sum string, err error) {
	dsn, err := fileURI(path, "mode=ro")
	if err != nil {
		return "", err
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", path, err)
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close %s: %w", path, cerr)
		}
	}()
	h := sha256.New()
	w := bufio.NewWriterSize(h, 1<<16)
	for _, q := range hashQueries {
		if err := hashQuery(ctx, db, q, w); err != nil {
			return "", err
		}
	}
	if err := w.Flush(); err != nil {
		return "", fmt.Errorf("hash rows: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashQuery(ctx context.Context, db *sql.DB, q string, w *bufio.Writer) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return fmt.Errorf("query %q: %w", q, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return fmt.Errorf("query %q: %w", q, err)
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var num []byte
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return fmt.Errorf("scan %q: %w", q, err)
		}
		for i, v := range vals {
			if i > 0 {
				w.WriteByte('|')
			}
			switch v := v.(type) {
			case nil:
			case int64:
				num = strconv.AppendInt(num[:0], v, 10)
				w.Write(num)
			case string:
				w.WriteString(v)
			case []byte:
				w.Write(v)
			default:
				return fmt.Errorf("hash %q: column %s holds a %T, which the hash does not support", q, cols[i], v)
			}
		}
		w.WriteByte('\n')
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %q: %w", q, err)
	}
	return nil
}

// Check reports an error unless the database at path holds exactly the challenge's seed
// rows (ContentHash equals ExpectedHash).
func Check(ctx context.Context, path string) error {
	sum, err := ContentHash(ctx, path)
	if err != nil {
		return err
	}
	if sum != ExpectedHash {
		return fmt.Errorf("check seed %s: content hash %s, want %s", path, sum, ExpectedHash)
	}
	return nil
}
