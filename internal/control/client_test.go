package control

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// serve answers on a unix socket with h, as a supervisor would.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// TestErrorsByStatus: the supervisor's answers become typed errors with its message, and
// a supervisor that answers without the protocol's version (an older binary) is named as
// such where the failure may be the versions' (a route it does not know).
func TestErrorsByStatus(t *testing.T) {
	cases := []struct {
		name    string
		version string // the answer's VersionHeader
		code    int
		body    string
		kind    error
		want    string
		older   bool
	}{
		{"no such app", "1", 404, `{"error":"app \"x\": no such app"}`, ErrNotFound, `app "x": no such app`, false},
		{"stopped", "1", 503, `{"error":"the app is stopped"}`, ErrUnavailable, "the app is stopped", false},
		{"refused to a worker", "1", 403, `{"error":"refused"}`, ErrForbidden, "refused", false},
		{"conflict", "1", 409, `{"error":"reload aborted"}`, ErrConflict, "reload aborted", false},
		{"an older supervisor's 404", "", 404, "404 page not found\n", ErrNotFound, "404 Not Found", true},
		{"a newer supervisor's 400", "2", 400, `{"error":"n: bad"}`, ErrBadRequest, "n: bad", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got string
			sock := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = r.Header.Get(VersionHeader)
				if c.version != "" {
					w.Header().Set(VersionHeader, c.version)
				}
				w.WriteHeader(c.code)
				w.Write([]byte(c.body))
			}))
			_, err := NewClient(sock).Status(context.Background(), "")
			if got != "1" {
				t.Errorf("the request's %s = %q, want 1", VersionHeader, got)
			}
			if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Status = %v, want %v with %q", err, c.kind, c.want)
			}
			if older := strings.Contains(err.Error(), "speaks another control protocol"); older != c.older {
				t.Errorf("Status = %v: says the versions differ: %v, want %v", err, older, c.older)
			}
		})
	}
}

// TestUnreachable: no supervisor at the socket says so, with the path.
func TestUnreachable(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	_, err := NewClient(sock).Status(context.Background(), "")
	if err == nil || !strings.Contains(err.Error(), "reach the supervisor at "+sock) {
		t.Fatalf("Status = %v", err)
	}
}
