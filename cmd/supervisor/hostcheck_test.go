package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"testing"
	"time"
)

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
