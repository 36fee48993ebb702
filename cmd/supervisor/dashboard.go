package main

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/pageserver"
	"github.com/onehost/onehost/internal/procstat"
)

// dashboardAssets is the page and everything it loads: the dashboard is shown on screens
// with no network beyond the supervisor (a demonstration room), so nothing comes from a CDN.
//
//go:embed dashboard
var dashboardAssets embed.FS

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

// startDashboard serves the dashboard on ps (bound to addr) until the returned stop is called, reading
// the clusters through fl and, when ceilingDir is not "", a ceiling sweep's progress and
// plots from that directory. Its figures are monit's: the same sampler (monitor) reads
// the supervisor's status and the host. It answers only requests for its own address,
// localhost, an IP address or one of hosts (hostCheck: DNS rebinding).
func startDashboard(ctx context.Context, ps *pageserver.Server, addr, ceilingDir string, hosts []string, fl *fleet, log *zap.Logger) (stop func()) {
	m := &monitor{
		status:   func(context.Context) (control.Status, error) { return fl.status("") },
		readHost: func() (procstat.Host, error) { return procstat.ReadHost("") },
		now:      time.Now,
		interval: time.Second,
	}
	d := newDashboard(m.sample, ceilingDir)
	ctx, cancel := context.WithCancel(ctx)
	go d.run(ctx)
	ps.Serve(hostCheck("dashboard", addr, hosts, d.handler()))
	log.Info("dashboard", zap.String("url", "http://"+ps.Addr().String()+"/"), zap.String("ceiling", ceilingDir))
	return func() {
		ps.Close() // ends the streams too: their requests' contexts are cancelled
		cancel()
		<-d.done
	}
}

// dashboard samples the cluster once a second and sends each frame, as JSON, to every
// open event stream. The goroutine in run owns the streams and the backlog; handlers
// join and leave through channels.
type dashboard struct {
	sample   func(context.Context) monitState
	ceiling  string // "" no ceiling panel
	now      func() time.Time
	interval time.Duration
	alive    func(pid int) bool // whether a sweep's process still runs

	join  chan chan []byte
	leave chan chan []byte
	slots chan struct{} // one per open stream, at most dashMaxStreams
	done  chan struct{} // closed when run returns
}

func newDashboard(sample func(context.Context) monitState, ceilingDir string) *dashboard {
	return &dashboard{sample: sample, ceiling: ceilingDir, now: time.Now, interval: time.Second, alive: processAlive,
		join: make(chan chan []byte), leave: make(chan chan []byte),
		slots: make(chan struct{}, dashMaxStreams), done: make(chan struct{})}
}

