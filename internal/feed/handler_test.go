package feed

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/http1"
	"github.com/onehost/onehost/internal/token"
)

var handlerSecret = []byte("twelve-dollar-challenge")

// serveTestDB serves the handler over a real http1.Server on port 0.
func serveTestDB(t *testing.T) string {
	t.Helper()
	st := openTestStore(t, newTestDB(t), Options{})
	srv := &http1.Server{Handler: NewHandler(HandlerConfig{Store: st, Secret: handlerSecret})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}

func TestRoutes(t *testing.T) {
	addr := serveTestDB(t)
	now := time.Now()
	valid := "Bearer " + token.Sign(handlerSecret, 2, "user_2", now, now.Add(time.Hour))
	ghost := "Bearer " + token.Sign(handlerSecret, 999, "ghost", now, now.Add(time.Hour))
	tests := []struct {
		name, method, path, auth, ctype, body string
		status                                int
		want                                  string // exact body, or "" to skip
		allow                                 string // the Allow header, when 405
		authenticate                          string // the WWW-Authenticate header, when 401
	}{
		{name: "query string ignored", method: "GET", path: "/feed?x=1", status: 200},
		{name: "feed.json", method: "GET", path: "/feed.json", status: 404, want: `{"error":"not found"}`},
		{name: "trailing slash on feed", method: "GET", path: "/feed/", status: 404, want: `{"error":"not found"}`},
		{name: "posts without id", method: "GET", path: "/posts/", status: 404, want: `{"error":"not found"}`},
		{name: "post with trailing slash", method: "GET", path: "/posts/1/", status: 404, want: `{"error":"not found"}`},
		{name: "nested path", method: "GET", path: "/posts/1/x", status: 404, want: `{"error":"not found"}`},
		{name: "huge id", method: "GET", path: "/posts/99999999999999999999", status: 404, want: `{"error":"post not found"}`},
		{name: "signed id", method: "GET", path: "/posts/+1", status: 400, want: `{"error":"invalid post id"}`},
		{name: "all zeros", method: "GET", path: "/posts/000", status: 400, want: `{"error":"invalid post id"}`},
		{name: "post feed", method: "POST", path: "/feed", status: 405, want: `{"error":"method not allowed"}`, allow: "GET, HEAD"},
		{name: "get posts", method: "GET", path: "/posts", status: 405, allow: "POST"},
		{name: "delete post", method: "DELETE", path: "/posts/1", status: 405, allow: "GET, HEAD"},
		{name: "get like", method: "GET", path: "/posts/1/like", status: 405, allow: "POST"},
		{name: "put health", method: "PUT", path: "/health", status: 405, allow: "GET, HEAD"},
		{name: "auth before id", method: "POST", path: "/posts/abc/like", status: 401, want: `{"error":"missing bearer token"}`, authenticate: "Bearer"},
		{name: "auth before body", method: "POST", path: "/posts", body: `{bad`, status: 401, want: `{"error":"missing bearer token"}`, authenticate: "Bearer"},
		{name: "basic scheme", method: "POST", path: "/posts", auth: "Basic abc", body: `{"body":"x"}`, status: 401, want: `{"error":"missing bearer token"}`, authenticate: "Bearer"},
		{name: "lowercase bearer, bad token", method: "POST", path: "/posts", auth: "bearer x", body: `{"body":"x"}`, status: 401, want: `{"error":"invalid or expired token"}`, authenticate: `Bearer error="invalid_token"`},
		{name: "uppercase BEARER, valid token", method: "POST", path: "/posts/1/like", auth: "BEARER " + valid[len("Bearer "):], status: 201},
		{name: "empty request body", method: "POST", path: "/posts", auth: valid, status: 400, want: `{"error":"malformed JSON body"}`},
		{name: "trailing bytes", method: "POST", path: "/posts", auth: valid, body: `{"body":"x"} y`, status: 400, want: `{"error":"malformed JSON body"}`},
		{name: "top-level array", method: "POST", path: "/posts", auth: valid, body: `["x"]`, status: 400, want: `{"error":"body is required"}`},
		{name: "duplicate key last wins", method: "POST", path: "/posts", auth: valid, body: `{"body":"","body":"second"}`, status: 201},
		{name: "body over 16 KiB", method: "POST", path: "/posts", auth: valid, body: `{"body":"` + strings.Repeat("x", 16<<10) + `"}`, status: 413, want: `{"error":"request body too large"}`},
		{name: "500 code points", method: "POST", path: "/posts", auth: valid, body: `{"body":"` + strings.Repeat("é", 500) + `"}`, status: 201},
		{name: "501 code points", method: "POST", path: "/posts", auth: valid, body: `{"body":"` + strings.Repeat("é", 501) + `"}`, status: 400, want: `{"error":"body must be at most 500 characters"}`},
		{name: "user without row", method: "POST", path: "/posts", auth: ghost, body: `{"body":"x"}`, status: 500, want: `{"error":"internal server error"}`},
		{name: "like ignores body", method: "POST", path: "/posts/7/like", auth: valid, ctype: "application/json", body: `not json at all`, status: 201},
		{name: "like missing post", method: "POST", path: "/posts/424242/like", auth: valid, status: 404, want: `{"error":"post not found"}`},
		{name: "like zero", method: "POST", path: "/posts/0/like", auth: valid, status: 400, want: `{"error":"invalid post id"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, "http://"+addr+tt.path, strings.NewReader(tt.body))
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			if tt.ctype != "" {
				req.Header.Set("Content-Type", tt.ctype)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Errorf("status %d (%s), want %d", resp.StatusCode, b, tt.status)
			}
			if tt.want != "" && string(b) != tt.want {
				t.Errorf("body %s, want %s", b, tt.want)
			}
			if got := resp.Header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow %q, want %q", got, tt.allow)
			}
			if got := resp.Header.Get("WWW-Authenticate"); got != tt.authenticate {
				t.Errorf("WWW-Authenticate %q, want %q", got, tt.authenticate)
			}
			if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || !json.Valid(b) {
				t.Errorf("response is not JSON: %q %s", resp.Header.Get("Content-Type"), b)
			}
		})
	}
}

func TestHeadFeed(t *testing.T) {
	addr := serveTestDB(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "HEAD /feed HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "HEAD"})
	if err != nil || resp.StatusCode != 200 || resp.ContentLength <= 0 {
		t.Fatalf("HEAD /feed: %v %v", resp, err)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET after HEAD: %v %v; the HEAD response must carry no body", resp, err)
	}
}

// FuzzRoute drives the router with arbitrary methods, paths and bodies: it must never
// panic, and every answer is one of the contract's statuses with a JSON body.
func FuzzRoute(f *testing.F) {
	for _, s := range [][3]string{
		{"GET", "/feed", ""}, {"GET", "/posts/1", ""}, {"GET", "/posts/0001", ""},
		{"POST", "/posts", `{"body":"x"}`}, {"POST", "/posts/1/like", ""}, {"GET", "/posts//like", ""},
		{"HEAD", "/health", ""}, {"GET", "/posts/1/like/like", ""}, {"POST", "/posts/abc/like", ""},
		{"GET", "/posts/99999999999999999999999", ""}, {"OPTIONS", "/", ""},
	} {
		f.Add(s[0], s[1], []byte(s[2]))
	}
	st := openTestStore(f, newTestDB(f), Options{})
	h := NewHandler(HandlerConfig{Store: st, Secret: handlerSecret})
	allowed := map[int]bool{200: true, 201: true, 400: true, 401: true, 404: true, 405: true}
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		var w http1.Response
		h.ServeHTTP1(&w, &http1.Request{Method: []byte(method), Path: []byte(path), Body: body, Minor: 1})
		status := w.Status
		if status == 0 {
			status = 200
		}
		if !allowed[status] || !json.Valid(w.Body) {
			t.Fatalf("%s %q: %d %s", method, path, status, w.Body)
		}
	})
}
