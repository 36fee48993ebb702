package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/http1"
)

// TestRun measures this test process as the server: 50 idle connections to an http1
// server in it, and a line with both readings.
func TestRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &http1.Server{Handler: http1.HandlerFunc(func(w *http1.Response, r *http1.Request) {
		w.Body = append(w.Body, `{"status":"ok"}`...)
	})}
	go s.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	var out bytes.Buffer
	args := []string{"-pid", strconv.Itoa(os.Getpid()), "-n", "50", "-settle", "10ms", "http://" + ln.Addr().String() + "/health"}
	if err := run(context.Background(), args, os.Getenv, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "connections 50 rss_before_kb ") {
		t.Fatalf("output %q", out.String())
	}
	if got := s.Stats().Requests; got != 50 {
		t.Errorf("server answered %d requests, want 50", got)
	}
}

func TestRefusesBadArgs(t *testing.T) {
	for _, args := range [][]string{{}, {"-pid", "1"}, {"-pid", "0", "http://x/"}, {"-pid", "1", "not a url"}} {
		if err := run(context.Background(), args, os.Getenv, io.Discard, io.Discard); err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
}