// run samples every interval until ctx ends. A stream that has not taken its frames yet
// misses the new one rather than holding the others up.
func (d *dashboard) run(ctx context.Context) {
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
func (d *dashboard) frame(ctx context.Context) dashFrame {
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

// dashCeiling is a ceiling sweep as the dashboard shows it: its progress.json (written by
// internal/ceiling; decoded here field by field, since the supervisor does not import the
// instruments) and the plots of the last finished sweep.
type dashCeiling struct {
	Dir string `json:"dir"`
	// State: "running", "done", "interrupted" (the file says running but its process is
	// gone: the sweep was killed), or "none" (no progress file yet).
	State string `json:"state"`
	// Kind is "fleet" for `ceiling fleet` (its runs name a balancer and H), "" a sweep.
	Kind     string     `json:"kind,omitempty"`
	Updated  time.Time  `json:"updated,omitzero"`
	RunsDone int        `json:"runs_done"`
	Current  *dashRun   `json:"current,omitempty"`
	Last     *dashRun   `json:"last,omitempty"`
	Error    string     `json:"error,omitempty"`
	Plots    []dashPlot `json:"plots"`
	// Fill says how to fill an empty panel (no progress file, no plots): the commands
	// that write a sweep and its plots into Dir.
	Fill string `json:"fill,omitempty"`
}

// fillHint is the commands that fill the panel for dir: our worker's sweep, or the
// user's own app (docs/ceiling.md).
func fillHint(dir string) string {
	return fmt.Sprintf("no sweep in %s yet: fill it with `make ceiling CEILING_OUT=%s` (our worker; ceiling-quick: N = 1, 2 in about 3 minutes), "+
		"or for your own app `make ceiling APP='node server.js' CEILING_OUT=%s`, or a fleet behind balancers (root) `ceiling fleet -out %s`; "+
		"this panel then shows each run as it goes, and the plots (docs/ceiling.md, docs/fleet.md)", dir, dir, dir, dir)
}

// dashRun is one run of progress.json.
type dashRun struct {
	Workload    string    `json:"workload"`
	Mode        string    `json:"mode"`
	Purpose     string    `json:"purpose"`
	N           int       `json:"n"`
	Started     time.Time `json:"started"`
	ExpectedS   float64   `json:"expected_s,omitempty"`
	ElapsedS    float64   `json:"elapsed_s,omitempty"` // the current run: since it began
	DurationS   float64   `json:"duration_s,omitempty"`
	RPS         float64   `json:"rps,omitempty"`
	CPUUsPerReq float64   `json:"cpu_us_per_req,omitempty"`
	P99Ms       float64   `json:"p99_ms,omitempty"`
	Verdict     string    `json:"verdict,omitempty"`
	Skipped     string    `json:"skipped,omitempty"`
	// A fleet's run: its balancer, its hosts H and the balancer's CPU µs per request.
	Balancer         string  `json:"balancer,omitempty"`
	Hosts            int     `json:"hosts,omitempty"`
	BalancerUsPerReq float64 `json:"balancer_cpu_us_per_req,omitempty"`
}

// dashPlot is one SVG of the last sweep, by the URL the page loads it from; the URL
// changes when the file does, so a page shows a redrawn plot.
type dashPlot struct {
	Name string `json:"name"`
	URL  string `json:"url"`
}

// readCeiling reads dir's newest progress.json (in dir or a directory under it:
// `ceiling sweep -out DIR` writes DIR/sweep/progress.json, `ceiling fleet -out DIR`
// DIR/fleet/progress.json and its plots beside it) and lists the SVG files of the
// directory under dir that was written last (`ceiling model` writes DIR/plots).
func readCeiling(dir string, now time.Time, alive func(int) bool) *dashCeiling {
	c := &dashCeiling{Dir: dir, State: "none", Plots: []dashPlot{}}
	defer func() {
		if c.State == "none" && len(c.Plots) == 0 && c.Error == "" {
			c.Fill = fillHint(dir)
		}
	}()
	var progress string
	var progressAt time.Time
	svgs := map[string][]fs.FileInfo{} // relative directory → its SVG files
	var svgDir string
	var svgAt time.Time
	scan := func(rel string) []string {
		ents, err := os.ReadDir(filepath.Join(dir, rel))
		if err != nil {
			return nil
		}
		var subdirs []string
		for _, e := range ents {
			name := e.Name()
			if strings.HasPrefix(name, ".") {
				continue
			}
			if e.IsDir() {
				subdirs = append(subdirs, path.Join(rel, name))
				continue
			}
			info, err := e.Info()
			if err != nil || !info.Mode().IsRegular() {
				continue
			}
			switch {
			case name == "progress.json" && info.ModTime().After(progressAt):
				progress, progressAt = path.Join(rel, name), info.ModTime()
			case strings.HasSuffix(name, ".svg"):
				svgs[rel] = append(svgs[rel], info)
				if info.ModTime().After(svgAt) {
					svgDir, svgAt = rel, info.ModTime()
				}
			}
		}
		return subdirs
	}
	for _, sub := range scan(".") {
		scan(sub)
	}
	if progress != "" {
		readProgress(c, filepath.Join(dir, progress), now, alive)
	}
	files := svgs[svgDir]
	slices.SortFunc(files, func(a, b fs.FileInfo) int {
		if ra, rb := plotRank(a.Name()), plotRank(b.Name()); ra != rb {
			return ra - rb
		}
		return strings.Compare(a.Name(), b.Name())
	})
	for _, f := range files[:min(len(files), dashMaxPlots)] {
		rel := path.Join(svgDir, f.Name())
		var u []string
		for _, seg := range strings.Split(rel, "/") {
			u = append(u, url.PathEscape(seg))
		}
		c.Plots = append(c.Plots, dashPlot{Name: strings.TrimSuffix(f.Name(), ".svg"),
			URL: "ceiling/" + strings.Join(u, "/") + "?v=" + strconv.FormatInt(f.ModTime().UnixNano(), 36)})
	}
	return c
}

// plotRank orders a sweep's plots by what a demonstration shows first: throughput, then
// CPU per request, then the rest (the NIC's link charts). A fleet's (fleet-throughput-…,
// fleet-cpu-…) rank as a sweep's.
func plotRank(name string) int {
	name = strings.TrimPrefix(name, "fleet-")
	switch {
	case strings.HasPrefix(name, "throughput-"):
		return 0
	case strings.HasPrefix(name, "cpu-"):
		return 1
	}
	return 2
}

// readProgress fills c from the progress file at p.
func readProgress(c *dashCeiling, p string, now time.Time, alive func(int) bool) {
	var pr struct {
		State    string    `json:"state"`
		Kind     string    `json:"kind"`
		PID      int       `json:"pid"`
		Updated  time.Time `json:"updated"`
		RunsDone int       `json:"runs_done"`
		Current  *dashRun  `json:"current"`
		Last     *dashRun  `json:"last"`
		Error    string    `json:"error"`
	}
	b, err := readSmall(p, 1<<20)
	if err == nil {
		err = json.Unmarshal(b, &pr)
	}
	if err != nil {
		c.State, c.Error = "unreadable", fmt.Sprintf("read %s: %v", p, err)
		return
	}
	c.State, c.Kind, c.Updated, c.RunsDone, c.Current, c.Last, c.Error = pr.State, pr.Kind, pr.Updated, pr.RunsDone, pr.Current, pr.Last, pr.Error
	if c.State == "running" && !alive(pr.PID) {
		c.State, c.Current = "interrupted", nil
	}
	if c.Current != nil {
		c.Current.ElapsedS = round1(max(now.Sub(c.Current.Started).Seconds(), 0))
	}
}

// readSmall reads the file at p, refusing one over limit bytes.
func readSmall(p string, limit int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("over %d bytes", limit)
	}
	return b, err
}

// processAlive reports whether a process of that pid exists and has not exited (EPERM: it
// exists, another user's). kill(pid, 0) also succeeds on a zombie, a sweep that has exited
// but whose parent has not reaped it yet, so /proc has the last word where it shows the
// process (with hidepid it may not: kill's answer stands then).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
		return true
	}
	return procstat.Running("", pid)
}

// handler serves the page and its assets, the event stream and the sweep's plots.
func (d *dashboard) handler() http.Handler {
	mux := http.NewServeMux()
	assets, _ := fs.Sub(dashboardAssets, "dashboard")
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
func (d *dashboard) events(w http.ResponseWriter, r *http.Request) {
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
func (d *dashboard) plot(w http.ResponseWriter, r *http.Request) {
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

// defaultCeilingDir is where `make ceiling` writes its results.
const defaultCeilingDir = "data/ceiling"

// ceilingDir is the directory named by -dashboard-ceiling, made absolute (the page's
// plots are read from it for as long as the supervisor runs): flag "" means
// defaultCeilingDir when it exists, "-" none. A named directory that does not exist yet is
// kept: the sweep may create it after the dashboard starts.
func ceilingDir(flag string) string {
	switch flag {
	case "-":
		return ""
	case "":
		if st, err := os.Stat(defaultCeilingDir); err != nil || !st.IsDir() {
			return ""
		}
		flag = defaultCeilingDir
	}
	if abs, err := filepath.Abs(flag); err == nil {
		return abs
	}
	return flag
}
