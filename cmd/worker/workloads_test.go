package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/onehost/onehost/internal/seedtest"
	"github.com/onehost/onehost/internal/shop"
)

// workloadReq sends one request to the worker at addr and returns the response with its
// body read.
func workloadReq(t *testing.T, addr, method, target, ctype, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+addr+target, rd)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1]) // a name given twice: two field lines
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// TestWorkloadRoutes runs the real worker and checks that every workload route reaches its
// handler, answers what the packages' golden files pin, and that the feed API keeps every
// other path, its 404 and 405 included.
func TestWorkloadRoutes(t *testing.T) { forTransports(t, testWorkloadRoutes) }

func testWorkloadRoutes(t *testing.T, transport string) {
	db := seedtest.Path(t)
	w := startWorker(t, "TRANSPORT="+transport, "SQLITE_PATH="+db)
	if _, err := os.Stat(filepath.Join(filepath.Dir(db), "products.db")); err != nil {
		t.Fatalf("no products database beside the feed database: %v", err)
	}
	heavyGolden, err := os.ReadFile("../../internal/heavy/testdata/patch-123.json")
	if err != nil {
		t.Fatal(err)
	}
	productsGolden, err := os.ReadFile("../../internal/shop/testdata/products-page1.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, method, target, ctype, body string
		status                            int
		want                              string // exact body, or "" to skip
	}{
		{"heavy", "PATCH", "/api/resource/123", "application/json", `{"foo1":"bar"}`, 200, string(heavyGolden)},
		{"heavy bad id", "PATCH", "/api/resource/x", "application/json", `{}`, 400, `{"error":"invalid id: want an integer from 1 to 9007199254740991"}`},
		{"heavy bad size", "PATCH", "/api/resource/1?size=0", "application/json", `{}`, 400, `{"error":"invalid query parameter size: want an integer from 1 to 100"}`},
		{"heavy text body", "PATCH", "/api/resource/1", "text/plain", `{}`, 415, `{"error":"unsupported content type: want application/json"}`},
		{"heavy not object", "PATCH", "/api/resource/1", "application/json", `[]`, 400, `{"error":"request body must be a JSON object"}`},
		{"heavy GET", "GET", "/api/resource/1", "", "", 405, `{"error":"method not allowed"}`},
		{"hello", "GET", "/api/hello", "", "", 200, `{"hello":"world"}`},
		{"products", "GET", "/api/products?page=1", "", "", 200, string(productsGolden)},
		{"products bad page", "GET", "/api/products?page=251", "", "", 400, `{"error":"invalid query parameter page: want an integer from 1 to 250"}`},
		{"products page", "GET", "/products?page=1", "", "", 200, ""},
		{"catalog", "GET", "/static/catalog.html", "", "", 200, ""},
		{"feed unchanged", "GET", "/feed", "", "", 200, ""},
		{"feed 404 unchanged", "GET", "/api/other", "", "", 404, `{"error":"not found"}`},
		{"feed 405 unchanged", "DELETE", "/feed", "", "", 405, `{"error":"method not allowed"}`},
		{"prefix is not a route", "GET", "/api/hello/x", "", "", 404, `{"error":"not found"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := workloadReq(t, w.Addr, tt.method, tt.target, tt.ctype, tt.body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d (%.200s), want %d", resp.StatusCode, body, tt.status)
			}
			if tt.want != "" && string(body) != tt.want {
				t.Errorf("body %.300s, want %.300s", body, tt.want)
			}
		})
	}

	// The server's own 16 KiB limit answers a larger PATCH with 413.
	big := `{"a":"` + strings.Repeat("x", 16<<10) + `"}`
	if resp, body := workloadReq(t, w.Addr, "PATCH", "/api/resource/1", "application/json", big); resp.StatusCode != 413 {
		t.Errorf("17 KB body: %d %s, want 413", resp.StatusCode, body)
	}
	// The catalogue revalidates.
	resp, _ := workloadReq(t, w.Addr, "GET", "/static/catalog.html", "", "")
	if r2, body := workloadReq(t, w.Addr, "GET", "/static/catalog.html", "", "", "If-None-Match", resp.Header.Get("ETag")); r2.StatusCode != 304 || len(body) != 0 {
		t.Errorf("revalidation: %d with %d bytes, want 304", r2.StatusCode, len(body))
	}
	// The rendered page escapes the script name.
	if _, body := workloadReq(t, w.Addr, "GET", "/products", "", ""); !bytes.Contains(body, []byte("&lt;script&gt;")) || bytes.Contains(body, []byte("<script>")) {
		t.Error("the products page does not escape the script name")
	}
}

// TestWorkersShareProducts starts three workers at once on one missing PRODUCTS_PATH:
// one generates it, all serve it.
func TestWorkersShareProducts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three workers")
	}
	products := filepath.Join(t.TempDir(), "shared-products.db")
	dbs := []string{seedtest.Path(t), seedtest.Path(t), seedtest.Path(t)}
	workers := make([]*worker, len(dbs))
	var wg sync.WaitGroup
	for i, db := range dbs {
		wg.Go(func() { workers[i] = startWorker(goTB{t}, "SQLITE_PATH="+db, "PRODUCTS_PATH="+products) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow() // startWorker said why
	}
	generated := 0
	for i, w := range workers {
		if strings.Contains(w.Logs(), "products database generated") {
			generated++
		}
		if resp, body := workloadReq(t, w.Addr, "GET", "/api/products?page=250", "", ""); resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"id":5000`)) {
			t.Errorf("worker %d: %d %.100s", i, resp.StatusCode, body)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(dbs[i]), "products.db")); err == nil {
			t.Errorf("worker %d made a products.db beside its feed database despite PRODUCTS_PATH", i)
		}
	}
	if generated != 1 {
		t.Errorf("%d workers generated the products database, want 1", generated)
	}
}

// goTB lets a helper that may call Fatal run on a goroutine of its own: Fatal reports the
// failure (Errorf is safe anywhere) and ends that goroutine, not the test's.
type goTB struct{ testing.TB }

func (g goTB) Fatal(args ...any) {
	g.TB.Helper()
	g.TB.Error(args...)
	runtime.Goexit()
}

func (g goTB) Fatalf(format string, args ...any) {
	g.TB.Helper()
	g.TB.Errorf(format, args...)
	runtime.Goexit()
}

func TestSeedProducts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.db")
	var out bytes.Buffer
	for i, want := range []string{"written", "exists"} {
		out.Reset()
		if err := run(context.Background(), []string{"seed-products", "-db", path}, func(string) string { return "" }, &out, io.Discard); err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		sum, err := shop.ProductsHash(path)
		if err != nil {
			t.Fatal(err)
		}
		if s := out.String(); !strings.Contains(s, want) || !strings.Contains(s, sum) {
			t.Errorf("run %d printed %q, want %q and the hash %s", i+1, s, want, sum)
		}
	}
	if err := run(context.Background(), []string{"seed-products"}, func(string) string { return "" }, io.Discard, io.Discard); err == nil {
		t.Error("seed-products without -db succeeded")
	}
}
