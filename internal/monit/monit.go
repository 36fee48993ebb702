package monit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/procstat"
	"golang.org/x/term"
)

// historyLen is how many samples of req/s a worker's sparkline keeps: 30 s at the default
// interval, enough to see a reload or a burst pass without the line getting wider than a
// narrow terminal.
const historyLen = 30

// Once prints one frame, width columns wide. The host's rates need two readings, so it waits a tenth of a
// second between a first and a second; a frame without them would be missing half its
// content.
func Once(ctx context.Context, m *Monitor, width int, w io.Writer) error {
	m.Sample(ctx)
	select {
	case <-time.After(100 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	st := m.Sample(ctx)
	if st.Err != "" {
		return fmt.Errorf("monit: %s", st.Err)
	}
	st.Live = false
	for _, l := range Render(st, width, 0) {
		if _, err := fmt.Fprintln(w, l); err != nil {
			return fmt.Errorf("write frame: %w", err)
		}
	}
	return nil
}

// Live runs the full-screen view on the terminal out until q, ^C or a signal. Whatever
// ends it, the terminal is left as it was found: cooked mode, the main screen, a cursor.
func Live(ctx context.Context, m *Monitor, out *os.File) error {
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

	tick := time.NewTicker(m.Interval)
	defer tick.Stop()
	st := m.Sample(ctx)
	for {
		if err := drawFrame(out, st); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			st = m.Sample(ctx)
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
func drawFrame(out *os.File, st State) error {
	width, height, err := term.GetSize(int(out.Fd()))
	if err != nil {
		width, height = 80, 24
	}
	var b strings.Builder
	b.WriteString("\x1b[H")
	for i, l := range Render(st, width, height) {
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

// Monitor samples the supervisor and the host and keeps what a frame needs from before:
// each slot's req/s history and the host's previous counters. Its seams are function
// fields so that tests feed it readings.
type Monitor struct {
	// Status reads the supervisor's status; ReadHost the host's counters (procstat.ReadHost).
	Status   func(context.Context) (control.Status, error)
	ReadHost func() (procstat.Host, error)
	Now      func() time.Time
	// Interval is the time between samples, which the frame shows.
	Interval time.Duration

	history  map[string][]float64 // rowKey → req/s, oldest first
	prevHost procstat.Host
	prevAt   time.Time // zero: no previous host reading
	lastRows []control.Worker
	lastAddr string
	lastStr  string
}

// State is everything one frame shows.
type State struct {
	Addr, Steering string
	Workers        []Row
	Host           *HostRates // nil until two host readings
	Err            string     // why the last sample failed: the rows are the last good ones
	Interval       time.Duration
	Live           bool // the full-screen view: says how to quit
}

// Row is a worker as /status reports it, with its slot's recent req/s.
type Row struct {
	control.Worker
	History []float64 // oldest first, at most historyLen
}

// HostRates is the host between two readings.
type HostRates struct {
	CPUs           []CoreBusy
	RxPerS, TxPerS float64 // bytes per second, every interface
}

// CoreBusy is one CPU's share of non-idle time, in percent.
type CoreBusy struct {
	CPU  int
	Busy float64
}

// Sample reads the supervisor and the host once. Per-worker req/s is the supervisor's own
// (it divides each worker's request counter growth by the time between its stats answers,
// which a client sampling at its own phase would alias); monit keeps its history.
func (m *Monitor) Sample(ctx context.Context) State {
	st := State{Interval: m.Interval, Live: true}
	reply, err := m.Status(ctx)
	if err != nil {
		st.Err = err.Error()
		reply = control.Status{Addr: m.lastAddr, Steering: m.lastStr, Workers: m.lastRows}
	} else {
		m.lastAddr, m.lastStr, m.lastRows = reply.Addr, reply.Steering, reply.Workers
		m.record(reply.Workers)
	}
	st.Addr, st.Steering = reply.Addr, reply.Steering
	for _, w := range reply.Workers {
		st.Workers = append(st.Workers, Row{Worker: w, History: m.history[rowKey(w)]})
	}
	now := m.Now()
	if h, err := m.ReadHost(); err == nil {
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
func (m *Monitor) record(rows []control.Worker) {
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
func rates(a, b procstat.Host, dt time.Duration) HostRates {
	var r HostRates
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
		r.CPUs = append(r.CPUs, CoreBusy{CPU: c.CPU, Busy: busy})
	}
	if s := dt.Seconds(); s > 0 {
		r.RxPerS = max(float64(b.NetRxBytes-a.NetRxBytes), 0) / s
		r.TxPerS = max(float64(b.NetTxBytes-a.NetTxBytes), 0) / s
	}
	return r
}
