package applog

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/onehost/onehost/internal/cluster"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"
)

// The apps' output as PM2 prints it (pm2 logs, pm2-runtime): each line the app writes is a
// line of its own, `ID|APP | line`, never an entry with the line escaped in a field, so
// that a stack trace reads as one and `logs --raw` gives back exactly what the app wrote.
// The supervisor's own events stay zap entries (-log-format console or json) between them.

// TypeSupervisor is the type of the supervisor's own events in GET /logs?format=json
// (the apps' lines are cluster.StreamOut or StreamErr, PM2's out and err).
const TypeSupervisor = "supervisor"

// Entry is one line in the form of `pm2 logs --json`: also what GET /logs?format=json
// streams to `supervisor logs`, the supervisor's own events included (type "supervisor",
// message the encoded entry).
type Entry struct {
	Message   string `json:"message"`
	Timestamp string `json:"timestamp"` // UTC, milliseconds, as day.js writes a date in JSON
	Type      string `json:"type"`
	ProcessID int    `json:"process_id"` // the slot; -1 for an event of no slot
	AppName   string `json:"app_name"`
}

const pm2TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// Entry returns l as an Entry.
func (l Line) Entry() Entry {
	typ, msg := l.Stream, string(l.Text)
	if typ == "" {
		typ = TypeSupervisor
		if n := len(msg); n > 0 && msg[n-1] == '\n' {
			msg = msg[:n-1]
		}
	}
	return Entry{Message: msg, Timestamp: l.Time.UTC().Format(pm2TimeLayout), Type: typ, ProcessID: l.Slot, AppName: l.Label}
}

// FromEntry is the Line an Entry describes (the client's side of GET /logs).
func FromEntry(p Entry) Line {
	l := Line{Label: p.AppName, Slot: p.ProcessID, Text: []byte(p.Message)}
	l.Time, _ = time.Parse(time.RFC3339Nano, p.Timestamp)
	if p.Type != TypeSupervisor {
		l.Stream = p.Type
	} else {
		l.Text = append(l.Text, '\n')
	}
	return l
}

// Modes of a Printer.
const (
	FormatPM2  = ""     // `ID|APP | line`, and the supervisor's events as they were logged
	FormatRaw  = "raw"  // the apps' lines as they wrote them
	FormatJSON = "json" // Entry objects, one a line
)

// Printer writes log lines in one of PM2's forms. The prefix's width is PM2's: at least
// 3, and once an `ID|APP` is wider, its width + 1, from then on.
type Printer struct {
	Mode  string                 // FormatPM2, FormatRaw or FormatJSON
	Stamp *cluster.LogDateFormat // --timestamp: "TIME " before each app line; nil: none
	// Escape writes the apps' control characters as escapes (AppendPrintable): for a
	// terminal, which would obey them.
	Escape bool

	mu  sync.Mutex
	pad int
	buf []byte
}

// DefaultTimestamp is `pm2 logs --timestamp`'s format when none is given.
const DefaultTimestamp = "YYYY-MM-DD-HH:mm:ss"

// Print writes l: an app's line to out (to errw for an err line with --raw, as pm2 does),
// an event of the supervisor's as it was logged (not with --raw or --json).
func (p *Printer) Print(out, errw io.Writer, l Line) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.buf[:0]
	switch {
	case p.Mode == FormatJSON:
		j, _ := json.Marshal(l.Entry())
		b = append(append(b, j...), '\n')
	case l.Stream == "": // the supervisor's own event, already a line
		if p.Mode == FormatRaw {
			return
		}
		b = append(b, l.Text...)
	case p.Mode == FormatRaw: // as written, whatever the output: --raw is for pipes
		b = append(append(b, l.Text...), '\n')
		if l.Stream == cluster.StreamErr {
			out = errw
		}
	default:
		if p.Stamp != nil {
			b = append(p.Stamp.AppendFormat(b, l.Time.Local()), ' ')
		}
		start := len(b)
		b = append(append(strconv.AppendInt(b, int64(l.Slot), 10), '|'), l.Label...)
		if w := len(b) - start; w > max(p.pad, 3) {
			p.pad = w + 1
		}
		for len(b)-start < max(p.pad, 3) {
			b = append(b, ' ')
		}
		b = append(b, " | "...)
		if p.Escape {
			b = AppendPrintable(b, l.Text)
		} else {
			b = append(b, l.Text...)
		}
		b = append(b, '\n')
	}
	out.Write(b)
	p.buf = b
}

