package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestHostCheck: which Host headers the TCP pages answer, by the handler alone.
func TestHostCheck(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := hostCheck("metrics", "metrics.internal:9100", []string{"prom.example.com"}, ok)
	tests := []struct {
		host string
		want int
	}{
		{"127.0.0.1:9100", 200},
		{"127.0.0.1", 200},
		{"[::1]:9100", 200},
		{"10.1.2.3:9100", 200}, // Prometheus scraping by IP from another machine
		{"localhost:9100", 200},
		{"LOCALHOST.:9100", 200},
		{"metrics.internal:9100", 200}, // the listen address's own name
		{"prom.example.com", 200},      // -allowed-hosts
		{"attacker.example:9100", 421}, // DNS rebinding
		{"127.0.0.1.attacker.example", 421},
		{"localhost.attacker.example:9100", 421},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/metrics", nil)
			r.Host = tc.host
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Errorf("Host %s: %d %q, want %d", tc.host, w.Code, w.Body, tc.want)
			}
			if tc.want == 421 && !strings.Contains(w.Body.String(), "-allowed-hosts") {
				t.Errorf("Host %s: %q does not say how to allow it", tc.host, w.Body)
			}
		})
	}
	var a allowedHosts
	if err := a.Set("https://x.example"); err == nil {
		t.Error("-allowed-hosts with a scheme: nil error")
	}
}

// TestRebindingRefused: the -metrics and -dashboard pages of a running supervisor refuse a
// request whose Host is a name of someone else's (what a browser sends after DNS
// rebinding) and answer for 127.0.0.1:PORT, localhost:PORT and -allowed-hosts.
func TestRebindingRefused(t *testing.T) {
	t.Parallel()
	c := startRun(t, fmt.Sprintf("instances: 1\nenv: {GORACE: atexit_sleep_ms=0, %s: worker}\n", roleEnv),
		"-metrics", "127.0.0.1:0", "-dashboard", "127.0.0.1:0", "-allowed-hosts", "onehost.test", "--", os.Args[0])
	var metrics string
	waitUntil(t, 5*time.Second, "the metrics address in the log", func() bool {
		m := regexp.MustCompile(`"url": ?"(http://[^"]+/metrics)"`).FindStringSubmatch(c.logs.String())
		if m != nil {
			metrics = m[1]
		}
		return m != nil
	})
	for _, page := range []string{metrics, dashboardURL(t, c)} {
		u, err := url.Parse(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			host string
			want int
		}{
			{u.Host, 200}, // 127.0.0.1:PORT
			{"localhost:" + u.Port(), 200},
			{"onehost.test:" + u.Port(), 200},
			{"rebind.attacker.example:" + u.Port(), 421},
		} {
			req, _ := http.NewRequest("GET", page, nil)
			req.Host = tc.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("GET %s with Host %s: %d %s, want %d", page, tc.host, resp.StatusCode, body, tc.want)
			}
		}
	}
}
