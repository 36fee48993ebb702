package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/procstat"
)

// historyLen is how many samples of req/s a worker's sparkline keeps: 30 s at the default
// interval, enough to see a reload or a burst pass without the line getting wider than a
// narrow terminal.
const historyLen = 30

// runMonit is `supervisor monit`: a live view of the workers and the host, as `pm2 monit`.
// On a terminal it takes the alternate screen and redraws every interval until q or ^C;
// otherwise (a pipe, a file) or with -once it prints one frame and returns.
func runMonit(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("supervisor monit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", control.DefaultSocket(getenv), "control socket path")
	interval := fs.Duration("interval", time.Second, "how often to read the supervisor and the host and redraw")
	once := fs.Bool("once", false, "print one frame and exit (also what happens when stdout is not a terminal)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("monit: unexpected argument %q", fs.Arg(0))
	}
	if *interval < 100*time.Millisecond {
		return fmt.Errorf("monit: -interval %v: want at least 100ms", *interval)
	}
	if err := findSocket(fs, socket, stderr); err != nil { // an installed unit's (startup), when the default is not there
		return err
	}
	if err := control.CheckSocketPath(*socket); err != nil {
		return err
	}
	c := control.NewClient(*socket).HTTP()
	m := &monitor{
		status: func(ctx context.Context) (control.Status, error) {
			// A wedged supervisor must not freeze the screen: one interval late is a miss.
			ctx, cancel := context.WithTimeout(ctx, max(*interval, 2*time.Second))
			defer cancel()
			return fetchStatus(ctx, c, *socket)
		},
		readHost: func() (procstat.Host, error) { return procstat.ReadHost("") },
		now:      time.Now,
		interval: *interval,
	}
	out, isFile := stdout.(*os.File)
	if *once || !isFile || !term.IsTerminal(int(out.Fd())) {
		return monitOnce(ctx, m, getenv, stdout)
	}
	return monitLive(ctx, m, out)
}

// monitOnce prints one frame. The host's rates need two readings, so it waits a tenth of a
// second between a first and a second; a frame without them would be missing half its
// content.
func monitOnce(ctx context.Context, m *monitor, getenv func(string) string, w io.Writer) error {
	m.sample(ctx)
	select {
	case <-time.After(100 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	st := m.sample(ctx)
	if st.Err != "" {
		return fmt.Errorf("monit: %s", st.Err)
	}
	st.Live = false
	width := 100
	if n, err := strconv.Atoi(getenv("COLUMNS")); err == nil && n > 0 {
		width = n
	}
	for _, l := range renderMonit(st, width, 0) {
		if _, err := fmt.Fprintln(w, l); err != nil {
			return fmt.Errorf("write frame: %w", err)
		}
	}
	return nil
}

// monitLive runs the full-screen view on the terminal out until q, ^C or a signal. Whatever
// ends it, the terminal is left as it was found: cooked mode, the main screen, a cursor.
func monitLive(ctx context.Context, m *monitor, out *os.File) error {
	// Keys come from the controlling terminal, opened afresh: its own open file description
	// is made non-blocking (Go's poller then lets a deadline end a pending Read) without
	// touching the flags of the stdin the shell shares with us.
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open the terminal for keys: %w", err)
	}
	defer tty.Close()
	// Through SyscallConn, not Fd: Fd would put tty back into blocking mode, and then no
	// deadline could end the key reader's Read.
	rc, err := tty.SyscallConn()
	if err != nil {
		return fmt.Errorf("open the terminal for keys: %w", err)
	}
	var saved *term.State
	if cerr := rc.Control(func(fd uintptr) { saved, err = term.MakeRaw(int(fd)) }); cerr != nil || err != nil {
		return fmt.Errorf("set the terminal to raw mode: %w", errors.Join(cerr, err))
	}
	defer rc.Control(func(fd uintptr) { term.Restore(int(fd), saved) })
	// Raw mode turns ^C into a key, so INT comes only from kill; TERM and HUP (the terminal
	// closed) end the view the same way, through ctx, so that the deferred restores run.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)

	const (
		enter = "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J" // alternate screen, hide cursor, clear
		leave = "\x1b[?25h\x1b[?1049l"              // show cursor, main screen
	)
	if _, err := io.WriteString(out, enter); err != nil {
		return fmt.Errorf("write to the terminal: %w", err)
	}
	defer io.WriteString(out, leave)

	// The key reader is this function's: on the way out a deadline in the past ends its
	// Read, and the wait makes sure it is gone before the terminal is restored and closed.
	// Where the terminal takes no deadline (not pollable) nothing would end the Read, so
	// it is left to go with the process rather than waited for forever.
	keys := make(chan byte, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		readKeys(tty, keys)
	}()
	defer func() {
		if tty.SetReadDeadline(time.Now()) == nil {
			<-done
		}
	}()

	tick := time.NewTicker(m.interval)
	defer tick.Stop()
	st := m.sample(ctx)
	for {
		if err := drawFrame(out, st); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			st = m.sample(ctx)
		case <-winch: // redraw at the new size now, not at the next tick
		case k, ok := <-keys:
			if !ok || k == 'q' || k == 'Q' || k == 0x03 || k == 0x04 { // q, ^C, ^D
				return nil
			}
		}
	}
}

