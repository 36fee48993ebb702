package monit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onehost/onehost/internal/procstat"
	"github.com/onehost/onehost/internal/progress"
)

// dashCeiling is a ceiling sweep as the dashboard shows it: its progress.json (written by
// internal/ceiling, whose types package progress holds, since the supervisor imports no
// instrument) and the plots of the last finished sweep.
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

// dashRun is one run of progress.json, and for the current run how long it has gone.
type dashRun struct {
	progress.Run
	ElapsedS float64 `json:"elapsed_s,omitempty"`
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
	var progressPath string
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
			case name == progress.FileName && info.ModTime().After(progressAt):
				progressPath, progressAt = path.Join(rel, name), info.ModTime()
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
	if progressPath != "" {
		readProgress(c, filepath.Join(dir, progressPath), now, alive)
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
	var pr progress.File
	b, err := readSmall(p, 1<<20)
	if err == nil {
		err = json.Unmarshal(b, &pr)
	}
	if err != nil {
		c.State, c.Error = "unreadable", fmt.Sprintf("read %s: %v", p, err)
		return
	}
	c.State, c.Kind, c.Updated, c.RunsDone, c.Error = pr.State, pr.Kind, pr.Updated, pr.RunsDone, pr.Error
	if pr.Current != nil {
		c.Current = &dashRun{Run: *pr.Current}
	}
	if pr.Last != nil {
		c.Last = &dashRun{Run: *pr.Last}
	}
	if c.State == progress.Running && !alive(pr.PID) {
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

// DefaultCeilingDir is where `make ceiling` writes its results.
const DefaultCeilingDir = "data/ceiling"

// CeilingDir is the directory named by -dashboard-ceiling, made absolute (the page's
// plots are read from it for as long as the supervisor runs): flag "" means
// DefaultCeilingDir when it exists, "-" none. A named directory that does not exist yet is
// kept: the sweep may create it after the dashboard starts.
func CeilingDir(flag string) string {
	switch flag {
	case "-":
		return ""
	case "":
		if st, err := os.Stat(DefaultCeilingDir); err != nil || !st.IsDir() {
			return ""
		}
		flag = DefaultCeilingDir
	}
	if abs, err := filepath.Abs(flag); err == nil {
		return abs
	}
	return flag
}
