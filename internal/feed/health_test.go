package feed

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/http1"
	"github.com/onehost/onehost/internal/token"
)

// TestPingFollowsTheDatabaseFile: a connection keeps reading through its open descriptor
// whatever happens to the path, so SELECT 1 alone would say "ok" after the file was
// deleted. Ping and writes must notice; reads keep working; putting the file back heals.
func TestPingFollowsTheDatabaseFile(t *testing.T) {
	tests := []struct {
		name    string
		break_  func(t *testing.T, path string)
		restore func(t *testing.T, path string) // nil: no way back
	}{
		{"deleted", func(t *testing.T, path string) { must(t, os.Remove(path)) }, nil},
		{"renamed", func(t *testing.T, path string) { must(t, os.Rename(path, path+".moved")) },
			func(t *testing.T, path string) { must(t, os.Rename(path+".moved", path)) }},
		{"replaced by another file", func(t *testing.T, path string) {
			must(t, os.Rename(path, path+".old"))
			must(t, os.WriteFile(path, []byte("someone else's file"), 0o644))
		}, func(t *testing.T, path string) { must(t, os.Rename(path+".old", path)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := newTestDB(t)
			for _, opts := range []Options{{ReadConns: 1}, {ReadConns: 2}} { // shared and separate readers
				s := openTestStore(t, path, opts)
				if err := s.Ping(context.Background()); err != nil {
					t.Fatalf("Ping before: %v", err)
				}
				tt.break_(t, path)
				if err := s.Ping(context.Background()); !errors.Is(err, ErrFileMoved) {
					t.Errorf("Ping after the file was %s = %v, want ErrFileMoved", tt.name, err)
				}
				if _, err := s.CreatePost(nil, 1, []byte("user_1"), "lost?"); !errors.Is(err, ErrFileMoved) {
					t.Errorf("CreatePost after the file was %s = %v, want ErrFileMoved", tt.name, err)
				}
				if _, _, err := s.Like(nil, 1, 2); !errors.Is(err, ErrFileMoved) {
					t.Errorf("Like after the file was %s = %v, want ErrFileMoved", tt.name, err)
				}
				if got, err := s.AppendPost(nil, 1); err != nil || !strings.HasPrefix(string(got), `{"post":{"id":1,`) {
					t.Errorf("AppendPost after the file was %s = %s, %v; want reads to keep working", tt.name, got, err)
				}
				if tt.restore == nil {
					break // the file is gone for good
				}
				tt.restore(t, path)
				if err := s.Ping(context.Background()); err != nil {
					t.Errorf("Ping after the file came back: %v", err)
				}
				if _, err := s.CreatePost(nil, 1, []byte("user_1"), "after"); err != nil {
					t.Errorf("CreatePost after the file came back: %v", err)
				}
			}
		})
	}
}

// TestPingChecksPermissions: a file this process may no longer open for reading and writing
// fails the next start, so it fails Ping now. Root may open anything: no fault for root.
func TestPingChecksPermissions(t *testing.T) {
	path := newTestDB(t)
	s := openTestStore(t, path, Options{})
	must(t, os.Chmod(path, 0))
	defer os.Chmod(path, 0o644)
	err := s.Ping(context.Background())
	if os.Geteuid() == 0 {
		if err != nil {
			t.Errorf("Ping as root with mode 000 = %v, want nil: root may still open the file", err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("Ping with mode 000 = %v, want a permission error", err)
	}
}

// TestHealthDegraded: the contract's 503 body, while reads still answer and writes are 500.
func TestHealthDegraded(t *testing.T) {
	path := newTestDB(t)
	s := openTestStore(t, path, Options{})
	srv := &http1.Server{Handler: NewHandler(HandlerConfig{Store: s, Secret: handlerSecret})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	base := "http://" + ln.Addr().String()
	now := time.Now()
	auth := "Bearer " + token.Sign(handlerSecret, 1, "user_1", now, now.Add(time.Hour))
	do := func(method, target, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+target, strings.NewReader(body))
		must(t, err)
		if method == "POST" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		must(t, err)
		return resp.StatusCode, string(b)
	}
	if code, body := do("GET", "/health", ""); code != 200 {
		t.Fatalf("GET /health before = %d %s", code, body)
	}
	must(t, os.Rename(path, path+".moved"))
	degraded := regexp.MustCompile(`^\{"status":"degraded","db":"unreachable","error":"[^"\\]+"\}$`)
	if code, body := do("GET", "/health", ""); code != 503 || !degraded.MatchString(body) {
		t.Errorf("GET /health with the file renamed = %d %s, want 503 matching %s", code, body, degraded)
	}
	if code, body := do("GET", "/posts/1", ""); code != 200 {
		t.Errorf("GET /posts/1 with the file renamed = %d %s, want 200", code, body)
	}
	if code, body := do("POST", "/posts", `{"body":"x"}`); code != 500 || body != `{"error":"internal server error"}` {
		t.Errorf("POST /posts with the file renamed = %d %s, want 500 internal server error", code, body)
	}
	must(t, os.Rename(path+".moved", path))
	if code, body := do("GET", "/health", ""); code != 200 {
		t.Errorf("GET /health after the file came back = %d %s, want 200", code, body)
	}
	if code, body := do("POST", "/posts", `{"body":"x"}`); code != 201 {
		t.Errorf("POST /posts after the file came back = %d %s, want 201", code, body)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkCheckNotMoved is what every write pays for refusing to write into a file the
// path no longer names: one stat of the path through SQLite's VFS.
func BenchmarkCheckNotMoved(b *testing.B) {
	s := openTestStore(b, newTestDB(b), Options{})
	w := s.writer
	b.ReportAllocs()
	for b.Loop() {
		if err := checkNotMoved(w.Conn); err != nil {
			b.Fatal(err)
		}
	}
}
