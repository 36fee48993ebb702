package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestEngines runs each engine against an in-process server: every one completes
// requests in the hold, with no error, and reports numbers that make sense. Not timing
// sensitive: no latency is asserted.
func TestEngines(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, `{"status":"ok"}`)
	}))
	defer srv.Close()

	for _, tc := range []struct {
		name, engine string
	}{
		{"our own epoll loop", engineEpoll},
		{"gnet client", engineGnet},
		{"nbio engine", engineNbio},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := []string{"-engine", tc.engine, "-n", "50", "-interval", "20ms", "-ramp", "200ms", "-hold", "1s", srv.URL}
			if err := run(t.Context(), args, func(string) string { return "" }, &out, &errb); err != nil {
				t.Fatalf("run: %v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
			}
			t.Logf("%s", bytes.TrimSpace(out.Bytes()))
			var res result
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("output %q: %v", out.String(), err)
			}
			if res.Engine != tc.engine || res.Users != 50 || res.Connected != 50 {
				t.Errorf("engine %q users %d connected %d; want %q, 50, 50", res.Engine, res.Users, res.Connected, tc.engine)
			}
			if res.Requests <= 0 || res.Errors != 0 || res.Reconnects != 0 {
				t.Errorf("requests %d errors %d (%v) reconnects %d; want some requests and no errors",
					res.Requests, res.Errors, res.ErrorKinds, res.Reconnects)
			}
			// Each user sends at most once per interval: 50 users, 20 ms, about 1 s.
			if limit := int64(50 * (res.HoldS/0.020 + 1)); res.Requests > limit {
				t.Errorf("requests %d: more than the workload's %d", res.Requests, limit)
			}
			if res.RoundTrip.P50 <= 0 || res.RoundTrip.Max < res.RoundTrip.P99 || res.SendLag.Max < res.SendLag.P50 {
				t.Errorf("round trip %+v, send lag %+v: not ordered", res.RoundTrip, res.SendLag)
			}
			if res.CPUS <= 0 || res.USPerReq <= 0 || res.RSSMB <= 0 || res.Timers == "" {
				t.Errorf("cpu %v s, %v µs/request, rss %v MB, timers %q: want them reported", res.CPUS, res.USPerReq, res.RSSMB, res.Timers)
			}
		})
	}
}

// TestErrorsFail: a path the server does not have is counted as errors and fails the run.
func TestErrorsFail(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	var out bytes.Buffer
	err := run(t.Context(), []string{"-engine", "epoll", "-n", "5", "-interval", "20ms", "-ramp", "0s", "-hold", "200ms", srv.URL},
		func(string) string { return "" }, &out, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "status") {
		t.Fatalf("run = %v, want an error counting statuses; output %s", err, out.String())
	}
}

func TestBadArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no target", []string{"-engine", "epoll"}, "target URL"},
		{"unknown engine", []string{"-engine", "netpoll", "http://127.0.0.1:1"}, "-engine"},
		{"not http", []string{"ftp://127.0.0.1:1"}, "http://"},
		{"bad range", []string{"-local-addrs", "127.0.0.9-127.0.0.2", "http://127.0.0.1:1"}, "-local-addrs"},
		{"no users", []string{"-n", "0", "http://127.0.0.1:1"}, "-n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(context.Background(), tc.args, func(string) string { return "" }, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run = %v, want an error about %q", err, tc.want)
			}
		})
	}
}
