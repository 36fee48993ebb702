package shop

import (
	"bytes"
	"errors"
	"html/template"
	"sync"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/http1"
	"github.com/onehost/onehost/internal/urlquery"
)

// The routes of the package.
const (
	HelloPath       = "/api/hello"
	ProductsAPIPath = "/api/products"
	ProductsPath    = "/products"
)

// Serves reports whether path is one of this package's routes.
func Serves(path []byte) bool {
	switch string(path) {
	case CatalogPath, HelloPath, ProductsAPIPath, ProductsPath:
		return true
	}
	return false
}

// Config configures NewHandler. Store is required.
type Config struct {
	Store *Store
	// Logger receives unexpected errors (the ones answered 500). nil: no logs.
	Logger *zap.Logger
}

// Handler serves the package's routes.
type Handler struct {
	store   *Store
	log     *zap.Logger
	catalog catalog
	pages   sync.Pool // *pageData: the Products slice is reused
}

// NewHandler returns the handler.
func NewHandler(cfg Config) *Handler {
	h := &Handler{store: cfg.Store, log: cfg.Logger, catalog: loadCatalog()}
	if h.log == nil {
		h.log = zap.NewNop()
	}
	h.pages.New = func() any { return &pageData{Products: make([]Product, 0, PageSize)} }
	return h
}

// Errors answered with their text; every message is a constant needing no escaping.
var (
	errNotFound         = errors.New("not found")
	errMethodNotAllowed = errors.New("method not allowed")
	errPage             = errors.New("invalid query parameter page: want an integer from 1 to 250")
	errPageTwice        = errors.New("invalid query parameter page: given more than once")
	errNotAcceptable    = errors.New("not acceptable: Accept-Encoding refuses identity and every coding offered (br, zstd, gzip)")
)

// ServeHTTP1 answers one request. Every route is GET (and so HEAD).
func (h *Handler) ServeHTTP1(w *http1.Response, r *http1.Request) {
	if !Serves(r.Path) {
		h.fail(w, errNotFound, false)
		return
	}
	if !r.MethodIs("GET") && !r.MethodIs("HEAD") {
		w.AddHeader("Allow", "GET, HEAD")
		h.fail(w, errMethodNotAllowed, false)
		return
	}
	switch string(r.Path) {
	case HelloPath:
		w.Body = append(w.Body[:0], `{"hello":"world"}`...)
	case CatalogPath:
		h.serveCatalog(w, r)
	case ProductsAPIPath:
		page, err := parsePage(r.Query)
		if err != nil {
			h.fail(w, err, false)
			return
		}
		body, err := h.store.AppendPageJSON(w.Body[:0], page)
		if err != nil {
			h.fail(w, err, false)
			return
		}
		w.Body = body
	case ProductsPath:
		page, err := parsePage(r.Query)
		if err != nil {
			h.fail(w, err, true)
			return
		}
		h.servePage(w, page)
	}
}

func (h *Handler) serveCatalog(w *http1.Response, r *http1.Request) {
	c := &h.catalog
	// Every answer of this route depends on Accept-Encoding, a 406 and a 304 too: a cache
	// must not hand one client's br to another that cannot decode it.
	w.AddHeader("Vary", "Accept-Encoding")
	var ae, inm [256]byte // the joins of fields sent on several lines; on the stack
	rep, ok := c.choose(r.HeaderList(ae[:0], "Accept-Encoding"))
	if !ok {
		h.fail(w, errNotAcceptable, false)
		return
	}
	w.AddHeader("ETag", rep.etag)
	w.AddHeader("Last-Modified", c.lastModified)
	w.AddHeader("Cache-Control", catalogCacheControl)
	if c.notModified(rep.etag, r.HeaderList(inm[:0], "If-None-Match"), r.Header("If-Modified-Since")) {
		w.Status = 304
		return
	}
	if rep.encoding != "" {
		w.AddHeader("Content-Encoding", rep.encoding)
	}
	w.ContentType = "text/html; charset=utf-8"
	// A copy: the response buffer is the connection's, reused and appended to.
	w.Body = append(w.Body[:0], rep.body...)
}

// pageData is what the products page template renders.
type pageData struct {
	Page, Pages int
	Products    []Product
}

