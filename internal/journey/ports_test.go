package journey

import "testing"

func TestCheckPortsQuiet(t *testing.T) {
	for _, tc := range []struct{ name, url string }{
		{"a host name: nothing to count", "http://example.invalid:3000"},
		{"a small run on loopback", "http://127.0.0.1:9"},
		{"localhost", "http://localhost:9"},
		{"not a URL", "::"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CheckPorts(Config{URL: tc.url, Users: 100, Tokens: testTokens(1)}); len(got) != 0 {
				t.Errorf("CheckPorts = %v, want none", got)
			}
		})
	}
}
