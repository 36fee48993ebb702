package feed

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/http1"
	"github.com/onehost/onehost/internal/jsonstr"
	"github.com/onehost/onehost/internal/owner"
	"github.com/onehost/onehost/internal/token"
)

// HandlerConfig configures NewHandler. Store and Secret are required.
type HandlerConfig struct {
	Store *Store
	// Secret is the HS256 key of the bearer tokens.
	Secret []byte
	// Logger receives unexpected errors (the ones answered 500). nil: no logs.
	Logger *zap.Logger
	// Now is the clock for token expiry and uptime. nil: time.Now.
	Now func() time.Time
	// HealthTimeout bounds the /health probe. Default 2 s.
	HealthTimeout time.Duration
}

// Handler serves the feed API over http1.
type Handler struct {
	store   *Store
	verify  *token.Verifier
	log     *zap.Logger
	now     func() time.Time
	start   time.Time
	healthT time.Duration
	claims  sync.Pool // *token.Claims, so the username buffer is reused
}

// NewHandler returns the feed API's handler.
func NewHandler(cfg HandlerConfig) *Handler {
	h := &Handler{
		store:   cfg.Store,
		verify:  token.NewVerifier(cfg.Secret),
		log:     cfg.Logger,
		now:     cfg.Now,
		healthT: cfg.HealthTimeout,
	}
	if h.log == nil {
		h.log = zap.NewNop()
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.healthT <= 0 {
		h.healthT = 2 * time.Second
	}
	h.start = h.now()
	h.claims.New = func() any { return &token.Claims{Username: make([]byte, 0, 64)} }
	return h
}

// errInvalidID and errNotFound are the router's own domain errors.
var (
	errInvalidID        = errors.New("invalid post id")
	errNotFound         = errors.New("not found")
	errMethodNotAllowed = errors.New("method not allowed")
)

// ServeHTTP1 routes one request. Checks on authenticated routes run in the contract's
// order: the token, then the id, then the body.
func (h *Handler) ServeHTTP1(w *http1.Response, r *http1.Request) {
	path := r.Path
	get := r.MethodIs("GET") || r.MethodIs("HEAD")
	switch {
	case string(path) == "/feed":
		if !get {
			h.methodNotAllowed(w, "GET, HEAD")
			return
		}
		body, err := h.store.AppendFeed(w.Body)
		h.answer(w, 200, body, err)
	case string(path) == "/health":
		if !get {
			h.methodNotAllowed(w, "GET, HEAD")
			return
		}
		h.health(w)
	case string(path) == "/posts":
		if !r.MethodIs("POST") {
			h.methodNotAllowed(w, "POST")
			return
		}
		h.createPost(w, r)
	case len(path) > len("/posts/") && string(path[:len("/posts/")]) == "/posts/":
		rest := path[len("/posts/"):]
		if n := len(rest) - len("/like"); n > 0 && string(rest[n:]) == "/like" {
			seg := rest[:n]
			if bytes.IndexByte(seg, '/') >= 0 {
				h.fail(w, errNotFound)
				return
			}
			if !r.MethodIs("POST") {
				h.methodNotAllowed(w, "POST")
				return
			}
			h.like(w, r, seg)
			return
		}
		if bytes.IndexByte(rest, '/') >= 0 {
			h.fail(w, errNotFound)
			return
		}
		if !get {
			h.methodNotAllowed(w, "GET, HEAD")
			return
		}
		id, err := parseID(rest)
		if err != nil {
			h.fail(w, err)
			return
		}
		body, err := h.store.AppendPost(w.Body, id)
		h.answer(w, 200, body, err)
	default:
		h.fail(w, errNotFound)
	}
}

// MayBlock tells http1's loop transport which requests wait (http1.Blocker): the writes,
// every POST, which wait for the batcher's group commit or for the write owner's answer.
// Reads run on the loop: a read waits at most for the read connection a commit in progress
// holds (one core: the write connection serves the reads too), which is CPU the one core
// spends on that commit either way.
func (h *Handler) MayBlock(r *http1.Request) bool { return r.MethodIs("POST") }

func (h *Handler) createPost(w *http1.Response, r *http1.Request) {
	c := h.claims.Get().(*token.Claims)
	defer h.claims.Put(c)
	if err := h.verify.Verify(c, r.Header("Authorization"), h.now()); err != nil {
		h.fail(w, err)
		return
	}
	text, err := ParseCreateBody(r.Body)
	if err != nil {
		h.fail(w, err)
		return
	}
	body, err := h.store.CreatePost(w.Body, c.UserID, c.Username, text)
	h.answer(w, 201, body, err)
}

func (h *Handler) like(w *http1.Response, r *http1.Request, seg []byte) {
	c := h.claims.Get().(*token.Claims)
	defer h.claims.Put(c)
	if err := h.verify.Verify(c, r.Header("Authorization"), h.now()); err != nil {
		h.fail(w, err)
		return
	}
	id, err := parseID(seg)
	if err != nil {
		h.fail(w, err)
		return
	}
	body, created, err := h.store.Like(w.Body, c.UserID, id)
	status := 200
	if created {
		status = 201
	}
	h.answer(w, status, body, err)
}

func (h *Handler) health(w *http1.Response) {
	w.Probe = true // a balancer's check: not a request that keeps `supervisor drain` waiting
	ctx, cancel := context.WithTimeout(context.Background(), h.healthT)
	defer cancel()
	if err := h.store.Ping(ctx); err != nil {
		h.log.Warn("health check failed", zap.Error(err))
		w.Status = 503
		w.Body = append(w.Body[:0], `{"status":"degraded","db":"unreachable","error":`...)
		w.Body = jsonstr.Append(w.Body, err.Error())
		w.Body = append(w.Body, '}')
		return
	}
	if why := h.store.Serving(); why != "" {
		// A fleet host that must not take traffic (its data lags, its log node is gone):
		// the balancer's check takes it out.
		w.Status = 503
		w.Body = append(w.Body[:0], `{"status":"not serving","db":"ok","error":`...)
		w.Body = jsonstr.Append(w.Body, why)
		w.Body = append(w.Body, '}')
		return
	}
	w.Body = append(w.Body[:0], `{"status":"ok","db":"ok","uptime_s":`...)
	w.Body = strconv.AppendInt(w.Body, int64(h.now().Sub(h.start)/time.Second), 10)
	w.Body = append(w.Body, '}')
}

func (h *Handler) methodNotAllowed(w *http1.Response, allow string) {
	w.AddHeader("Allow", allow)
	h.fail(w, errMethodNotAllowed)
}

// answer sends body with status, or maps err.
func (h *Handler) answer(w *http1.Response, status int, body []byte, err error) {
	if err != nil {
		h.fail(w, err)
		return
	}
	w.Status = status
	w.Body = body
}

// fail is the one place where domain errors become HTTP statuses. Anything unexpected is
// logged and answered 500 without detail: internals never reach clients.
func (h *Handler) fail(w *http1.Response, err error) {
	status := 500
	switch {
	case errors.Is(err, errNotFound):
		status = 404
	case errors.Is(err, ErrPostNotFound):
		status = 404
	case errors.Is(err, errInvalidID), errors.Is(err, ErrMalformedJSON),
		errors.Is(err, ErrBodyRequired), errors.Is(err, ErrBodyTooLong):
		status = 400
	case errors.Is(err, token.ErrMissing):
		// RFC 9110 11.6.1: a 401 names the scheme it wants; RFC 6750 3: no error code when
		// the request carried no bearer credentials.
		status = 401
		w.AddHeader("WWW-Authenticate", "Bearer")
	case errors.Is(err, token.ErrInvalid), errors.Is(err, token.ErrPayload):
		status = 401
		w.AddHeader("WWW-Authenticate", `Bearer error="invalid_token"`)
	case errors.Is(err, errMethodNotAllowed):
		status = 405
	case errors.Is(err, owner.ErrOwnerLost), errors.Is(err, owner.ErrOwnerTimeout):
		// Undecided: the write owner may have saved it. Say so; a client may retry a like
		// (it lands on the unique key), and must decide for itself about a post.
		h.log.Warn("write undecided", zap.Error(err))
		w.AddHeader("Retry-After", "1")
		msg := owner.ErrOwnerLost.Error()
		if errors.Is(err, owner.ErrOwnerTimeout) {
			msg = owner.ErrOwnerTimeout.Error()
		}
		w.Error(503, msg)
		return
	case errors.Is(err, ErrLogUndecided):
		h.log.Warn("write undecided", zap.Error(err))
		w.AddHeader("Retry-After", "1")
		w.Error(503, ErrLogUndecided.Error())
		return
	}
	if status == 500 {
		h.log.Error("request failed", zap.Error(err))
		w.Error(500, "internal server error")
		return
	}
	w.Error(status, err.Error())
}

// parseID accepts a positive decimal integer, leading zeros allowed. An id too large for
// int64 is a well-formed id of a post that cannot exist.
func parseID(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, errInvalidID
	}
	var n int64
	overflow := false
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, errInvalidID
		}
		if n > (1<<63-1-9)/10 {
			overflow = true
			continue
		}
		n = n*10 + int64(c-'0')
	}
	if overflow {
		return 0, ErrPostNotFound
	}
	if n == 0 {
		return 0, errInvalidID
	}
	return n, nil
}
