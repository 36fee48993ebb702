package monit

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"time"
)

// assets is the page and everything it loads: the dashboard is shown on screens
// with no network beyond the supervisor (a demonstration room), so nothing comes from a CDN.
//
//go:embed dashboard
var assets embed.FS

const (
	// dashBacklog is how many frames a new page gets at once (two minutes at one a
	// second), so that its charts open full rather than empty.
	dashBacklog = 120
	// dashMaxStreams bounds the event streams open at once: each holds a goroutine and a
	// connection for as long as its page is open.
	dashMaxStreams = 16
	// dashWriteTimeout: a page that stops reading (a laptop put to sleep) is dropped after
	// this rather than holding its stream for ever.
	dashWriteTimeout = 10 * time.Second
	// dashMaxPlots is how many of the last sweep's plots the page cycles through.
	dashMaxPlots = 8
)

// Dashboard samples the cluster once a second and sends each frame, as JSON, to every
// open event stream. The goroutine in run owns the streams and the backlog; handlers
// join and leave through channels.
type Dashboard struct {
	sample   func(context.Context) State
	ceiling  string // "" no ceiling panel
	now      func() time.Time
	interval time.Duration
	alive    func(pid int) bool // whether a sweep's process still runs

	join  chan chan []byte
	leave chan chan []byte
	slots chan struct{} // one per open stream, at most dashMaxStreams
	done  chan struct{} // closed when run returns
}

func NewDashboard(sample func(context.Context) State, ceilingDir string) *Dashboard {
	return &Dashboard{sample: sample, ceiling: ceilingDir, now: time.Now, interval: time.Second, alive: processAlive,
		join: make(chan chan []byte), leave: make(chan chan []byte),
		slots: make(chan struct{}, dashMaxStreams), done: make(chan struct{})}
}

// Run samples every interval until ctx ends. A stream that has not taken its frames yet
// misses the new one rather than holding the others up.
func (d *Dashboard) Run(ctx context.Context) {
	defer close(d.done)
	tick := time.NewTicker(d.interval)
	defer tick.Stop()
	streams := map[chan []byte]bool{}
	var backlog [][]byte
	sample := func() {
		f, err := json.Marshal(d.frame(ctx))
		if err != nil { // cannot happen: the frame is plain data; a NaN would be a bug
			return
		}
		backlog = append(backlog, f)
		if len(backlog) > dashBacklog {
			backlog = slices.Delete(backlog, 0, len(backlog)-dashBacklog)
		}
		for ch := range streams {
			select {
			case ch <- f:
			default:
			}
		}
	}
	sample() // a page opened in the first second has a frame at once
	for {
		select {
		case <-ctx.Done():
			return
		case ch := <-d.join:
			for _, f := range backlog { // ch has room for all of them: see events
				ch <- f
			}
			streams[ch] = true
		case ch := <-d.leave:
			delete(streams, ch)
		case <-tick.C:
			sample()
		}
	}
}

// dashFrame is one second of the dashboard: the JSON each event carries.
type dashFrame struct {
	T        int64        `json:"t"` // Unix milliseconds
	Addr     string       `json:"addr"`
	Steering string       `json:"steering"`
	Err      string       `json:"err,omitempty"`
	Workers  []dashWorker `json:"workers"`
	Host     *dashHost    `json:"host"` // null until two readings
	Ceiling  *dashCeiling `json:"ceiling,omitempty"`
}

type dashWorker struct {
	App         string  `json:"app,omitempty"` // its app's name, when the configuration names apps
	ID          int     `json:"id"`
	PID         int     `json:"pid"`
	Status      string  `json:"status"`
	RPS         float64 `json:"rps"`
	CPUPercent  float64 `json:"cpu"`
	RSSBytes    int64   `json:"rss"`
	Connections int64   `json:"conns"`
	Health      string  `json:"health"`
	HealthError string  `json:"health_error,omitempty"`
	Restarts    int     `json:"restarts"`
	UptimeS     int64   `json:"uptime_s"`
	// NoCounters: the program reports no req/s nor connections (no ipc): "–", not 0.
	NoCounters bool `json:"no_counters,omitempty"`
}