// AppendPrintable appends text to dst with every control character a terminal would act
// on written as an escape instead: C0 controls but tab (\x1b for ESC), DEL, C1 controls
// (U+0080 to U+009F, \u009b), and bytes that are not UTF-8 (\xff), which a terminal not in
// UTF-8 mode may read as C1. An app's line is text its requests choose (a path with
// ESC ]0;...BEL retitles the operator's terminal, ESC [2J clears it).
func AppendPrintable(dst, text []byte) []byte {
	const hex = "0123456789abcdef"
	for i := 0; i < len(text); {
		c := text[i]
		if c >= 0x20 && c < 0x7f || c == '\t' {
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(text[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			dst = append(dst, '\\', 'x', hex[c>>4], hex[c&15])
		case r < 0x20 || r == 0x7f:
			dst = append(dst, '\\', 'x', hex[r>>4], hex[r&15])
		case r >= 0x80 && r <= 0x9f:
			dst = append(dst, '\\', 'u', '0', '0', hex[r>>4], hex[r&15])
		default:
			dst = append(dst, text[i:i+n]...)
		}
		i += n
	}
	return dst
}

// IsTerminal says whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Output takes the apps' lines from their clusters (cluster.Options.Output): into the
// ring for `supervisor logs`, and printed to the supervisor's log (and an app's own
// out_file, with several apps) as PM2 prints them, or as JSON objects with -log-format json.
type Output struct {
	ring  *Ring
	sink  io.Writer // the supervisor's log, shared with its zap core (locked)
	main  *Printer
	mode  string // FormatPM2 or FormatJSON
	level zapcore.LevelEnabler
}

// NewOutput: the apps' lines count as info, as they did as "worker output" entries:
// -log-level warn drops them (the -log-dir files keep them), which the ceiling sweeps use
// to keep an app's request log out of what they measure.
func NewOutput(ring *Ring, sink io.Writer, jsonFormat bool, level zapcore.LevelEnabler) *Output {
	o := &Output{ring: ring, sink: sink, mode: FormatPM2, level: level}
	if jsonFormat {
		o.mode = FormatJSON
	}
	// The supervisor's own terminal gets the apps' lines escaped; its files as written.
	o.main = &Printer{Mode: o.mode, Escape: IsTerminal(sink)}
	return o
}

// ForApp returns the output function of app name (label: what its lines show as APP), also writing
// to file when not nil.
func (o *Output) ForApp(name, label string, file io.Writer) func(cluster.OutputLine) {
	var own *Printer
	if file != nil {
		own = &Printer{Mode: o.mode}
	}
	return func(ol cluster.OutputLine) {
		if !o.level.Enabled(zapcore.InfoLevel) {
			return
		}
		l := Line{App: name, Label: label, Slot: ol.Slot, Stream: ol.Stream, Time: ol.Time, Text: ol.Text}
		o.main.Print(o.sink, o.sink, l)
		if own != nil {
			own.Print(file, file, l)
		}
		o.ring.AddLine(l)
	}
}

// ParseTimestamp is --timestamp's value: "" none, "true" (the flag alone) PM2's default.
func ParseTimestamp(v string) (*cluster.LogDateFormat, error) {
	switch v {
	case "", "false":
		return nil, nil
	case "true":
		v = DefaultTimestamp
	}
	f, err := cluster.ParseLogDateFormat(v)
	if err != nil {
		return nil, fmt.Errorf("timestamp: %w", err)
	}
	return &f, nil
}

// ParseQuery reads GET /logs's form parameters into sel and the printer they ask for:
// format ("" PM2's view, raw, json: Entry objects, which `supervisor logs` asks for and
// renders), timestamp (a day.js format, or true for the default one, for PM2's view), type
// (out or err: that stream's lines only) and apps=1 (the apps' lines only).
func ParseQuery(q url.Values, sel *Filter) (*Printer, error) {
	p := &Printer{Mode: q.Get("format")}
	switch p.Mode {
	case FormatPM2, FormatJSON: // json: the events too (type supervisor), unless apps=1
	case FormatRaw:
		sel.AppOnly = true
	default:
		return nil, fmt.Errorf("format: %q: want raw or json (or none: ID|APP | line)", p.Mode)
	}
	switch sel.Stream = q.Get("type"); sel.Stream {
	case "", cluster.StreamOut, cluster.StreamErr:
	default:
		return nil, fmt.Errorf("type: %q: want out or err", sel.Stream)
	}
	sel.AppOnly = sel.AppOnly || q.Get("apps") == "1"
	stamp, err := ParseTimestamp(q.Get("timestamp"))
	if err != nil {
		return nil, err
	}
	p.Stamp = stamp
	return p, nil
}

// Label is what an app's lines show as APP: its name, or for the one app of a
// configuration without names its program's (as PM2 names an app after its script).
func Label(sp cluster.App) string {
	if sp.Name != "" || len(sp.Config.Command) == 0 {
		return sp.Name
	}
	return filepath.Base(sp.Config.Command[0])
}
