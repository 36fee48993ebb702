package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, "hi")
	}))
	defer ok.Close()
	// A listener nobody accepts from: connections wait in its queue, requests stall.
	stuck, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()

	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"answers", []string{"-c", "2", "-d", "200ms", ok.URL + "/"}, []string{"answers: 200 x", "connections never answered 0 of 2"}},
		{"status counted", []string{"-c", "1", "-d", "200ms", ok.URL + "/missing"}, []string{"answers: 404 x"}},
		{"stalls", []string{"-c", "2", "-d", "300ms", "-timeout", "100ms", "http://" + stuck.Addr().String() + "/"},
			[]string{"answers:;", "connections never answered 2 of 2", "i/o timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := run(context.Background(), tt.args, func(string) string { return "" }, &out, io.Discard); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output %q lacks %q", out.String(), w)
				}
			}
		})
	}
}

func TestRunRefusesBadArgs(t *testing.T) {
	for _, args := range [][]string{nil, {"ftp://x/"}, {"http://a/", "http://b/"}} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := run(ctx, args, func(string) string { return "" }, io.Discard, io.Discard)
		cancel()
		if err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
}
