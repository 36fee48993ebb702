package shop

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/goldentest"
	"github.com/onehost/onehost/internal/http1"
)

// wantCatalogHash pins static/catalog.html together with CatalogModified: when the file
// changes, change CatalogModified too (a later date), then this hash.
const wantCatalogHash = "0224d2f004bae5c2801ed7052044136406ac8d99efe44c638507c72d77d203de"

func openTestStore(t testing.TB) *Store {
	t.Helper()
	s, err := OpenStore(context.Background(), testProducts(t), StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// serve runs the handler in an http1.Server on port 0 and returns its address.
func serve(t *testing.T) string {
	t.Helper()
	srv := &http1.Server{Handler: NewHandler(Config{Store: openTestStore(t)})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// client sends requests on one keep-alive connection.
type client struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t, c, bufio.NewReader(c)}
}

// do sends method target with the extra header lines and returns the response with its
// body read.
func (c *client) do(method, target string, headers ...string) (*http.Response, []byte) {
	c.t.Helper()
	fmt.Fprintf(c.c, "%s %s HTTP/1.1\r\nHost: x\r\n%s\r\n", method, target, strings.Join(append(headers, ""), "\r\n"))
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		c.t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp, body
}

func TestRoutes(t *testing.T) {
	c := dial(t, serve(t))
	pageErr := `{"error":"invalid query parameter page: want an integer from 1 to 250"}`
	tests := []struct {
		name, method, target string
		status               int
		ctype                string
		want                 string // exact body, or "" to skip
	}{
		{"hello", "GET", "/api/hello", 200, "application/json", `{"hello":"world"}`},
		{"hello ignores query", "GET", "/api/hello?x=1", 200, "application/json", `{"hello":"world"}`},
		{"hello HEAD", "HEAD", "/api/hello", 200, "application/json", ""},
		{"post hello", "POST", "/api/hello", 405, "application/json", `{"error":"method not allowed"}`},
		{"products default page", "GET", "/api/products", 200, "application/json", ""},
		{"products page 250", "GET", "/api/products?page=250", 200, "application/json", ""},
		{"products escaped page", "GET", "/api/products?p%61ge=%32", 200, "application/json", ""},
		{"products other params", "GET", "/api/products?sort=x&page=2&", 200, "application/json", ""},
		{"products page 0", "GET", "/api/products?page=0", 400, "application/json", pageErr},
		{"products page 251", "GET", "/api/products?page=251", 400, "application/json", pageErr},
		{"products page word", "GET", "/api/products?page=two", 400, "application/json", pageErr},
		{"products page negative", "GET", "/api/products?page=-1", 400, "application/json", pageErr},
		{"products page plus", "GET", "/api/products?page=%2B1", 400, "application/json", pageErr},
		{"products page empty", "GET", "/api/products?page=", 400, "application/json", pageErr},
		{"products page bare", "GET", "/api/products?page", 400, "application/json", pageErr},
		{"products page huge", "GET", "/api/products?page=99999999999999999999", 400, "application/json", pageErr},
		{"products page twice", "GET", "/api/products?page=1&page=2", 400, "application/json", `{"error":"invalid query parameter page: given more than once"}`},
		{"products delete", "DELETE", "/api/products", 405, "application/json", `{"error":"method not allowed"}`},
		{"page html", "GET", "/products?page=2", 200, "text/html; charset=utf-8", ""},
		{"page html bad page", "GET", "/products?page=0", 400, "text/plain; charset=utf-8", "invalid query parameter page: want an integer from 1 to 250\n"},
		{"page html post", "POST", "/products", 405, "application/json", `{"error":"method not allowed"}`},
		{"catalog", "GET", "/static/catalog.html", 200, "text/html; charset=utf-8", ""},
		{"catalog put", "PUT", "/static/catalog.html", 405, "application/json", `{"error":"method not allowed"}`},
		{"other path", "GET", "/static/other.html", 404, "application/json", `{"error":"not found"}`},
		{"trailing slash", "GET", "/products/", 404, "application/json", `{"error":"not found"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := c.do(tt.method, tt.target)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tt.status)
			}
			if got := resp.Header.Get("Content-Type"); got != tt.ctype {
				t.Errorf("Content-Type %q, want %q", got, tt.ctype)
			}
			if tt.want != "" && string(body) != tt.want {
				t.Errorf("body %q, want %q", body, tt.want)
			}
			if tt.method == "HEAD" && (len(body) != 0 || resp.ContentLength <= 0) {
				t.Errorf("HEAD: %d body bytes, Content-Length %d", len(body), resp.ContentLength)
			}
			if resp.StatusCode == 405 && resp.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("Allow %q", resp.Header.Get("Allow"))
			}
			if resp.StatusCode == 200 && tt.method == "GET" && strings.HasPrefix(tt.ctype, "application/json") && !json.Valid(body) {
				t.Errorf("invalid JSON: %s", body)
			}
		})
	}
}

// TestProductsJSON: the right twenty rows of each page, page 1 pinned by a golden file.
func TestProductsJSON(t *testing.T) {
	c := dial(t, serve(t))
	all := GenerateProducts()
	for _, page := range []int{1, 2, 137, 250} {
		_, body := c.do("GET", fmt.Sprintf("/api/products?page=%d", page))
		var got struct {
			Page, PerPage, Total, Pages int
			Products                    []Product
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		if got.Page != page || got.Total != ProductCount || len(got.Products) != PageSize {
			t.Fatalf("page %d: page %d, total %d, %d products", page, got.Page, got.Total, len(got.Products))
		}
		var raw struct{ Products []map[string]any }
		json.Unmarshal(body, &raw)
		for i, p := range got.Products {
			want := all[(page-1)*PageSize+i]
			p.PriceCents = int64(raw.Products[i]["price_cents"].(float64))
			if p != want {
				t.Errorf("page %d row %d: %+v, want %+v", page, i, p, want)
			}
			if raw.Products[i]["price"] != fmt.Sprintf("%d.%02d", want.PriceCents/100, want.PriceCents%100) {
				t.Errorf("price %v for %d cents", raw.Products[i]["price"], want.PriceCents)
			}
		}
		if page == 1 {
			goldentest.Check(t, "products-page1.json", body)
			if !bytes.Contains(body, []byte(`"\u003cscript\u003ealert(\"xss\")\u003c/script\u003e Deluxe Kettle"`)) {
				t.Error("the script name is not escaped in JSON")
			}
		}
	}
}

// TestProductsPageEscapes: html/template escapes the names on the rendered page.
func TestProductsPageEscapes(t *testing.T) {
	c := dial(t, serve(t))
	_, body := c.do("GET", "/products?page=1")
	page := string(body)
	for _, want := range []string{
		`&lt;script&gt;alert(&#34;xss&#34;)&lt;/script&gt; Deluxe Kettle`,
		`Salt &amp; Pepper Mill Set`,
		`Bob&#39;s &#34;Best&#34; Bread Bin`,
		`<title>Products, page 1 of 250</title>`,
		`<a href="/products?page=2" rel="next">Next</a>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page 1 lacks %s", want)
		}
	}
	if strings.Contains(page, "<script>") || strings.Contains(page, `rel="prev"`) {
		t.Errorf("unescaped script or a previous link on page 1:\n%s", page)
	}
	if n := strings.Count(page, "<tr id="); n != PageSize {
		t.Errorf("%d rows, want %d", n, PageSize)
	}
	goldentest.Check(t, "products-page1.html", body)
	_, last := c.do("GET", "/products?page=250")
	if s := string(last); !strings.Contains(s, `rel="prev"`) || strings.Contains(s, `rel="next"`) || !strings.Contains(s, `id="p5000"`) {
		t.Errorf("page 250: wrong links or rows")
	}
}

// TestCatalogConditional covers the validators and every 304 rule.
func TestCatalogConditional(t *testing.T) {
	c := dial(t, serve(t))
	resp, body := c.do("GET", CatalogPath)
	etag, lm := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	file, err := os.ReadFile("static/catalog.html")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, file) {
		t.Fatal("the served page is not static/catalog.html")
	}
	if len(body) < 6500 || len(body) > 6900 {
		t.Errorf("catalog is %d bytes, want about 6,700", len(body))
	}
	sum := sha256.Sum256(file)
	if want := `"` + hex.EncodeToString(sum[:8]) + `"`; etag != want {
		t.Errorf("ETag %s, want %s", etag, want)
	}
	if lm != "Sun, 01 Jun 2025 00:00:00 GMT" || resp.Header.Get("Cache-Control") != "public, max-age=300" {
		t.Errorf("Last-Modified %q, Cache-Control %q", lm, resp.Header.Get("Cache-Control"))
	}
	if got := hex.EncodeToString(sum[:]); got != wantCatalogHash {
		t.Errorf("static/catalog.html changed (hash %s): move CatalogModified forward, then update wantCatalogHash", got)
	}
	weak := "W/" + etag
	tests := []struct {
		name    string
		method  string
		headers []string
		status  int
	}{
		{"plain GET", "GET", nil, 200},
		{"matching etag", "GET", []string{"If-None-Match: " + etag}, 304},
		{"matching etag HEAD", "HEAD", []string{"If-None-Match: " + etag}, 304},
		{"weak etag matches", "GET", []string{"If-None-Match: " + weak}, 304},
		{"etag in a list", "GET", []string{`If-None-Match: "a", ` + etag + ` ,"b"`}, 304},
		{"star", "GET", []string{"If-None-Match: *"}, 304},
		{"other etag", "GET", []string{`If-None-Match: "0000000000000000"`}, 200},
		{"unquoted etag", "GET", []string{"If-None-Match: " + strings.Trim(etag, `"`)}, 200},
		{"other etag wins over date", "GET", []string{`If-None-Match: "x"`, "If-Modified-Since: " + lm}, 200},
		{"same date", "GET", []string{"If-Modified-Since: " + lm}, 304},
		{"later date", "GET", []string{"If-Modified-Since: Mon, 02 Jun 2025 00:00:00 GMT"}, 304},
		{"earlier date", "GET", []string{"If-Modified-Since: Sat, 31 May 2025 23:59:59 GMT"}, 200},
		{"RFC 850 date", "GET", []string{"If-Modified-Since: Sunday, 01-Jun-25 00:00:00 GMT"}, 304},
		{"asctime date", "GET", []string{"If-Modified-Since: Sun Jun  1 00:00:00 2025"}, 304},
		{"bad date", "GET", []string{"If-Modified-Since: yesterday"}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := c.do(tt.method, CatalogPath, tt.headers...)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if resp.Header.Get("ETag") != etag || resp.Header.Get("Last-Modified") != lm || resp.Header.Get("Cache-Control") == "" {
				t.Errorf("validators missing: %v", resp.Header)
			}
			switch {
			case tt.status == 304 && len(body) != 0:
				t.Errorf("304 with a %d-byte body", len(body))
			case tt.status == 200 && tt.method == "GET" && len(body) != len(file):
				t.Errorf("200 with %d bytes, want %d", len(body), len(file))
			}
		})
	}
}

func TestStoreAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	s := openTestStore(t)
	buf := make([]byte, 0, 8<<10)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if buf, err = s.AppendPageJSON(buf[:0], 3); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("AppendPageJSON: %.1f allocations, want 0", allocs)
	}
	c := loadCatalog()
	etag := c.plain.etag
	inm, ims := []byte(`"x", W/`+etag), []byte(c.lastModified)
	allocs = testing.AllocsPerRun(100, func() {
		if !c.notModified(etag, inm, nil) || !c.notModified(etag, nil, ims) {
			t.Fatal("not 304")
		}
	})
	if allocs != 0 {
		t.Errorf("catalog revalidation: %.1f allocations, want 0", allocs)
	}
	ae := []byte("gzip, deflate, br, zstd")
	allocs = testing.AllocsPerRun(100, func() {
		if rep, ok := c.choose(ae); !ok || rep.encoding == "" {
			t.Fatal("no coding chosen")
		}
	})
	if allocs != 0 {
		t.Errorf("catalog negotiation: %.1f allocations, want 0", allocs)
	}
}

func TestStoreClosed(t *testing.T) {
	s, err := OpenStore(context.Background(), testProducts(t), StoreOptions{Conns: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.AppendPageJSON(nil, 1); err == nil {
		t.Error("a closed store answered")
	}
}

func FuzzParsePage(f *testing.F) {
	for _, s := range []string{"", "page=1", "page=250", "p%61ge=%32%30", "page=1&page=2", "page=%zz", "x=1&page=07"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		page, err := parsePage([]byte(q))
		if err == nil && (page < 1 || page > Pages) {
			t.Fatalf("parsePage(%q) = %d", q, page)
		}
	})
}

func FuzzNotModified(f *testing.F) {
	c := loadCatalog()
	etag := c.plain.etag
	f.Add(etag, "")
	f.Add("W/"+etag+", *", c.lastModified)
	f.Add("", "Sunday, 01-Jun-25 00:00:00 GMT")
	f.Fuzz(func(t *testing.T, inm, ims string) {
		var a, b []byte
		if inm != "" {
			a = []byte(inm)
		}
		if ims != "" {
			b = []byte(ims)
		}
		got := c.notModified(etag, a, b)
		if a == nil && b == nil && got {
			t.Fatal("304 without a condition")
		}
		if a != nil && !strings.Contains(inm, "*") && !strings.Contains(inm, etag) && got {
			t.Fatalf("304 for If-None-Match %q", inm)
		}
	})
}

// BenchmarkProductsJSON shows what OFFSET costs: SQLite steps over the skipped rows.
func BenchmarkProductsJSON(b *testing.B) {
	s := openTestStore(b)
	for _, page := range []int{1, 125, 250} {
		b.Run(fmt.Sprintf("page=%d", page), func(b *testing.B) {
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if buf, err = s.AppendPageJSON(buf[:0], page); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkProductsHTML(b *testing.B) {
	h := NewHandler(Config{Store: openTestStore(b)})
	var w http1.Response
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w = http1.Response{Body: w.Body[:0]}
		h.servePage(&w, 1+i%Pages)
	}
}

// BenchmarkCatalog: its allocations are the fresh Response's header buffer (AddHeader on
// a zero Response); the server resets and reuses one per connection.
func BenchmarkCatalog(b *testing.B) {
	h := NewHandler(Config{Store: openTestStore(b)})
	var w http1.Response
	var r http1.Request
	b.ReportAllocs()
	for b.Loop() {
		w = http1.Response{Body: w.Body[:0]}
		h.serveCatalog(&w, &r)
	}
}
