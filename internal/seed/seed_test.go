package seed_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/onehost/onehost/internal/seed"
	"github.com/onehost/onehost/internal/seedtest"
)

// cliHashQuery is the challenge's check, verbatim.
const cliHashQuery = "SELECT * FROM users ORDER BY id; SELECT * FROM posts ORDER BY id; SELECT * FROM likes ORDER BY post_id, user_id;"

// TestContentHash generates the seed (through the shared cache) and checks the challenge's
// hash of its rows, computed in Go and, where the sqlite3 CLI is installed, by the CLI.
func TestContentHash(t *testing.T) {
	path := seedtest.Build(t)
	ctx := context.Background()

	start := time.Now()
	got, err := seed.ContentHash(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ContentHash took %v", time.Since(start))
	if got != seed.ExpectedHash {
		t.Errorf("ContentHash: got %s, want %s", got, seed.ExpectedHash)
	}

	t.Run("sqlite3 CLI", func(t *testing.T) {
		cli, err := exec.LookPath("sqlite3")
		if err != nil {
			t.Skip("sqlite3 CLI not on PATH; the Go hash above stands alone")
		}
		out, err := exec.CommandContext(ctx, cli, "-readonly", path, cliHashQuery).Output()
		if err != nil {
			t.Fatalf("sqlite3: %v", err)
		}
		sum := sha256.Sum256(out)
		if got := hex.EncodeToString(sum[:]); got != seed.ExpectedHash {
			t.Errorf("sqlite3 CLI hash: got %s, want %s", got, seed.ExpectedHash)
		}
	})
}

// TestSeedShape checks what the loading steps leave behind: WAL mode, statistics and the
// fixed schema.
func TestSeedShape(t *testing.T) {
	path := seedtest.Path(t)
	cli, err := exec.LookPath("sqlite3")
	if err != nil {
		t.Skip("sqlite3 CLI not on PATH")
	}
	query := func(q string) string {
		t.Helper()
		out, err := exec.Command(cli, path, q).Output()
		if err != nil {
			t.Fatalf("sqlite3 %q: %v", q, err)
		}
		return strings.TrimSpace(string(out))
	}
	tests := []struct {
		name, query, want string
	}{
		{"journal mode", "PRAGMA journal_mode", "wal"},
		{"users", "SELECT count(*) FROM users", "50000"},
		{"posts", "SELECT count(*) FROM posts", "500000"},
		{"likes", "SELECT count(*) FROM likes", "2016005"},
		{"analyzed", "SELECT count(*) > 0 FROM sqlite_stat1", "1"},
		{"indexes", "SELECT group_concat(name, ' ') FROM (SELECT name FROM sqlite_schema WHERE type = 'index' ORDER BY name)",
			"likes_post_id_idx posts_created_at_id_idx posts_user_id_idx sqlite_autoindex_likes_1 sqlite_autoindex_users_1"},
		{"integrity", "PRAGMA quick_check", "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := query(tt.query); got != tt.want {
				t.Errorf("%s: got %q, want %q", tt.query, got, tt.want)
			}
		})
	}
}

func TestGenerateRefusesExistingPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "feed.db")
	if err := os.WriteFile(path, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := seed.Generate(context.Background(), path, seed.Options{}); err == nil {
		t.Fatal("Generate over an existing file: got nil error, want one")
	}
	if b, _ := os.ReadFile(path); string(b) != "keep me" {
		t.Errorf("existing file changed to %q", b)
	}
}

func TestGenerateCancelledLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	// Cancel while loading: the drawing goroutine and the inserts both watch ctx.
	go func() { time.Sleep(200 * time.Millisecond); cancel() }()
	if _, err := seed.Generate(ctx, filepath.Join(dir, "feed.db"), seed.Options{}); err == nil {
		t.Fatal("Generate with a cancelled context: got nil error, want one")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left behind: %s", e.Name())
	}
}

func TestWriteTokens(t *testing.T) {
	secret := []byte("test-secret")
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	if err := seed.WriteTokens(&buf, secret, 3, now); err != nil {
		t.Fatal(err)
	}
	var entries []struct {
		ID       int64  `json:"id"`
		Username string `json:"username"`
		Token    string `json:"token"`
	}
	if err := json.Unmarshal(buf.Bytes(), &entries); err != nil {
		t.Fatalf("parse token file: %v\n%s", err, buf.Bytes())
	}
	if len(entries) != 3 {
		t.Fatalf("got %d entries, want 3", len(entries))
	}
	users := seed.Users()
	iat, exp := now.Unix(), now.Add(3650*24*time.Hour).Unix()
	for i, e := range entries {
		u := users[i]
		if e.ID != u.ID || e.Username != u.Username {
			t.Errorf("entry %d: got id %d username %q, want %d %q", i, e.ID, e.Username, u.ID, u.Username)
		}
		parts := strings.Split(e.Token, ".")
		if len(parts) != 3 {
			t.Fatalf("entry %d: token %q has %d parts, want 3", i, e.Token, len(parts))
		}
		header, _ := base64.RawURLEncoding.DecodeString(parts[0])
		if got, want := string(header), `{"alg":"HS256","typ":"JWT"}`; got != want {
			t.Errorf("entry %d header: got %s, want %s", i, got, want)
		}
		payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
		wantPayload := `{"sub":"` + jsonInt(u.ID) + `","username":"` + u.Username +
			`","iat":` + jsonInt(iat) + `,"exp":` + jsonInt(exp) + `}`
		if string(payload) != wantPayload {
			t.Errorf("entry %d payload: got %s, want %s", i, payload, wantPayload)
		}

		tok, err := jwt.Parse(e.Token, func(*jwt.Token) (any, error) { return secret, nil },
			jwt.WithValidMethods([]string{"HS256"}), jwt.WithTimeFunc(func() time.Time { return now }))
		if err != nil {
			t.Fatalf("entry %d: golang-jwt rejects the token: %v", i, err)
		}
		if sub, _ := tok.Claims.GetSubject(); sub != jsonInt(u.ID) {
			t.Errorf("entry %d: sub %q, want %q", i, sub, jsonInt(u.ID))
		}
		if _, err := jwt.Parse(e.Token, func(*jwt.Token) (any, error) { return []byte("other"), nil },
			jwt.WithTimeFunc(func() time.Time { return now })); err == nil {
			t.Errorf("entry %d: token verifies with the wrong secret", i)
		}
	}
}

func TestWriteTokensRejectsBadCount(t *testing.T) {
	for _, n := range []int{-1, seed.NumUsers + 1} {
		if err := seed.WriteTokens(&bytes.Buffer{}, []byte("s"), n, time.Now()); err == nil {
			t.Errorf("WriteTokens(n=%d): got nil error, want one", n)
		}
	}
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
