package shop

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"time"
)

//go:embed static/catalog.html
var static embed.FS

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

// catalog is the static page and its validators, computed once at start-up.
type catalog struct {
	body         []byte
	etag         string // strong: the first 16 hex digits of the content's SHA-256, quoted
	lastModified string // CatalogModified in the IMF-fixdate form
}

func loadCatalog() catalog {
	body, err := static.ReadFile("static/catalog.html")
	if err != nil {
		panic("shop: embedded catalog missing: " + err.Error()) // a build error, not a runtime one
	}
	sum := sha256.Sum256(body)
	return catalog{
		body:         body,
		etag:         `"` + hex.EncodeToString(sum[:8]) + `"`,
		lastModified: CatalogModified.UTC().Format(httpTime),
	}
}

// httpTime is the IMF-fixdate layout of HTTP dates (RFC 9110 5.6.7).
const httpTime = "Mon, 02 Jan 2006 15:04:05 GMT"

// notModified reports whether a GET or HEAD with these request headers is answered 304
// (RFC 9110 13.1.2 and 13.1.3, evaluated in the order of 13.2.2): If-None-Match, when
// present, decides alone, by weak comparison; otherwise If-Modified-Since does, when it
// is a valid HTTP date not before the page's Last-Modified.
func (c *catalog) notModified(ifNoneMatch, ifModifiedSince []byte) bool {
	if ifNoneMatch != nil {
		return etagListMatches(ifNoneMatch, c.etag)
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
