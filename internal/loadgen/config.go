package loadgen

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/onehost/onehost/internal/genhealth"
)

// Config describes a run. Its zero value, plus a URL, is autocannon's default run: 10
// connections, no pipelining, 10 seconds, closed loop.
type Config struct {
	// URL is the target, "http://host[:port]/path[?query]". Required; only http.
	URL string
	// Method is the request method. Default "GET".
	Method string
	// Headers are sent with every request, in order, after Host and Connection. A
	// Content-Length is added when Body is not empty, unless Headers has one.
	Headers []Header
	// Body is sent with every request.
	Body []byte
	// Connections is the number of TCP connections. Default 10.
	Connections int
	// Pipelining is the number of requests each connection keeps in flight. Default 1.
	Pipelining int
	// Duration is how long the run lasts. Default 10 s. Ignored when Amount is set.
	Duration time.Duration
	// Amount, when positive, ends the run after exactly that many requests have had an
	// outcome (a response, or an error or timeout that failed them) instead of after
	// Duration.
	Amount int64
	// Rate, when positive, is the open-loop request rate over all connections, in
	// requests per second. Default 0: closed loop.
	Rate float64
	// Timeout bounds the wait for a response, and a connect. A request past it counts as
	// an error and a timeout and its connection is closed and reopened. Default 10 s.
	Timeout time.Duration
	// Workers is the number of event loops (goroutines) the connections are shared
	// among, each with its own latency histogram; the caller sets GOMAXPROCS to match, so
	// that a worker is an OS thread's worth of load. It is also the denominator of
	// Generator.MaxWorkerCPU. Default 1.
	Workers int
	// IntervalLength is the length of the latency intervals (Result.Intervals), HdrHistogram
	// interval-log style. Default 1 s.
	IntervalLength time.Duration
	// SampleInterval is the period of the per-second samples. Default 1 s.
	SampleInterval time.Duration
	// ReadBuffer is each connection's read buffer size; a response head must fit in it.
	// Default 32 KiB.
	ReadBuffer int
	// LocalAddrs are the source addresses the connections are spread over: connection n
	// is bound to LocalAddrs[n % len] before its connect (with IP_BIND_ADDRESS_NO_PORT, so
	// that the port is still chosen per destination). Default: on a loopback IPv4 target,
	// as many of 127.0.0.2, .3, … as keep each (source, server) pair at or under PerAddr
	// connections (package srcaddr); elsewhere the kernel's choice.
	LocalAddrs []netip.Addr
	// PerAddr is how many connections one source address may hold before they are spread
	// over more. Default srcaddr.PerAddr("") (~5,600 with Linux's default port range).
	PerAddr int
	// ConnectRate bounds how fast the run's connections are first opened, in connects
	// per second over all workers: connection k (in opening order) is opened no earlier
	// than start + k/ConnectRate. Default: unbounded for up to ConnectBurst connections,
	// DefaultConnectRate above (see there why); negative: unbounded. Reconnects are not
	// paced: they are the workload's (a server that closes after each response) or
	// already backed off (a failed connect).
	ConnectRate float64
	// Progress, when set, is called after each sample from the goroutine running Run.
	Progress func(Progress)
	// Saturation are the thresholds of the generator's verdict (Result.Health); zero
	// fields: genhealth's defaults.
	Saturation genhealth.Thresholds
	// CheckBody, when set, is given every complete response's Content-Encoding ("" none)
	// and whole body (empty for HEAD, 204 and 304), from the loops' goroutines at once; a
	// body it returns an error for is counted in Result.BadBodies and Result.Errors, and
	// the connection goes on. It costs a copy of every body and whatever the check
	// costs, so the generator's CPU per request is no longer the lean client's. Nil:
	// bodies are skipped unseen.
	CheckBody func(coding string, body []byte) error
}

// Header is one request header.
type Header struct{ Name, Value string }

// Progress is what Config.Progress is told once per sample.
type Progress struct {
	Elapsed time.Duration // since the run started
	Sample  Sample        // the sample just taken
	Total   int64         // responses so far
}