// readKeys sends each byte read from tty to keys until a read fails (the deadline set on
// exit, or the terminal gone), then closes keys.
func readKeys(tty *os.File, keys chan<- byte) {
	defer close(keys)
	buf := make([]byte, 64)
	for {
		n, err := tty.Read(buf)
		for _, b := range buf[:n] {
			select {
			case keys <- b:
			default: // a key held down: drop what the loop has not taken yet
			}
		}
		if err != nil {
			return
		}
	}
}

// drawFrame writes st over the whole terminal: lines drawn from the top-left corner, each
// cleared to its end, and the rest of the screen cleared, so nothing flickers as a clear
// before every frame would.
func drawFrame(out *os.File, st monitState) error {
	width, height, err := term.GetSize(int(out.Fd()))
	if err != nil {
		width, height = 80, 24
	}
	var b strings.Builder
	b.WriteString("\x1b[H")
	for i, l := range renderMonit(st, width, height) {
		if i > 0 {
			b.WriteString("\r\n") // raw mode: no \n to \r\n translation
		}
		b.WriteString(l)
		b.WriteString("\x1b[K")
	}
	b.WriteString("\x1b[J")
	if _, err := io.WriteString(out, b.String()); err != nil {
		return fmt.Errorf("write to the terminal: %w", err)
	}
	return nil
}

// fetchStatus GETs /status from the supervisor.
func fetchStatus(ctx context.Context, c *http.Client, socket string) (control.Status, error) {
	var st control.Status
	req, err := http.NewRequestWithContext(ctx, "GET", "http://supervisor/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return st, fmt.Errorf("reach the supervisor at %s (is `supervisor run` running?): %w", socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status: %s", resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&st); err != nil {
		return st, fmt.Errorf("decode status: %w", err)
	}
	return st, nil
}

// monitor samples the supervisor and the host and keeps what a frame needs from before:
// each slot's req/s history and the host's previous counters. Its seams are function
// fields so that tests feed it readings.
type monitor struct {
	status   func(context.Context) (control.Status, error)
	readHost func() (procstat.Host, error)
	now      func() time.Time
	interval time.Duration

	history  map[string][]float64 // rowKey → req/s, oldest first
	prevHost procstat.Host
	prevAt   time.Time // zero: no previous host reading
	lastRows []control.Worker
	lastAddr string
	lastStr  string
}

// monitState is everything one frame shows.
type monitState struct {
	Addr, Steering string
	Workers        []monitRow
	Host           *hostRates // nil until two host readings
	Err            string     // why the last sample failed: the rows are the last good ones
	Interval       time.Duration
	Live           bool // the full-screen view: says how to quit
}

// monitRow is a worker as /status reports it, with its slot's recent req/s.
type monitRow struct {
	control.Worker
	History []float64 // oldest first, at most historyLen
}

// hostRates is the host between two readings.
type hostRates struct {
	CPUs           []coreBusy
	RxPerS, TxPerS float64 // bytes per second, every interface
}

