package seedtest

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite" // the "sqlite" driver

	"github.com/onehost/onehost/internal/schema"
)

// Tiny writes a small feed database at dir/feed.db and returns its path: the challenge
// schema in WAL mode, users 1–50 named user_N, posts 1–200 (post p by user 1+p%50, body
// "post p") and, with likes, post p liked by users 1 … p%4. For tests about files and
// processes rather than data: it takes milliseconds where a copy of the seed takes seconds.
func Tiny(tb testing.TB, dir string, likes bool) string {
	tb.Helper()
	path := filepath.Join(dir, "feed.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	stmts := []string{schema.SQL, "BEGIN"}
	for u := 1; u <= 50; u++ {
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO users(id, username) VALUES(%d, 'user_%d')`, u, u))
	}
	for p := 1; p <= 200; p++ {
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO posts(id, user_id, body) VALUES(%d, %d, 'post %d')`, p, 1+p%50, p))
		for u := 1; likes && u <= p%4; u++ {
			stmts = append(stmts, fmt.Sprintf(`INSERT INTO likes(user_id, post_id) VALUES(%d, %d)`, u, p))
		}
	}
	stmts = append(stmts, "COMMIT", "PRAGMA journal_mode=WAL")
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			tb.Fatalf("build test database: %s: %v", s, err)
		}
	}
	return path
}
