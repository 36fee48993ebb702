package main

import (
	"bytes"
	"cmp"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/onehost/onehost/internal/contentcoding"
	"github.com/onehost/onehost/internal/seedtest"
)

// TestCompressedRoutes runs the real worker with -compress on the heavy and products
// routes: each coding decodes to the golden body, small and error answers go plain with
// Vary, the feed is untouched, and a worker without -compress never encodes.
func TestCompressedRoutes(t *testing.T) {
	db := seedtest.Path(t)
	heavyGolden, err := os.ReadFile("../../internal/heavy/testdata/patch-123.json")
	if err != nil {
		t.Fatal(err)
	}
	productsGolden, err := os.ReadFile("../../internal/shop/testdata/products-page1.json")
	if err != nil {
		t.Fatal(err)
	}
	on := startWorker(t, "SQLITE_PATH="+db, "COMPRESS=zstd,br,gzip", "COMPRESS_ROUTES=heavy,products")
	off := startWorker(t, "SQLITE_PATH="+seedtest.Path(t))
	heavyReq := func(addr string, accept string) ([]byte, string, string, int) {
		var header []string
		for _, line := range strings.Split(accept, "\n") { // one Accept-Encoding field line each
			header = append(header, "Accept-Encoding", line)
		}
		resp, body := workloadReq(t, addr, "PATCH", "/api/resource/123", "application/json", `{"foo1":"bar"}`, header...)
		if resp.StatusCode == 406 && resp.Status != "406 Not Acceptable" {
			t.Errorf("status line says %q, want 406 Not Acceptable", resp.Status)
		}
		return body, resp.Header.Get("Content-Encoding"), resp.Header.Get("Vary"), resp.StatusCode
	}
	tests := []struct {
		name     string
		accept   string // field lines, split at \n
		encoding string
		status   int
	}{
		// RFC 9110 5.3: two lines are one list, "identity;q=0, br"; the first alone
		// refuses everything offered.
		{"two Accept-Encoding lines", "identity;q=0\nbr", "br", 200},
		{"two lines, the client's q across them", "gzip;q=0.5\nzstd;q=0.1, br;q=0", "gzip", 200},
		{"gzip, as Go's client asks", "gzip", "gzip", 200},
		{"zstd", "zstd", "zstd", 200},
		{"br", "br", "br", 200},
		{"the server's preference", "gzip, br, zstd", "zstd", 200},
		{"the client's q first", "zstd;q=0.1, gzip", "gzip", 200},
		{"identity", "identity", "", 200},
		{"unknown coding", "compress", "", 200},
		{"nothing acceptable", "identity;q=0, compress", "", 406},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, ce, vary, status := heavyReq(on.Addr, tt.accept)
			if status != tt.status || ce != tt.encoding || vary != "Accept-Encoding" {
				t.Fatalf("status %d Content-Encoding %q Vary %q, want %d %q Accept-Encoding", status, ce, vary, tt.status, tt.encoding)
			}
			if status != 200 {
				return
			}
			k := contentcoding.Identity
			if ce != "" {
				k, _ = contentcoding.Parse(ce)
			}
			plain, err := contentcoding.Decompress(k, body, 1<<20)
			if err != nil || !bytes.Equal(plain, heavyGolden) {
				t.Fatalf("%s body (%d bytes) decodes to %d bytes, %v: not the golden answer", ce, len(body), len(plain), err)
			}
			if ce != "" && len(body) > len(heavyGolden)/5 {
				t.Errorf("%s: %d bytes of %d", ce, len(body), len(heavyGolden))
			}
			// Off by default: the same request to a worker without -compress.
			if b, ce, vary, _ := heavyReq(off.Addr, tt.accept); ce != "" || vary != "" || !bytes.Equal(b, heavyGolden) {
				t.Errorf("without -compress: Content-Encoding %q Vary %q, %d bytes", ce, vary, len(b))
			}
		})
	}

	t.Run("products GET and HEAD", func(t *testing.T) {
		resp, body := workloadReq(t, on.Addr, "GET", "/api/products?page=1", "", "", "Accept-Encoding", "br")
		plain, err := contentcoding.Decompress(contentcoding.Br, body, 1<<20)
		if resp.Header.Get("Content-Encoding") != "br" || err != nil || !bytes.Equal(plain, productsGolden) {
			t.Fatalf("Content-Encoding %q, %v", resp.Header.Get("Content-Encoding"), err)
		}
		head, hb := workloadReq(t, on.Addr, "HEAD", "/api/products?page=1", "", "", "Accept-Encoding", "br")
		if head.Header.Get("Content-Encoding") != "br" || head.Header.Get("Content-Length") != strconv.Itoa(len(body)) || len(hb) != 0 {
			t.Errorf("HEAD: Content-Encoding %q Content-Length %q, GET sent %d bytes", head.Header.Get("Content-Encoding"), head.Header.Get("Content-Length"), len(body))
		}
	})
	t.Run("errors and small bodies go plain", func(t *testing.T) {
		resp, body := workloadReq(t, on.Addr, "PATCH", "/api/resource/x", "application/json", `{}`, "Accept-Encoding", "gzip")
		if resp.StatusCode != 400 || resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("Vary") != "Accept-Encoding" || !bytes.HasPrefix(body, []byte(`{"error"`)) {
			t.Errorf("400: Content-Encoding %q Vary %q %s", resp.Header.Get("Content-Encoding"), resp.Header.Get("Vary"), body)
		}
	})
	t.Run("routes not named stay plain", func(t *testing.T) {
		for _, target := range []string{"/feed", "/api/hello"} {
			resp, _ := workloadReq(t, on.Addr, "GET", target, "", "", "Accept-Encoding", "gzip")
			if resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("Vary") != "" {
				t.Errorf("%s: Content-Encoding %q Vary %q", target, resp.Header.Get("Content-Encoding"), resp.Header.Get("Vary"))
			}
		}
	})
}

