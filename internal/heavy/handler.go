package heavy

import (
	"bytes"
	"errors"
	"sync"

	"github.com/onehost/onehost/internal/http1"
)

// Prefix is the path prefix of the endpoint: PATCH /api/resource/:id.
const Prefix = "/api/resource/"

// MaxID is the largest id: 2^53-1, the largest integer JavaScript clients read exactly.
const MaxID = 1<<53 - 1

// Serves reports whether path is this package's: everything under Prefix, so that a bad
// id is this handler's 400 and a deeper path its 404.
func Serves(path []byte) bool {
	return len(path) >= len(Prefix) && string(path[:len(Prefix)]) == Prefix
}

// Config configures NewHandler. The zero value works.
type Config struct {
	// MaxBodyBytes bounds the request body; more is 413. Default 16 KiB, which is also
	// http1.Server's default limit: with both at their defaults the server answers 413
	// before the handler runs.
	MaxBodyBytes int
}

// Handler serves PATCH /api/resource/:id.
type Handler struct {
	maxBody int
	bodies  sync.Pool // *Body: its scratch slices are reused
}

// NewHandler returns the endpoint's handler.
func NewHandler(cfg Config) *Handler {
	h := &Handler{maxBody: cfg.MaxBodyBytes}
	if h.maxBody <= 0 {
		h.maxBody = 16 << 10
	}
	h.bodies.New = func() any { return new(Body) }
	return h
}

// Errors of the request line and headers, answered with their text.
var (
	errNotFound         = errors.New("not found")
	errMethodNotAllowed = errors.New("method not allowed")
	errID               = errors.New("invalid id: want an integer from 1 to 9007199254740991")
	errContentType      = errors.New("unsupported content type: want application/json")
	errTooLarge         = errors.New("request body too large")
)

// ServeHTTP1 answers one request.
func (h *Handler) ServeHTTP1(w *http1.Response, r *http1.Request) {
	h.serve(w, r.Method, r.Path, r.Query, r.Header("Content-Type"), r.Body)
}

// serve answers a request given by its parts (tests build them without a connection).
// The checks run in the order a client can fix them: the route, the method, the id, the
// query, the content type, the body's size, the body.
func (h *Handler) serve(w *http1.Response, method, path, query, contentType, body []byte) {
	if !Serves(path) {
		h.fail(w, errNotFound)
		return
	}
	seg := path[len(Prefix):]
	if bytes.IndexByte(seg, '/') >= 0 {
		h.fail(w, errNotFound)
		return
	}
	if string(method) != "PATCH" {
		w.AddHeader("Allow", "PATCH")
		h.fail(w, errMethodNotAllowed)
		return
	}
	id, ok := parseID(seg)
	if !ok {
		h.fail(w, errID)
		return
	}
	q, err := ParseQuery(query)
	if err != nil {
		h.fail(w, err)
		return
	}
	if !isJSON(contentType) {
		h.fail(w, errContentType)
		return
	}
	if len(body) > h.maxBody {
		h.fail(w, errTooLarge)
		return
	}
	b := h.bodies.Get().(*Body)
	defer h.bodies.Put(b)
	if err := b.Parse(body); err != nil {
		h.fail(w, err)
		return
	}
	w.ContentType = "application/json; charset=utf-8"
	w.Body = AppendResponse(w.Body[:0], id, &q, b)
	b.src = nil // do not keep the connection's buffer reachable from the pool
}

// fail is the one place where this package's errors become statuses. Every message is a
// constant that needs no JSON escaping.
func (h *Handler) fail(w *http1.Response, err error) {
	status := 400 // a bad id, query or body
	switch {
	case errors.Is(err, errNotFound):
		status = 404
	case errors.Is(err, errMethodNotAllowed):
		status = 405
	case errors.Is(err, errContentType):
		status = 415
	case errors.Is(err, errTooLarge):
		status = 413
	}
	w.Error(status, err.Error())
}

// parseID accepts 1*DIGIT from 1 to MaxID (leading zeros allowed).
func parseID(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
		if n > MaxID {
			return 0, false
		}
	}
	return n, n > 0
}

// isJSON reports whether the Content-Type value v is application/json, in any case, with
// no parameters or with charset=utf-8 (RFC 8259 8.1: JSON is UTF-8).
func isJSON(v []byte) bool {
	const mt = "application/json"
	mediaType, params, _ := bytes.Cut(v, []byte{';'})
	if !equalFold(bytes.TrimRight(mediaType, " \t"), mt) {
		return false
	}
	for len(params) > 0 {
		var p []byte
		p, params, _ = bytes.Cut(params, []byte{';'})
		p = bytes.Trim(p, " \t")
		if len(p) == 0 {
			continue
		}
		name, value, ok := bytes.Cut(p, []byte{'='})
		if !ok || !equalFold(name, "charset") {
			continue // other parameters carry no meaning for JSON
		}
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = value[1 : len(value)-1]
		}
		if !equalFold(value, "utf-8") {
			return false
		}
	}
	return true
}

// equalFold compares ASCII case-insensitively; s is lower case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