// Prev and Next are the neighbouring pages, 0 at the ends.
func (d *pageData) Prev() int {
	if d.Page > 1 {
		return d.Page - 1
	}
	return 0
}

func (d *pageData) Next() int {
	if d.Page < d.Pages {
		return d.Page + 1
	}
	return 0
}

// Price formats the product's price: 1234 -> "€12.34".
func (p Product) Price() string {
	var b [24]byte
	return string(appendPrice(append(b[:0], "€"...), p.PriceCents))
}

// pageTemplate is the products page. html/template escapes every value for its context.
var pageTemplate = template.Must(template.New("products").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Products, page {{.Page}} of {{.Pages}}</title>
</head>
<body>
<h1>Products</h1>
<table>
<thead><tr><th>SKU</th><th>Name</th><th>Category</th><th>Price</th><th>Stock</th></tr></thead>
<tbody>
{{range .Products}}<tr id="p{{.ID}}"><td>{{.SKU}}</td><td>{{.Name}}</td><td>{{.Category}}</td><td>{{.Price}}</td><td>{{.Stock}}</td></tr>
{{end}}</tbody>
</table>
<nav>{{with .Prev}}<a href="/products?page={{.}}" rel="prev">Previous</a> {{end}}Page {{.Page}} of {{.Pages}}{{with .Next}} <a href="/products?page={{.}}" rel="next">Next</a>{{end}}</nav>
</body>
</html>
`))

// bodyWriter appends to a response body.
type bodyWriter struct{ w *http1.Response }

func (b bodyWriter) Write(p []byte) (int, error) {
	b.w.Body = append(b.w.Body, p...)
	return len(p), nil
}

func (h *Handler) servePage(w *http1.Response, page int) {
	d := h.pages.Get().(*pageData)
	defer h.pages.Put(d)
	var err error
	d.Page, d.Pages = page, Pages
	if d.Products, err = h.store.Page(d.Products, page); err != nil {
		h.fail(w, err, true)
		return
	}
	w.Body = w.Body[:0]
	if err := pageTemplate.Execute(bodyWriter{w}, d); err != nil {
		h.fail(w, err, true)
		return
	}
	w.ContentType = "text/html; charset=utf-8"
}

// fail is the one place where errors become statuses; anything unexpected is logged and
// answered 500 without detail. html answers in plain text (the route serves HTML, so a
// JSON error would be out of place).
func (h *Handler) fail(w *http1.Response, err error, html bool) {
	status := 500
	switch {
	case errors.Is(err, errNotFound):
		status = 404
	case errors.Is(err, errMethodNotAllowed):
		status = 405
	case errors.Is(err, errPage), errors.Is(err, errPageTwice):
		status = 400
	case errors.Is(err, errNotAcceptable):
		status = 406
	}
	msg := err.Error()
	if status == 500 {
		h.log.Error("request failed", zap.Error(err))
		msg = "internal server error"
	}
	if html {
		w.Status = status
		w.ContentType = "text/plain; charset=utf-8"
		w.Body = append(append(w.Body[:0], msg...), '\n')
		return
	}
	w.Error(status, msg)
}

// parsePage finds the page parameter in the query string q (percent-encoded, '+' a
// space): 1..Pages, default 1. Other parameters, and names that do not decode, are
// ignored; page given twice is an error.
func parsePage(q []byte) (int, error) {
	page, seen := 1, false
	for len(q) > 0 {
		var pair []byte
		if i := bytes.IndexByte(q, '&'); i >= 0 {
			pair, q = q[:i], q[i+1:]
		} else {
			pair, q = q, nil
		}
		rawName, rawValue, hasValue := bytes.Cut(pair, []byte{'='})
		var nb, vb [8]byte
		if name, fits, valid := urlquery.Unescape(nb[:0], rawName); !fits || !valid || string(name) != "page" {
			continue
		}
		if seen {
			return 0, errPageTwice
		}
		seen = true
		v, fits, valid := urlquery.Unescape(vb[:0], rawValue)
		if !fits || !valid || !hasValue || len(v) == 0 {
			return 0, errPage
		}
		n := 0
		for _, c := range v {
			if c < '0' || c > '9' {
				return 0, errPage
			}
			n = n*10 + int(c-'0')
			if n > Pages {
				return 0, errPage
			}
		}
		if n < 1 {
			return 0, errPage
		}
		page = n
	}
	return page, nil
}
