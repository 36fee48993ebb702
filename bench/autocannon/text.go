package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onehost/onehost/internal/loadgen"
)

// banner is autocannon's first lines.
func banner(w io.Writer, o options) {
	if o.amount > 0 {
		fmt.Fprintf(w, "Running %d requests test @ %s\n", o.amount, o.url)
	} else {
		fmt.Fprintf(w, "Running %ss test @ %s\n", seconds(o.duration), o.url)
	}
	msg := fmt.Sprintf("%d connections", o.connections)
	if o.pipelining > 1 {
		msg += fmt.Sprintf(" with %d pipelining factor", o.pipelining)
	}
	if o.workersSet {
		msg += fmt.Sprintf("\n%d workers", o.workers)
	}
	if r := o.rate(); r > 0 {
		msg += fmt.Sprintf("\nopen loop at %s req/s; latency counts from each request's due time", jsNumber(r))
	}
	fmt.Fprintf(w, "%s\n\n", msg)
}

// printText writes the results as autocannon's tables and summary lines, then this
// generator's own lines (its CPU, the server's).
func printText(w io.Writer, o options, r *report) {
	var b strings.Builder
	b.WriteString("\n")
	lat := r.Latency
	b.WriteString(table(
		[]string{"Stat", "2.5%", "50%", "97.5%", "99%", "Avg", "Stdev", "Max"},
		[][]string{{"Latency", msec(lat.P[p2_5]), msec(lat.P[p50]), msec(lat.P[p97_5]), msec(lat.P[p99]),
			msec(lat.Average), msec(lat.Stddev), msec(lat.Max)}}))
	req, thr := r.Requests, r.Throughput
	b.WriteString(table(
		[]string{"Stat", "1%", "2.5%", "50%", "97.5%", "Avg", "Stdev", "Min"},
		[][]string{
			{"Req/Sec", jsNumber(req.P[p1]), jsNumber(req.P[p2_5]), jsNumber(req.P[p50]), jsNumber(req.P[p97_5]),
				jsNumber(req.Average), jsNumber(req.Stddev), jsNumber(req.Min)},
			{"Bytes/Sec", prettyBytes(thr.P[p1]), prettyBytes(thr.P[p2_5]), prettyBytes(thr.P[p50]), prettyBytes(thr.P[p97_5]),
				prettyBytes(thr.Average), prettyBytes(thr.Stddev), prettyBytes(thr.Min)},
		}))
	if o.statusCodes {
		codes := make([]int, 0, len(r.StatusCodeStats))
		for c := range r.StatusCodeStats {
			n, _ := strconv.Atoi(c)
			codes = append(codes, n)
		}
		slices.Sort(codes)
		rows := make([][]string, 0, len(codes))
		for _, c := range codes {
			rows = append(rows, []string{strconv.Itoa(c), strconv.FormatInt(r.StatusCodeStats[strconv.Itoa(c)].Count, 10)})
		}
		b.WriteString(table([]string{"Code", "Count"}, rows))
	}
	b.WriteString("\n")
	if o.sampleInt == time.Second {
		b.WriteString("Req/Bytes counts sampled once per second.\n")
	} else {
		fmt.Fprintf(&b, "Req/Bytes counts sampled every %s seconds.\n", jsNumber(o.sampleInt.Seconds()))
	}
	fmt.Fprintf(&b, "# of samples: %d\n\n", r.Samples)
	if o.latencyTable {
		rows := make([][]string, len(percentiles))
		for i, p := range percentiles {
			rows[i] = []string{jsNumber(p), jsNumber(lat.P[i])}
		}
		b.WriteString(table([]string{"Percentile", "Latency (ms)"}, rows))
		b.WriteString("\n")
	}
	if r.Non2xx > 0 {
		fmt.Fprintf(&b, "%d 2xx responses, %d non 2xx responses\n", r.C2xx, r.Non2xx)
	}
	fmt.Fprintf(&b, "%s requests in %ss, %s read\n", thousands(*req.Sent), jsNumber(r.Duration), prettyBytes(float64(*thr.Total)))
	if *req.Total > 0 {
		fmt.Fprintf(&b, "%s bytes per response on the wire (heads and bodies as sent)\n", jsNumber(r.WireBytesPerReq))
	}
	if r.Errors > 0 {
		fmt.Fprintf(&b, "%s errors (%s timeouts)\n", thousands(r.Errors), thousands(r.Timeouts))
	}
	if r.CheckDecode {
		fmt.Fprintf(&b, "%s bodies failed to decode as their Content-Encoding said\n", thousands(r.BadBodies))
	}
	b.WriteString(spreadLine(r.Spread, r.ConnectRate, &r.Reconnects))

	g := r.Generator
	fmt.Fprintf(&b, "generator: %.0f%% CPU of %d workers (peak %.0f%%), %s µs CPU per request\n",
		g.AvgWorkerCPU*100, g.Workers, g.MaxWorkerCPU*100, jsNumber(roundTo(g.CPUPerReq, 2)))
	if g.Bound {
		fmt.Fprintf(&b, "generator-bound: in its busiest second the generator used %.0f%% of its %d workers' CPU "+
			"(over %.0f%%): the server may be faster than measured; give the generator more workers (-w) and cores\n",
			g.MaxWorkerCPU*100, g.Workers, loadgen.BoundThreshold*100)
	}
	b.WriteString(g.Verdict.String() + "\n")
	if s := r.Server; s != nil {
		fmt.Fprintf(&b, "server: %s µs CPU per request (%s user + %s system), peak RSS %s, %s per request\n",
			jsNumber(roundTo(s.TotalPerReq, 2)), jsNumber(roundTo(s.UserPerReq, 2)), jsNumber(roundTo(s.SysPerReq, 2)),
			prettyBytes(float64(s.PeakRSS)), prettyBytes(s.BytesPerReq))
		h := s.Host
		fmt.Fprintf(&b, "host CPU: %.1f%% user, %.1f%% system, %.1f%% idle, %.1f%% steal, %.1f%% softirq, %.1f%% iowait\n",
			h.User, h.System, h.Idle, h.Steal, h.SoftIRQ, h.IOWait)
	}
	io.WriteString(w, b.String())
}