type dashHost struct {
	CPUs []dashCore `json:"cpus"`
	Rx   float64    `json:"rx"` // bytes per second, every interface
	Tx   float64    `json:"tx"`
}

type dashCore struct {
	CPU  int     `json:"cpu"`
	Busy float64 `json:"busy"` // percent
}

// frame is the dashboard's view of one sample.
func (d *Dashboard) frame(ctx context.Context) dashFrame {
	st := d.sample(ctx)
	now := d.now()
	f := dashFrame{T: now.UnixMilli(), Addr: st.Addr, Steering: st.Steering, Err: st.Err, Workers: []dashWorker{}}
	for _, w := range st.Workers {
		f.Workers = append(f.Workers, dashWorker{App: w.App, ID: w.ID, PID: w.PID, Status: w.Status, RPS: round1(w.RPS),
			CPUPercent: round1(w.CPUPercent), RSSBytes: w.RSSBytes, Connections: w.Connections, Health: w.Health,
			HealthError: w.HealthError, Restarts: w.Restarts, UptimeS: w.UptimeS, NoCounters: w.NoCounters})
	}
	if st.Host != nil {
		h := &dashHost{CPUs: []dashCore{}, Rx: math.Round(st.Host.RxPerS), Tx: math.Round(st.Host.TxPerS)}
		for _, c := range st.Host.CPUs {
			h.CPUs = append(h.CPUs, dashCore{CPU: c.CPU, Busy: round1(c.Busy)})
		}
		f.Host = h
	}
	if d.ceiling != "" {
		f.Ceiling = readCeiling(d.ceiling, now, d.alive)
	}
	return f
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// Handler serves the page and its assets, the event stream and the sweep's plots.
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	assets, _ := fs.Sub(assets, "dashboard")
	mux.Handle("GET /", http.FileServerFS(assets))
	mux.HandleFunc("GET /events", d.events)
	mux.HandleFunc("GET /ceiling/{path...}", d.plot)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Everything the page uses is its own: no inline script, nothing from elsewhere.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		mux.ServeHTTP(w, r)
	})
}

// events is GET /events: the backlog, then a frame each second as server-sent events,
// until the page goes or the supervisor stops.
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	select {
	case d.slots <- struct{}{}:
		defer func() { <-d.slots }()
	default:
		http.Error(w, fmt.Sprintf("%d dashboard pages are open already: close one", dashMaxStreams), http.StatusServiceUnavailable)
		return
	}
	// Room for the whole backlog and a few seconds more, so that run never waits on us.
	ch := make(chan []byte, dashBacklog+8)
	select {
	case d.join <- ch:
	case <-d.done:
		http.Error(w, "the supervisor is stopping", http.StatusServiceUnavailable)
		return
	case <-r.Context().Done():
		return
	}
	defer func() {
		select {
		case d.leave <- ch:
		case <-d.done:
		}
	}()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	send := func(s string) bool {
		rc.SetWriteDeadline(time.Now().Add(dashWriteTimeout))
		if _, err := io.WriteString(w, s); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send("retry: 2000\n\n") { // EventSource reconnects after 2 s, as after a restart
		return
	}
	for {
		select {
		case f := <-ch:
			if !send("data: " + string(f) + "\n\n") {
				return
			}
		case <-r.Context().Done():
			return
		case <-d.done:
			return
		}
	}
}

// plot is GET /ceiling/PATH: an SVG file under the ceiling directory and nothing else.
// The name is checked here (a valid path, no hidden segment, .svg) and opened through
// os.Root, which refuses whatever would leave the directory, symbolic links included.
func (d *Dashboard) plot(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("path")
	if d.ceiling == "" || !fs.ValidPath(name) || path.Ext(name) != ".svg" ||
		slices.ContainsFunc(strings.Split(name, "/"), func(s string) bool { return strings.HasPrefix(s, ".") }) {
		http.NotFound(w, r)
		return
	}
	root, err := os.OpenRoot(d.ceiling)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer root.Close()
	f, err := root.Open(name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	// Opened on its own, an SVG could run script: these are pictures only.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.Header().Set("Cache-Control", "max-age=3600") // the page's URL changes with the file
	http.ServeContent(w, r, name, st.ModTime(), f)
}