// TestFeedGoldenCompressed: with the feed's route compressed, every golden answer of the
// challenge's API decodes from gzip, zstd and br to the golden bytes exactly, HEAD says
// GET's length, and below -compress-min an answer goes plain (with Vary). The static
// page, precompressed, revalidates per coding in the same worker: 304 for its own ETag.
func TestFeedGoldenCompressed(t *testing.T) {
	goldens := []struct{ file, target string }{
		{"feed.json", "/feed"},
		{"post-1.json", "/posts/1"},
		{"post-250000.json", "/posts/250000"},
		{"post-500000.json", "/posts/000500000"},
	}
	every := startWorker(t, "SQLITE_PATH="+seedtest.Path(t), "COMPRESS=zstd,br,gzip", "COMPRESS_ROUTES=feed", "COMPRESS_MIN=0")
	dflt := startWorker(t, "SQLITE_PATH="+seedtest.Path(t), "COMPRESS=zstd,br,gzip", "COMPRESS_ROUTES=feed")
	// "identity" is asked for by name: with no Accept-Encoding Go's client would ask for
	// gzip itself and hide the coding.
	accept := func(coding string) string { return cmp.Or(coding, "identity") }
	for _, g := range goldens {
		want := []byte(golden(t, g.file))
		for _, coding := range []string{"", "gzip", "zstd", "br"} {
			t.Run(g.file+"/"+accept(coding), func(t *testing.T) {
				resp, body := workloadReq(t, every.Addr, "GET", g.target, "", "", "Accept-Encoding", accept(coding))
				ce := resp.Header.Get("Content-Encoding")
				if resp.StatusCode != 200 || ce != coding || resp.Header.Get("Vary") != "Accept-Encoding" {
					t.Fatalf("status %d Content-Encoding %q Vary %q; want 200 %q Accept-Encoding", resp.StatusCode, ce, resp.Header.Get("Vary"), coding)
				}
				k := contentcoding.Identity
				if coding != "" {
					k, _ = contentcoding.Parse(coding)
				}
				plain, err := contentcoding.Decompress(k, body, 1<<20)
				if err != nil || !bytes.Equal(plain, want) {
					t.Fatalf("%d %s bytes decode to %d bytes (%v), not the %d of %s", len(body), cmp.Or(coding, "identity"), len(plain), err, len(want), g.file)
				}
				head, hb := workloadReq(t, every.Addr, "HEAD", g.target, "", "", "Accept-Encoding", accept(coding))
				if head.Header.Get("Content-Encoding") != ce || head.Header.Get("Content-Length") != strconv.Itoa(len(body)) || len(hb) != 0 {
					t.Errorf("HEAD: Content-Encoding %q Content-Length %q, GET sent %d bytes", head.Header.Get("Content-Encoding"), head.Header.Get("Content-Length"), len(body))
				}
				// The default threshold, 1 KiB: the feed compressed, the posts not.
				resp, body = workloadReq(t, dflt.Addr, "GET", g.target, "", "", "Accept-Encoding", accept(coding))
				wantCE := coding
				if len(want) < 1024 {
					wantCE = ""
				}
				if resp.Header.Get("Content-Encoding") != wantCE || resp.Header.Get("Vary") != "Accept-Encoding" {
					t.Errorf("default -compress-min, %d bytes: Content-Encoding %q Vary %q, want %q Accept-Encoding", len(want), resp.Header.Get("Content-Encoding"), resp.Header.Get("Vary"), wantCE)
				}
				if plain, err := contentcoding.Decompress(k, body, 1<<20); wantCE == coding && (err != nil || !bytes.Equal(plain, want)) {
					t.Errorf("default -compress-min: body not %s (%v)", g.file, err)
				}
			})
		}
	}
	for _, coding := range []string{"", "gzip", "zstd", "br"} {
		t.Run("static 304/"+accept(coding), func(t *testing.T) {
			resp, _ := workloadReq(t, every.Addr, "GET", "/static/catalog.html", "", "", "Accept-Encoding", accept(coding))
			etag := resp.Header.Get("ETag")
			if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != coding || etag == "" {
				t.Fatalf("status %d Content-Encoding %q ETag %q", resp.StatusCode, resp.Header.Get("Content-Encoding"), etag)
			}
			for _, method := range []string{"GET", "HEAD"} {
				r2, b2 := workloadReq(t, every.Addr, method, "/static/catalog.html", "", "", "Accept-Encoding", accept(coding), "If-None-Match", etag)
				if r2.StatusCode != 304 || len(b2) != 0 || r2.Header.Get("ETag") != etag || r2.Header.Get("Vary") != "Accept-Encoding" {
					t.Errorf("%s If-None-Match %s: %d, %d bytes, ETag %q, Vary %q", method, etag, r2.StatusCode, len(b2), r2.Header.Get("ETag"), r2.Header.Get("Vary"))
				}
			}
		})
	}
}