// coreBusy is one CPU's share of non-idle time, in percent.
type coreBusy struct {
	CPU  int
	Busy float64
}

// sample reads the supervisor and the host once. Per-worker req/s is the supervisor's own
// (it divides each worker's request counter growth by the time between its stats answers,
// which a client sampling at its own phase would alias); monit keeps its history.
func (m *monitor) sample(ctx context.Context) monitState {
	st := monitState{Interval: m.interval, Live: true}
	reply, err := m.status(ctx)
	if err != nil {
		st.Err = err.Error()
		reply = control.Status{Addr: m.lastAddr, Steering: m.lastStr, Workers: m.lastRows}
	} else {
		m.lastAddr, m.lastStr, m.lastRows = reply.Addr, reply.Steering, reply.Workers
		m.record(reply.Workers)
	}
	st.Addr, st.Steering = reply.Addr, reply.Steering
	for _, w := range reply.Workers {
		st.Workers = append(st.Workers, monitRow{Worker: w, History: m.history[rowKey(w)]})
	}
	now := m.now()
	if h, err := m.readHost(); err == nil {
		if !m.prevAt.IsZero() {
			r := rates(m.prevHost, h, now.Sub(m.prevAt))
			st.Host = &r
		}
		m.prevHost, m.prevAt = h, now
	}
	return st
}

// record appends each slot's req/s to its history and forgets slots that are gone (a
// scale down), so that a later slot of the same number starts afresh.
func (m *monitor) record(rows []control.Worker) {
	if m.history == nil {
		m.history = map[string][]float64{}
	}
	seen := map[string]bool{}
	for _, w := range rows {
		k := rowKey(w)
		seen[k] = true
		h := append(m.history[k], w.RPS)
		if len(h) > historyLen {
			h = append(h[:0], h[len(h)-historyLen:]...)
		}
		m.history[k] = h
	}
	for id := range m.history {
		if !seen[id] {
			delete(m.history, id)
		}
	}
}

// rowKey names a worker's row: its slot, after its app's name when it has one (api/0), as
// slots of several apps share numbers.
func rowKey(w control.Worker) string {
	if w.App == "" {
		return strconv.Itoa(w.ID)
	}
	return w.App + "/" + strconv.Itoa(w.ID)
}

// rates is the host between readings a and b, dt apart. A CPU in b but not in a (brought
// online between them) is left out until the next frame.
func rates(a, b procstat.Host, dt time.Duration) hostRates {
	var r hostRates
	prev := map[int]procstat.CPUTime{}
	for _, c := range a.CPUs {
		prev[c.CPU] = c
	}
	for _, c := range b.CPUs {
		p, ok := prev[c.CPU]
		if !ok {
			continue
		}
		idle := (c.Idle + c.IOWait) - (p.Idle + p.IOWait)
		total := c.Total() - p.Total()
		busy := 0.0
		if total > 0 {
			busy = min(max(100*(1-idle/total), 0), 100)
		}
		r.CPUs = append(r.CPUs, coreBusy{CPU: c.CPU, Busy: busy})
	}
	if s := dt.Seconds(); s > 0 {
		r.RxPerS = max(float64(b.NetRxBytes-a.NetRxBytes), 0) / s
		r.TxPerS = max(float64(b.NetTxBytes-a.NetTxBytes), 0) / s
	}
	return r
}

// renderMonit lays st out in lines of at most width columns and, when height > 0, at most
// height lines. It is the whole look of monit, kept apart from the terminal so that a
// golden file shows it.
func renderMonit(st monitState, width, height int) []string {
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
func workerTable(rows []monitRow, width int, interval time.Duration) []string {
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
			c[3], c[4] = fmt.Sprintf("%.1f%%", r.CPUPercent), mem(r.RSSBytes)
			if !r.NoCounters {
				c[5] = strconv.FormatInt(r.Connections, 10)
			}
			c[7], c[8] = strconv.Itoa(r.PID), uptime(r.UptimeS)
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
func hostLines(h *hostRates, width int) []string {
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
