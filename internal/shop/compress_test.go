package shop

import (
	"bytes"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/onehost/onehost/internal/contentcoding"
	"github.com/onehost/onehost/internal/goldentest"
)

// TestCatalogEncodings checks the static page in each coding: negotiated as RFC 9110 says,
// decoded byte for byte to static/catalog.html, with its own ETag, Vary on every answer,
// and revalidated per coding.
func TestCatalogEncodings(t *testing.T) {
	c := dial(t, serve(t))
	file, err := os.ReadFile("static/catalog.html")
	if err != nil {
		t.Fatal(err)
	}
	etags := map[string]string{}
	tests := []struct {
		name     string
		accept   string // "" no header
		encoding string // want Content-Encoding; "" none
		status   int
	}{
		{"no header", "", "", 200},
		{"gzip", "Accept-Encoding: gzip", "gzip", 200},
		{"zstd", "Accept-Encoding: zstd", "zstd", 200},
		{"br", "Accept-Encoding: br", "br", 200},
		{"x-gzip, any case", "Accept-Encoding: X-GZIP", "gzip", 200},
		{"browser gets the smallest", "Accept-Encoding: gzip, deflate, br, zstd", "", 200}, // checked below
		{"q-values first", "Accept-Encoding: br;q=0.5, gzip", "gzip", 200},
		{"identity asked", "Accept-Encoding: identity", "", 200},
		{"codings refused", "Accept-Encoding: gzip;q=0, br;q=0, zstd;q=0", "", 200},
		{"unknown only", "Accept-Encoding: compress", "", 200},
		{"nothing acceptable", "Accept-Encoding: identity;q=0, compress", "", 406},
		{"star q=0", "Accept-Encoding: *;q=0", "", 406},
		// Two field lines are one list (RFC 9110 5.3): "identity;q=0, br".
		{"two lines", "Accept-Encoding: identity;q=0\r\nAccept-Encoding: br", "br", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h []string
			if tt.accept != "" {
				h = append(h, tt.accept)
			}
			resp, body := c.do("GET", CatalogPath, h...)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if want := strconv.Itoa(tt.status) + " " + http.StatusText(tt.status); resp.Status != want {
				t.Errorf("status line says %q, want %q", resp.Status, want)
			}
			if v := resp.Header.Get("Vary"); v != "Accept-Encoding" {
				t.Errorf("Vary %q, want Accept-Encoding", v)
			}
			if tt.status != 200 {
				return
			}
			ce := resp.Header.Get("Content-Encoding")
			if tt.name == "browser gets the smallest" {
				if ce == "" {
					t.Fatal("no coding for a browser")
				}
				for _, other := range []string{"gzip", "zstd", "br"} {
					_, b := c.do("GET", CatalogPath, "Accept-Encoding: "+other)
					if len(b) < len(body) {
						t.Errorf("sent %s (%d bytes), %s is %d", ce, len(body), other, len(b))
					}
				}
			} else if ce != tt.encoding {
				t.Fatalf("Content-Encoding %q, want %q", ce, tt.encoding)
			}
			if n, _ := strconv.Atoi(resp.Header.Get("Content-Length")); n != len(body) {
				t.Errorf("Content-Length %d for %d bytes", n, len(body))
			}
			k := contentcoding.Identity
			if ce != "" {
				if k, err = contentcoding.Parse(ce); err != nil {
					t.Fatal(err)
				}
			}
			plain, err := contentcoding.Decompress(k, body, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(plain, file) {
				t.Fatalf("%s body decodes to %d bytes that are not static/catalog.html", k, len(plain))
			}
			etag := resp.Header.Get("ETag")
			if prev, seen := etags[ce]; seen && prev != etag {
				t.Errorf("two ETags for %q: %s and %s", ce, prev, etag)
			}
			etags[ce] = etag
			if ce != "" && len(body) > len(file)*35/100 {
				t.Errorf("%s: %d bytes, more than 0.35 of the page's %d", ce, len(body), len(file))
			}
			// Revalidation names this representation: 304 for its own ETag (HEAD too, with
			// no body), 200 for another coding's.
			for _, method := range []string{"GET", "HEAD"} {
				r2, b2 := c.do(method, CatalogPath, append(h, "If-None-Match: "+etag)...)
				if r2.StatusCode != 304 || len(b2) != 0 || r2.Header.Get("ETag") != etag || r2.Header.Get("Vary") != "Accept-Encoding" {
					t.Errorf("%s revalidation: %d, %d bytes, ETag %q, Vary %q", method, r2.StatusCode, len(b2), r2.Header.Get("ETag"), r2.Header.Get("Vary"))
				}
			}
			if r2, _ := c.do("GET", CatalogPath, append(h, `If-None-Match: "0000000000000000-gzip"`)...); r2.StatusCode != 200 {
				t.Errorf("another ETag: %d, want 200", r2.StatusCode)
			}
			// HEAD says what GET would send, without the body.
			r3, b3 := c.do("HEAD", CatalogPath, h...)
			if r3.Header.Get("Content-Encoding") != ce || r3.Header.Get("Content-Length") != strconv.Itoa(len(body)) || len(b3) != 0 {
				t.Errorf("HEAD: Content-Encoding %q Content-Length %q, %d body bytes", r3.Header.Get("Content-Encoding"), r3.Header.Get("Content-Length"), len(b3))
			}
		})
	}
	if len(etags) != 4 {
		t.Errorf("ETags per coding %v, want 4 distinct", etags)
	}
	seen := map[string]bool{}
	for _, e := range etags {
		if seen[e] {
			t.Errorf("ETag %s shared by two codings: %v", e, etags)
		}
		seen[e] = true
		if !strings.HasPrefix(e, `"`) {
			t.Errorf("ETag %s not strong", e)
		}
	}
}

// TestCatalogPrecompressed checks that the embedded variants are the file compressed
// afresh at the best level: an edit of catalog.html without -update fails here.
func TestCatalogPrecompressed(t *testing.T) {
	file, err := os.ReadFile("static/catalog.html")
	if err != nil {
		t.Fatal(err)
	}
	c := loadCatalog()
	if len(c.encoded) != 3 {
		t.Fatalf("%d encoded variants, want 3", len(c.encoded))
	}
	for i, rep := range c.encoded {
		k := c.offered[i]
		fresh, err := contentcoding.CompressBest(k, file)
		if err != nil {
			t.Fatal(err)
		}
		goldentest.CheckPath(t, "static/catalog.html"+variantExt[k], fresh)
		if !bytes.Equal(fresh, rep.body) && !t.Failed() {
			t.Errorf("%s variant (%d bytes) differs from a fresh compression (%d bytes)", k, len(rep.body), len(fresh))
		}
		if i > 0 && len(rep.body) < len(c.encoded[i-1].body) {
			t.Errorf("variants not smallest first: %s %d after %d", k, len(rep.body), len(c.encoded[i-1].body))
		}
		t.Logf("%s: %d bytes (%.2f of %d)", k, len(rep.body), float64(len(rep.body))/float64(len(file)), len(file))
	}
}
