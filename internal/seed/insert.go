package seed

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"go.uber.org/zap"
)

// The tables in load order, with their column lists as insertRows binds them.
var loadTables = [...]struct{ name, columns string }{
	{"users", "id, username, created_at"},
	{"posts", "id, user_id, body, created_at"},
	{"likes", "user_id, post_id, created_at"},
}

const (
	tableUsers = iota
	tablePosts
	tableLikes
)

// rowBatch is a run of rows of one table, flattened into bind arguments.
type rowBatch struct {
	table int
	rows  int
	args  []any
}

// insertRows draws the rows on one goroutine and inserts them on the caller's, so the
// drawing (cheap, but not free) overlaps SQLite's work. Rows go in as multi-row INSERTs:
// per-statement overhead in database/sql and the driver dominates single-row inserts.
func insertRows(ctx context.Context, tx *sql.Tx, perInsert int, log *zap.Logger) (st Stats, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	batches := make(chan rowBatch, 8)
	drawErr := make(chan error, 1)
	go func() {
		defer close(batches)
		drawErr <- drawBatches(ctx, perInsert, batches)
	}()
	defer func() {
		// Stop and wait for the drawing goroutine whatever happened here.
		cancel()
		for range batches {
		}
		if derr := <-drawErr; derr != nil && err == nil {
			err = derr
		}
	}()

	stmts := map[[2]int]*sql.Stmt{}
	defer func() {
		for _, s := range stmts {
			_ = s.Close()
		}
	}()
	counts := [3]*int{&st.Users, &st.Posts, &st.Likes}
	for b := range batches {
		key := [2]int{b.table, b.rows}
		stmt := stmts[key]
		if stmt == nil {
			if stmt, err = tx.PrepareContext(ctx, insertSQL(b.table, b.rows)); err != nil {
				return st, fmt.Errorf("prepare %s insert: %w", loadTables[b.table].name, err)
			}
			stmts[key] = stmt
		}
		if _, err := stmt.ExecContext(ctx, b.args...); err != nil {
			return st, fmt.Errorf("insert %s: %w", loadTables[b.table].name, err)
		}
		prev := *counts[b.table]
		*counts[b.table] += b.rows
		if prev == 0 {
			log.Info("seed loading", zap.String("table", loadTables[b.table].name))
		}
	}
	if st.Users != NumUsers || st.Posts != NumPosts || st.Likes != NumLikes {
		return st, fmt.Errorf("insert rows: got %d users, %d posts, %d likes", st.Users, st.Posts, st.Likes)
	}
	return st, nil
}

// insertSQL is an INSERT of rows rows into table, one placeholder per value.
func insertSQL(table, rows int) string {
	t := loadTables[table]
	one := "(?" + strings.Repeat(", ?", strings.Count(t.columns, ",")) + ")"
	var b strings.Builder
	b.WriteString("INSERT INTO " + t.name + " (" + t.columns + ") VALUES ")
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(one)
	}
	return b.String()
}

// drawBatches walks the rows and sends them to out in batches of at most perInsert rows of
// one table.
func drawBatches(ctx context.Context, perInsert int, out chan<- rowBatch) error {
	cur := rowBatch{table: -1}
	flush := func() error {
		if cur.rows == 0 {
			return nil
		}
		select {
		case out <- cur:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		cur = rowBatch{table: -1}
		return nil
	}
	add := func(table int, vals ...any) error {
		if cur.table != table || cur.rows == perInsert {
			if err := flush(); err != nil {
				return err
			}
			cur = rowBatch{table: table, args: make([]any, 0, perInsert*len(vals))}
		}
		cur.args = append(cur.args, vals...)
		cur.rows++
		return nil
	}
	err := walkRows(rowSink{
		user: func(u User) error { return add(tableUsers, u.ID, u.Username, u.CreatedAt) },
		post: func(p Post) error { return add(tablePosts, p.ID, p.UserID, p.Body, p.CreatedAt) },
		like: func(l Like) error { return add(tableLikes, l.UserID, l.PostID, l.CreatedAt) },
	})
	if err != nil {
		return fmt.Errorf("draw rows: %w", err)
	}
	return flush()
}