// Defaults of Config's zero-valued fields.
const (
	DefaultConnections    = 10
	DefaultPipelining     = 1
	DefaultDuration       = 10 * time.Second
	DefaultTimeout        = 10 * time.Second
	DefaultSampleInterval = time.Second
	DefaultIntervalLength = time.Second
	DefaultReadBuffer     = 32 << 10

	// ConnectBurst is the most connections opened all at once by default: what wrk and
	// autocannon do for every run (each opens all its connections in one go at the
	// start), and what their users expect for the usual tens to hundreds.
	ConnectBurst = 1000
	// DefaultConnectRate paces the opening of runs above ConnectBurst connections. All
	// at once, 50,000 SYNs would overrun any listen backlog (Node's and nginx's 511, Go's
	// somaxconn, 4096 here), and each dropped SYN costs its connect a 1 s, then 3 s
	// retransmit that the run's first seconds would measure; every connect also costs
	// 25–60 µs of kernel CPU on each side. 10,000/s opens 50,000 in 5 s (the journey's
	// ramp is slower still), keeps the accept queue short for a server that accepts in
	// ~10 µs, and costs the generator ~0.5 core while it lasts.
	DefaultConnectRate = 10_000
)

// target is a parsed URL.
type target struct {
	addr string // host:port to dial
	host string // Host header
	uri  string // request target
}

func (c *Config) withDefaults() Config {
	d := *c
	if d.Method == "" {
		d.Method = "GET"
	}
	if d.Connections <= 0 {
		d.Connections = DefaultConnections
	}
	if d.Pipelining <= 0 {
		d.Pipelining = DefaultPipelining
	}
	if d.Duration <= 0 {
		d.Duration = DefaultDuration
	}
	if d.Timeout <= 0 {
		d.Timeout = DefaultTimeout
	}
	if d.Workers <= 0 {
		d.Workers = 1
	}
	if d.SampleInterval <= 0 {
		d.SampleInterval = DefaultSampleInterval
	}
	if d.IntervalLength <= 0 {
		d.IntervalLength = DefaultIntervalLength
	}
	if d.ReadBuffer <= 0 {
		d.ReadBuffer = DefaultReadBuffer
	}
	if d.ConnectRate == 0 && d.Connections > ConnectBurst {
		d.ConnectRate = DefaultConnectRate
	}
	return d
}

// ParseURL checks a target URL as Run would, so that a command can refuse it before
// starting anything.
func ParseURL(raw string) error {
	_, err := parseTarget(raw)
	return err
}

func parseTarget(raw string) (target, error) {
	if raw == "" {
		return target{}, errors.New("parse URL: empty; want http://host[:port]/path")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return target{}, fmt.Errorf("parse URL: %w", err)
	}
	if u.Scheme != "http" {
		return target{}, fmt.Errorf("parse URL %q: scheme %q is not supported, only http", raw, u.Scheme)
	}
	if u.Hostname() == "" {
		return target{}, fmt.Errorf("parse URL %q: no host", raw)
	}
	port := u.Port()
	if port == "" {
		port = "80"
	} else if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return target{}, fmt.Errorf("parse URL %q: bad port %q", raw, port)
	}
	return target{addr: net.JoinHostPort(u.Hostname(), port), host: u.Host, uri: u.RequestURI()}, nil
}

// buildRequest returns the bytes of one request, built once for the whole run.
func buildRequest(t target, method string, headers []Header, body []byte) ([]byte, error) {
	if method == "" || strings.ContainsAny(method, " \t\r\n") {
		return nil, fmt.Errorf("build request: bad method %q", method)
	}
	var b []byte
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, t.uri...)
	b = append(b, " HTTP/1.1\r\n"...)
	hasHost, hasLength, hasConn := false, false, false
	for _, h := range headers {
		switch {
		case h.Name == "" || strings.ContainsAny(h.Name, " \t\r\n:"):
			return nil, fmt.Errorf("build request: bad header name %q", h.Name)
		case strings.ContainsAny(h.Value, "\r\n"):
			return nil, fmt.Errorf("build request: header %s: value has a line break", h.Name)
		}
		hasHost = hasHost || strings.EqualFold(h.Name, "host")
		hasLength = hasLength || strings.EqualFold(h.Name, "content-length")
		hasConn = hasConn || strings.EqualFold(h.Name, "connection")
	}
	if !hasHost {
		b = append(b, "Host: "...)
		b = append(b, t.host...)
		b = append(b, "\r\n"...)
	}
	if !hasConn {
		b = append(b, "Connection: keep-alive\r\n"...)
	}
	for _, h := range headers {
		b = append(b, h.Name...)
		b = append(b, ": "...)
		b = append(b, h.Value...)
		b = append(b, "\r\n"...)
	}
	if len(body) > 0 && !hasLength {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	b = append(b, body...)
	return b, nil
}
