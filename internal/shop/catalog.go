package shop

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"slices"
	"time"

	"github.com/onehost/onehost/internal/contentcoding"
)

// The page and its precompressed variants (made by `go test ./internal/shop -run
// TestCatalogPrecompressed -update`; nginx's gzip_static serves the same .gz): compressing
// at the best levels takes 25-250 ms, too long for every worker's start.
//
//go:embed static/catalog.html static/catalog.html.gz static/catalog.html.zst static/catalog.html.br
var static embed.FS

// variantExt is the file suffix of each coding's precompressed page, as nginx's
// gzip_static and brotli_static look for them.
var variantExt = map[contentcoding.Coding]string{contentcoding.Gzip: ".gz", contentcoding.Zstd: ".zst", contentcoding.Br: ".br"}

// CatalogPath is the route of the static page.
const CatalogPath = "/static/catalog.html"

// CatalogModified is the static page's Last-Modified time. An embedded file has no
// modification time, and the build time would change with every build (and differ
// between workers built apart), so it is a constant: change it when the file changes.
// A test pins the file's hash next to it, so an edit of the file without a new time fails.
var CatalogModified = time.Date(2025, time.June, 1, 0, 0, 0, 0, time.UTC)

// catalogCacheControl lets browsers and proxies reuse the page for five minutes, then
// revalidate it with If-None-Match.
const catalogCacheControl = "public, max-age=300"

// catalog is the static page and its validators, computed once at start-up, with the
// page compressed ahead in every coding at its best level (nginx's gzip_static): a
// compressed answer costs what a plain one does, a copy of bytes.
type catalog struct {
	plain        representation
	encoded      []representation       // smallest first: the server's preference
	offered      []contentcoding.Coding // encoded's codings, in the same order
	lastModified string                 // CatalogModified in the IMF-fixdate form
}

// representation is the page in one content coding.
type representation struct {
	coding   contentcoding.Coding
	body     []byte
	encoding string // the Content-Encoding value; "" for identity
	// etag is strong and differs per coding (RFC 9110 8.8.3: a validator names one
	// representation): the first 16 hex digits of the page's SHA-256, quoted, with
	// "-gzip", "-zstd" or "-br" inside the quotes for an encoded one.
	etag string
}

func loadCatalog() catalog {
	body, err := static.ReadFile("static/catalog.html")
	if err != nil {
		panic("shop: embedded catalog missing: " + err.Error()) // a build error, not a runtime one
	}
	sum := sha256.Sum256(body)
	tag := hex.EncodeToString(sum[:8])
	c := catalog{
		plain:        representation{body: body, etag: `"` + tag + `"`},
		lastModified: CatalogModified.UTC().Format(httpTime),
	}
	for _, k := range []contentcoding.Coding{contentcoding.Gzip, contentcoding.Zstd, contentcoding.Br} {
		enc, err := static.ReadFile("static/catalog.html" + variantExt[k])
		if err != nil {
			panic("shop: embedded catalog missing: " + err.Error())
		}
		c.encoded = append(c.encoded, representation{coding: k, body: enc, encoding: k.String(), etag: `"` + tag + "-" + k.String() + `"`})
	}
	// The page is compressed once, so the smallest coding is the best to send; a client's
	// q-values still come first (contentcoding.Negotiate).
	slices.SortStableFunc(c.encoded, func(a, b representation) int { return cmp.Compare(len(a.body), len(b.body)) })
	for _, r := range c.encoded {
		c.offered = append(c.offered, r.coding)
	}
	return c
}

// choose returns the representation the request's Accept-Encoding asks for, false when
// it refuses every one (identity;q=0 and no coding we have).
func (c *catalog) choose(acceptEncoding []byte) (*representation, bool) {
	k, ok := contentcoding.Negotiate(acceptEncoding, c.offered)
	if !ok {
		return nil, false
	}
	if k == contentcoding.Identity {
		return &c.plain, true
	}
	i := slices.Index(c.offered, k) // Negotiate answers only what is offered
	return &c.encoded[i], true
}

// httpTime is the IMF-fixdate layout of HTTP dates (RFC 9110 5.6.7).
const httpTime = "Mon, 02 Jan 2006 15:04:05 GMT"

// notModified reports whether a GET or HEAD of the representation tagged etag with these
// request headers is answered 304
// (RFC 9110 13.1.2 and 13.1.3, evaluated in the order of 13.2.2): If-None-Match, when
// present, decides alone, by weak comparison; otherwise If-Modified-Since does, when it
// is a valid HTTP date not before the page's Last-Modified.
func (c *catalog) notModified(etag string, ifNoneMatch, ifModifiedSince []byte) bool {
	if ifNoneMatch != nil {
		return etagListMatches(ifNoneMatch, etag)
	}
	if ifModifiedSince == nil {
		return false
	}
	if string(ifModifiedSince) == c.lastModified {
		return true // what we sent, echoed back: the usual case, no parsing
	}
	t, ok := parseHTTPTime(ifModifiedSince)
	return ok && !CatalogModified.After(t)
}

// etagListMatches reports whether the If-None-Match value list ("*", or entity tags
// separated by commas) matches etag under the weak comparison: W/ is ignored.
func etagListMatches(list []byte, etag string) bool {
	for len(list) > 0 {
		var item []byte
		if i := bytes.IndexByte(list, ','); i >= 0 {
			item, list = list[:i], list[i+1:]
		} else {
			item, list = list, nil
		}
		item = bytes.Trim(item, " \t")
		if string(item) == "*" {
			return true
		}
		item = bytes.TrimPrefix(item, []byte("W/"))
		if string(item) == etag {
			return true
		}
	}
	return false
}

// parseHTTPTime parses the three HTTP date forms (RFC 9110 5.6.7): IMF-fixdate,
// RFC 850 and asctime.
func parseHTTPTime(b []byte) (time.Time, bool) {
	for _, layout := range [...]string{httpTime, "Monday, 02-Jan-06 15:04:05 GMT", time.ANSIC} {
		if t, err := time.Parse(layout, string(b)); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}
