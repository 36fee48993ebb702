package pageserver

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHostCheck: which Host headers the TCP pages answer, by the handler alone.
func TestHostCheck(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := HostCheck("metrics", "metrics.internal:9100", []string{"prom.example.com"}, ok)
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
	var a AllowedHosts
	if err := a.Set("https://x.example"); err == nil {
		t.Error("-allowed-hosts with a scheme: nil error")
	}
}
