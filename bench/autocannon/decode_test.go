package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/onehost/onehost/internal/contentcoding"
)

// codingServer answers /ok with a 27 KB JSON body in the coding the request names in
// Accept-Encoding (one token: gzip, zstd or br; none: identity), and /corrupt with a
// body that says gzip and is not.
func codingServer(t *testing.T) string {
	t.Helper()
	var sb strings.Builder
	sb.WriteString("[")
	for i := range 500 {
		sb.WriteString(`{"id": ` + strconv.Itoa(i) + `, "name": "item", "tags": ["alpha", "beta"]},`)
	}
	sb.WriteString("{}]")
	plain := []byte(sb.String())
	bodies := map[contentcoding.Coding][]byte{contentcoding.Identity: plain}
	for _, c := range []contentcoding.Coding{contentcoding.Gzip, contentcoding.Zstd, contentcoding.Br} {
		b, err := contentcoding.CompressBest(c, plain)
		if err != nil {
			t.Fatal(err)
		}
		bodies[c] = b
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/corrupt" {
			w.Header().Set("Content-Encoding", "gzip")
			w.Write([]byte("\x1f\x8b not gzip after all"))
			return
		}
		c := contentcoding.Identity
		if ae := r.Header.Get("Accept-Encoding"); ae != "" {
			var err error
			if c, err = contentcoding.Parse(ae); err != nil {
				http.Error(w, err.Error(), http.StatusNotAcceptable)
				return
			}
			w.Header().Set("Content-Encoding", c.String())
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(bodies[c])
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestWireBytesAndCheckDecode: -H 'Accept-Encoding: …' reaches the server as autocannon
// sends it, wire bytes per request say what the coding saved, and --check-decode counts
// the bodies that do not decode, and only those.
func TestWireBytesAndCheckDecode(t *testing.T) {
	url := codingServer(t)
	type result struct {
		report
		Generator json.RawMessage `json:"generator"` // its verdict's JSON is not read back
	}
	runJSON := func(t *testing.T, args ...string) result {
		t.Helper()
		out, err := runCmd(t, append([]string{"-c", "2", "-a", "40", "-j"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var r result
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		return r
	}
	identity := runJSON(t, "--check-decode", url+"/ok")
	if identity.WireBytesPerReq < 25_000 || identity.BadBodies != 0 || !identity.CheckDecode {
		t.Fatalf("identity: %.1f wire bytes per request, %d bad bodies, check_decode %v; want > 25,000, 0, true",
			identity.WireBytesPerReq, identity.BadBodies, identity.CheckDecode)
	}
	tests := []struct {
		name    string
		args    []string
		maxWire float64 // × identity's
		bad     int64
		errors  int64
	}{
		{"gzip", []string{"-H", "Accept-Encoding: gzip", "--check-decode", url + "/ok"}, 0.15, 0, 0},
		{"zstd", []string{"-H", "Accept-Encoding=zstd", "--check-decode", url + "/ok"}, 0.15, 0, 0},
		{"br", []string{"--headers", "accept-encoding: br", "--check-decode", url + "/ok"}, 0.15, 0, 0},
		{"corrupt, checked", []string{"--check-decode", url + "/corrupt"}, 0.01, 40, 40},
		{"corrupt, unchecked", []string{url + "/corrupt"}, 0.01, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runJSON(t, tc.args...)
			if r.C2xx != 40 {
				t.Fatalf("%d 2xx of 40 (codes %v)", r.C2xx, r.StatusCodeStats)
			}
			if max := tc.maxWire * identity.WireBytesPerReq; r.WireBytesPerReq <= 0 || r.WireBytesPerReq > max {
				t.Errorf("%.1f wire bytes per request, want (0, %.1f] (identity: %.1f)", r.WireBytesPerReq, max, identity.WireBytesPerReq)
			}
			if r.BadBodies != tc.bad || r.Errors != tc.errors {
				t.Errorf("bad bodies %d, errors %d; want %d, %d", r.BadBodies, r.Errors, tc.bad, tc.errors)
			}
		})
	}
	out, err := runCmd(t, "-c", "1", "-a", "5", "--check-decode", url+"/corrupt")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{" bytes per response on the wire", "\n5 errors (0 timeouts)\n5 bodies failed to decode"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
}
