package monit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/onehost/onehost/internal/cluster"
)

// renderMonit lays st out in lines of at most width columns and, when height > 0, at most
// height lines. It is the whole look of monit, kept apart from the terminal so that a
// golden file shows it.
func Render(st State, width, height int) []string {
	var lines []string
	head := "supervisor monit"
	if st.Addr != "" {
		head += "   serving " + st.Addr
	}
	if st.Steering != "" {
		head += "   steering " + st.Steering
	}
	if st.Live {
		head += fmt.Sprintf("   every %v, q to quit", st.Interval)
	}
	lines = append(lines, head)
	if st.Err != "" {
		lines = append(lines, "! "+st.Err)
	}
	lines = append(lines, "")
	lines = append(lines, workerTable(st.Workers, width, st.Interval)...)
	lines = append(lines, "")
	lines = append(lines, hostLines(st.Host, width)...)
	for i, l := range lines {
		lines[i] = clip(l, width)
	}
	if height > 0 && len(lines) > height {
		lines = lines[:height]
	}
	return lines
}

// workerTable is one line per worker: what a glance needs first (status, req/s and its
// sparkline), then the columns of `supervisor status` that change second to second. The
// sparkline takes what the other columns leave, up to the whole history, so that on a
// narrow terminal it gives way before any figure is cut.
func workerTable(rows []Row, width int, interval time.Duration) []string {
	if len(rows) == 0 {
		return []string{"no workers"}
	}
	peak := 0.0
	for _, r := range rows {
		for _, v := range r.History {
			peak = max(peak, v)
		}
	}
	cells := [][]string{{"id", "status", "req/s", "cpu", "mem", "conns", "health", "pid", "uptime", "↺"}}
	for _, r := range rows {
		c := []string{rowKey(r.Worker), r.Status, rate(r.RPS), "-", "-", "-", "-", "-", "-", strconv.Itoa(r.Restarts)}
		if r.NoCounters { // a program without our ipc reports none: unknown, not 0
			c[2] = "-"
		}
		if r.PID != 0 { // a slot between workers has no process to measure
			c[3], c[4] = fmt.Sprintf("%.1f%%", r.CPUPercent), Mem(r.RSSBytes)
			if !r.NoCounters {
				c[5] = strconv.FormatInt(r.Connections, 10)
			}
			c[7], c[8] = strconv.Itoa(r.PID), Uptime(r.UptimeS)
		}
		if r.Health != "" {
			c[6] = r.Health
		}
		cells = append(cells, c)
	}
	const gap = 2
	lines := table(cells, gap)
	if room := min(width-utf8.RuneCountInString(lines[0])-gap, historyLen); room >= 5 {
		withSpark := make([][]string, len(cells))
		for i, c := range cells {
			spark := "last " + (time.Duration(room) * interval).String()
			if i > 0 {
				spark = sparkline(rows[i-1].History, peak, room)
			}
			withSpark[i] = slices.Insert(slices.Clone(c), 3, spark)
		}
		lines = table(withSpark, gap)
	}
	for _, r := range rows {
		if r.Health == cluster.HealthUnhealthy && r.HealthError != "" {
			lines = append(lines, fmt.Sprintf("worker %s unhealthy: %s", rowKey(r.Worker), r.HealthError))
		}
	}
	return lines
}

// table aligns cells in columns gap apart, with no padding after the last.
func table(cells [][]string, gap int) []string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, gap, ' ', 0)
	for _, c := range cells {
		fmt.Fprintln(tw, strings.Join(c, "\t"))
	}
	tw.Flush()
	return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
}

// rate formats a req/s figure: whole numbers with thousands separators, a decimal below 10.
func rate(v float64) string {
	if v < 10 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return groupThousands(int64(v + 0.5))
}

// groupThousands writes n (not negative) with commas: 12,345.
func groupThousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// sparkBlocks are the eight heights of a sparkline cell.
var sparkBlocks = []rune("▁▂▃▄▅▆▇█")

// sparkline draws the last n values of vs, newest at the right, scaled to peak (the
// highest value across all workers, so lines compare), padded on the left to n cells.
// Zero is blank, so an idle worker reads as idle, not as the lowest bar.
func sparkline(vs []float64, peak float64, n int) string {
	if len(vs) > n {
		vs = vs[len(vs)-n:]
	}
	out := make([]rune, 0, n)
	for range n - len(vs) {
		out = append(out, ' ')
	}
	for _, v := range vs {
		switch {
		case v <= 0 || peak <= 0:
			out = append(out, ' ')
		default:
			i := int(v / peak * float64(len(sparkBlocks)-1))
			out = append(out, sparkBlocks[min(max(i, 0), len(sparkBlocks)-1)])
		}
	}
	return string(out)
}

// hostLines are the host's busy share per core, as bars in as many columns as fit, and
// its network rates.
func hostLines(h *HostRates, width int) []string {
	if h == nil {
		return []string{"host: measuring…"}
	}
	total := 0.0
	for _, c := range h.CPUs {
		total += c.Busy
	}
	avg := 0.0
	if len(h.CPUs) > 0 {
		avg = total / float64(len(h.CPUs))
	}
	lines := []string{
		fmt.Sprintf("host cpu %d cores, %.0f%% busy   net rx %s  tx %s", len(h.CPUs), avg, bytesRate(h.RxPerS), bytesRate(h.TxPerS)),
	}
	const bar = 10
	name := len("cpu" + strconv.Itoa(len(h.CPUs)-1))
	cellW := name + 1 + bar + 2 + 5 // "cpu12 [||||      ] 100%"
	cols := max(1, (width+2)/(cellW+2))
	var cur []string
	for _, c := range h.CPUs {
		filled := int(c.Busy/100*bar + 0.5)
		cell := fmt.Sprintf("%-*s [%s%s] %3.0f%%", name, "cpu"+strconv.Itoa(c.CPU),
			strings.Repeat("|", filled), strings.Repeat(" ", bar-filled), c.Busy)
		cur = append(cur, cell)
		if len(cur) == cols {
			lines = append(lines, strings.Join(cur, "  "))
			cur = cur[:0]
		}
	}
	if len(cur) > 0 {
		lines = append(lines, strings.Join(cur, "  "))
	}
	return lines
}

// bytesRate formats bytes per second in decimal units, as network figures are.
func bytesRate(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.1f GB/s", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1f MB/s", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f kB/s", v/1e3)
	}
	return fmt.Sprintf("%.0f B/s", v)
}

// clip cuts s to width columns (every rune here is one column wide).
func clip(s string, width int) string {
	if width <= 0 || utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:width])
}