// table draws a table as autocannon's (cli-table3, without colour) does.
func table(head []string, rows [][]string) string {
	widths := make([]int, len(head))
	for _, row := range append([][]string{head}, rows...) {
		for i, cell := range row {
			widths[i] = max(widths[i], len([]rune(cell))+2)
		}
	}
	var b strings.Builder
	rule := func(left, mid, right string) {
		b.WriteString(left)
		for i, w := range widths {
			if i > 0 {
				b.WriteString(mid)
			}
			b.WriteString(strings.Repeat("─", w))
		}
		b.WriteString(right + "\n")
	}
	line := func(row []string) {
		b.WriteString("│")
		for i, cell := range row {
			b.WriteString(" " + cell + strings.Repeat(" ", widths[i]-len([]rune(cell))-1) + "│")
		}
		b.WriteString("\n")
	}
	rule("┌", "┬", "┐")
	line(head)
	for _, row := range rows {
		rule("├", "┼", "┤")
		line(row)
	}
	rule("└", "┴", "┘")
	return b.String()
}

// msec formats milliseconds as the latency table does.
func msec(v float64) string { return jsNumber(v) + " ms" }

// jsNumber formats a number as JavaScript's toLocaleString does in English: thousands
// separated by commas, the fraction as it is.
func jsNumber(v float64) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	intPart, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if frac != "" {
		b.WriteString("." + frac)
	}
	return b.String()
}

// prettyBytes formats a byte count as the pretty-bytes package does: SI units, three
// significant digits, no thousands separators.
func prettyBytes(v float64) string {
	if v < 1 {
		return strconv.FormatFloat(v, 'f', -1, 64) + " B"
	}
	units := []string{"B", "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"}
	e := min(int(math.Floor(math.Log10(v)/3)), len(units)-1)
	v /= math.Pow(1000, float64(e))
	v, _ = strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
	return strconv.FormatFloat(v, 'f', -1, 64) + " " + units[e]
}

// thousands is autocannon's count format: "999", then "93k".
func thousands(n int64) string {
	if n < 1000 {
		return strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(int64(math.Round(float64(n)/1000)), 10) + "k"
}

// progressPrinter writes a progress line to w once per sample; on a terminal it rewrites
// one line in place.
type progressPrinter struct {
	w        io.Writer
	tty      bool
	interval time.Duration // of the samples
	total    time.Duration // 0 with -a
	wrote    bool
}

func (p *progressPrinter) update(pr loadgen.Progress) {
	s := pr.Sample
	line := fmt.Sprintf("running %ss", seconds(pr.Elapsed))
	if p.total > 0 {
		line += "/" + seconds(p.total) + "s"
	}
	line += fmt.Sprintf(": %s req/s, %s/s, %s responses, %d errors", jsNumber(math.Round(float64(s.Requests)/p.interval.Seconds())),
		prettyBytes(float64(s.Bytes)/p.interval.Seconds()), jsNumber(float64(pr.Total)), s.Errors)
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
	p.wrote = true
}

// done clears the progress line.
func (p *progressPrinter) done() {
	if p.tty && p.wrote {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}
