// Package control is the supervisor's control protocol: plain HTTP on a unix socket of
// mode 0600 (`curl --unix-socket PATH http://x/status`), its routes and the types they
// carry (types.go), the typed Client the CLI, monit, the dashboard's callers and the
// ceiling instruments use (client.go), and where the socket lies (socket.go).
//
// The server side lives with the supervisor (internal/daemon); this package holds what
// both sides agree on, and imports neither the supervisor nor its engine.
//
// A version header goes both ways (VersionHeader): a client meeting a supervisor that
// answers without it, or with another version, is talking to an older or newer binary,
// and its errors say so.
package control

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Routes. Each takes ?app=NAME where it acts on apps (every app without).
const (
	PathStatus   = "/status"   // GET
	PathLogs     = "/logs"     // GET ?n=15&slot=S&follow=1&format=raw|json&timestamp=F&type=out|err&apps=1
	PathMetrics  = "/metrics"  // GET, Prometheus
	PathDescribe = "/describe" // GET
	PathReload   = "/reload"   // POST ?update_env=1
	PathRestart  = "/restart"  // POST ?update_env=1
	PathScale    = "/scale"    // POST ?n=N|+N|-N
	PathStop     = "/stop"     // POST: the app (200 once stopped), or without app the supervisor (202)
	PathStart    = "/start"    // POST ?revive=1: deleted apps too
	PathDelete   = "/delete"   // POST
	PathFlush    = "/flush"    // POST
	PathSave     = "/save"     // POST (the dump holds the environment: the operator's)
	PathUpgrade  = "/upgrade"  // POST ?binary=PATH (202, then the supervisor re-executes)
	PathDrain    = "/drain"    // POST
	PathReady    = "/ready"    // POST
)

// VersionHeader carries the control protocol's Version in every request and answer.
const VersionHeader = "Onehost-Control"

// Version is this binary's control protocol. It changes when a route or a type changes
// in a way the other side would misread.
const Version = 1

const (
	maxBody      = 16 << 20
	maxErrorBody = 1 << 20
)

// Kinds of failure, as statuses: errors.Is(err, ErrNotFound) for a Client's *Error.
var (
	ErrBadRequest  = errors.New("bad request") // 400
	ErrForbidden   = errors.New("forbidden")   // 403: the supervisor's own workers may only read
	ErrNotFound    = errors.New("not found")   // 404: no such app or worker
	ErrConflict    = errors.New("conflict")    // 409: what the cluster is doing refuses it
	ErrUnavailable = errors.New("unavailable") // 503: the app is stopped
)

// Error is an answer that is not a success: its status and the supervisor's message.
type Error struct {
	Code int
	Msg  string
	// Peer is the VersionHeader the supervisor answered with ("" for none: a binary from
	// before it had one).
	Peer string
}

func (e *Error) Error() string {
	if e.Peer != strconv.Itoa(Version) && (e.Code == http.StatusNotFound || e.Code == http.StatusBadRequest || e.Code == http.StatusMethodNotAllowed) {
		peer := "without a version: older than this one"
		if e.Peer != "" {
			peer = "version " + e.Peer + ", this one " + strconv.Itoa(Version)
		}
		return fmt.Sprintf("%s (the running supervisor speaks another control protocol (%s): upgrade it to this binary, supervisor upgrade, or use the binary it was started from)", e.Msg, peer)
	}
	return e.Msg
}

// Is matches the kind of failure the status says.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case http.StatusBadRequest:
		return target == ErrBadRequest
	case http.StatusForbidden:
		return target == ErrForbidden
	case http.StatusNotFound:
		return target == ErrNotFound
	case http.StatusConflict:
		return target == ErrConflict
	case http.StatusServiceUnavailable:
		return target == ErrUnavailable
	}
	return false
}
