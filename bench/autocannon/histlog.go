package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/onehost/onehost/internal/genhealth"
	"github.com/onehost/onehost/internal/histlog"
	"github.com/onehost/onehost/internal/journey"
	"github.com/onehost/onehost/internal/loadgen"
)

// writeHistLog writes lg to path (-hist-log): the run's latencies as an HdrHistogram
// interval log, which `autocannon merge` adds to other runs' logs bucket by bucket.
func writeHistLog(path string, lg histlog.Log) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write histogram log: %w", err)
	}
	if err := histlog.Write(f, lg); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write histogram log: %w", err)
	}
	return nil
}

// loadgenLog is a plain run's log: one interval per second, tag "all" (a plain run has
// one request, so one route), over the whole run.
func loadgenLog(res *loadgen.Result) histlog.Log {
	return histlog.Log{Base: res.Start, Generator: res.Health.String(), Intervals: res.Intervals}
}

// usersLog is a journey's log: one interval per route per second of the hold (the
// measured part of the run), from the hold's start. A result without intervals (from an
// older child) gives one interval per route over the hold, from the run's start.
func usersLog(res journey.Result, end time.Time) histlog.Log {
	if len(res.Intervals) > 0 {
		return histlog.Log{Base: res.HoldStart, Generator: res.Health.String(), Intervals: res.Intervals}
	}
	start := end.Add(-res.Elapsed)
	lg := histlog.Log{Base: start, Generator: res.Health.String()}
	for _, name := range routeOrder {
		c, ok := res.Routes[name]
		if !ok || c.Hist.Histogram == nil {
			continue
		}
		lg.Intervals = append(lg.Intervals, histlog.Interval{Tag: name, Length: res.Elapsed, Hist: c.Hist.Histogram})
	}
	return lg
}

// mergeReport is what `autocannon merge` prints: the latency table autocannon prints
// (the same "latency" object its JSON has) of every log's requests added together, and
// one per tag.
type mergeReport struct {
	Files     []string             `json:"files"`
	Requests  int64                `json:"requests"`
	Latency   dist                 `json:"latency"`
	Tags      map[string]mergedTag `json:"tags"`
	Seconds   []mergedSecond       `json:"seconds"`
	Generator mergedGenerator      `json:"generator"`
}

// mergedSecond is one second of the merged logs, all tags together (seconds since the
// earliest log's start).
type mergedSecond struct {
	T        int     `json:"t"`
	Requests int64   `json:"requests"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
}

// mergedGenerator is the verdict on the logs' generators, as far as the logs carry one
// (the line each wrote, not its per-second figures): saturated if any was.
type mergedGenerator struct {
	Saturated bool   `json:"saturated"`
	Verdict   string `json:"verdict"` // the report's line
	// Unmeasured are the files that carry no verdict (written by another tool, or before
	// the verdict existed).
	Unmeasured []string `json:"unmeasured,omitempty"`
}

// mergeGenerators judges the generators of the logs read from files.
func mergeGenerators(files []string, logs []histlog.Log) mergedGenerator {
	var g mergedGenerator
	for i, lg := range logs {
		sat, reason, ok := genhealth.ParseLine(lg.Generator)
		switch {
		case !ok:
			g.Unmeasured = append(g.Unmeasured, files[i])
		case sat && !g.Saturated:
			g.Saturated = true
			g.Verdict = fmt.Sprintf("generator: SATURATED (%s: %s): the merged run is invalid", files[i], reason)
		}
	}
	switch {
	case g.Saturated:
	case len(g.Unmeasured) > 0:
		g.Verdict = fmt.Sprintf("generator: not measured in %d of %d logs (%s)", len(g.Unmeasured), len(logs), strings.Join(g.Unmeasured, ", "))
	default:
		g.Verdict = fmt.Sprintf("generator: ok in all %d logs", len(logs))
	}
	return g
}

type mergedTag struct {
	Requests int64 `json:"requests"`
	Latency  dist  `json:"latency"`
}

// runMerge is `autocannon merge [-j] [-o FILE] FILE...`.
func runMerge(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("autocannon merge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("j", false, "print the merged result as JSON")
	out := fs.String("o", "", "also write the merged histograms (one interval per tag) as an interval log here")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("merge: give one or more interval logs (autocannon merge [-j] [-o FILE] FILE...)")
	}
	var logs []histlog.Log
	for _, path := range fs.Args() {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("merge: %w", err)
		}
		lg, err := histlog.Read(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("merge %s: %w", path, err)
		}
		logs = append(logs, lg)
	}
	m, err := histlog.Merge(logs...)
	if err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	r := mergeReport{Files: fs.Args(), Requests: m.All.TotalCount(), Latency: latencyDist(m.All), Tags: map[string]mergedTag{},
		Seconds: []mergedSecond{}, Generator: mergeGenerators(fs.Args(), logs)}
	for _, tag := range m.TagNames() {
		r.Tags[tag] = mergedTag{Requests: m.Tags[tag].TotalCount(), Latency: latencyDist(m.Tags[tag])}
	}
	for i, s := range m.Seconds {
		r.Seconds = append(r.Seconds, mergedSecond{T: i, Requests: s.Requests, P50: float64(s.P50) / 1000, P99: float64(s.P99) / 1000})
	}
	if *out != "" {
		// The merged intervals, one per tag per second: merging this log again gives the
		// same report.
		lg := histlog.Log{Base: m.Base, Intervals: m.Intervals}
		if r.Generator.Saturated || len(r.Generator.Unmeasured) == 0 {
			lg.Generator = r.Generator.Verdict
		}
		if err := writeHistLog(*out, lg); err != nil {
			return fmt.Errorf("merge: %w", err)
		}
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(r)
	}
	printMerge(stdout, r, m)
	return nil
}

func printMerge(w io.Writer, r mergeReport, m histlog.Merged) {
	fmt.Fprintf(w, "Merged %d interval log(s): %d requests\n\n", len(r.Files), r.Requests)
	fmt.Fprintf(w, "%-8s %10s %10s %10s %10s %10s %10s %10s\n", "tag", "requests", "p50", "p90", "p99", "p99.9", "mean", "max")
	row := func(name string, h *hdrhistogram.Histogram) {
		ms := func(us int64) string { return fmt.Sprintf("%.2f ms", float64(us)/1000) }
		fmt.Fprintf(w, "%-8s %10d %10s %10s %10s %10s %10s %10s\n", name, h.TotalCount(),
			ms(h.ValueAtPercentile(50)), ms(h.ValueAtPercentile(90)), ms(h.ValueAtPercentile(99)),
			ms(h.ValueAtPercentile(99.9)), fmt.Sprintf("%.2f ms", h.Mean()/1000), ms(h.Max()))
	}
	for _, name := range m.TagNames() {
		row(name, m.Tags[name])
	}
	if len(m.Tags) > 1 {
		row("all", m.All)
	}
	printSeconds(w, r.Seconds)
	fmt.Fprintln(w, r.Generator.Verdict)
}

// printSeconds prints the per-second table compactly: four seconds to a line, each as
// "t: requests p50/p99 ms".
func printSeconds(w io.Writer, secs []mergedSecond) {
	if len(secs) < 2 {
		return
	}
	fmt.Fprintf(w, "\nper second (s: requests p50/p99 ms):\n")
	for i, s := range secs {
		cell := fmt.Sprintf("%4d: %7d %6.2f/%.2f", s.T, s.Requests, s.P50, s.P99)
		if i%4 == 3 || i == len(secs)-1 {
			fmt.Fprintln(w, cell)
		} else {
			fmt.Fprintf(w, "%-30s", cell)
		}
	}
}
