package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap/zapcore"
	"golang.org/x/term"

	"github.com/onehost/onehost/internal/cluster"
)

// The apps' output as PM2 prints it (pm2 logs, pm2-runtime): each line the app writes is a
// line of its own, `ID|APP | line`, never an entry with the line escaped in a field, so
// that a stack trace reads as one and `logs --raw` gives back exactly what the app wrote.
// The supervisor's own events stay zap entries (-log-format console or json) between them.

// logTypeSupervisor is the type of the supervisor's own events in GET /logs?format=json
// (the apps' lines are cluster.StreamOut or StreamErr, PM2's out and err).
const logTypeSupervisor = "supervisor"

// pm2Line is one line in the form of `pm2 logs --json`: also what GET /logs?format=json
// streams to `supervisor logs`, the supervisor's own events included (type "supervisor",
// message the encoded entry).
type pm2Line struct {
	Message   string `json:"message"`
	Timestamp string `json:"timestamp"` // UTC, milliseconds, as day.js writes a date in JSON
	Type      string `json:"type"`
	ProcessID int    `json:"process_id"` // the slot; -1 for an event of no slot
	AppName   string `json:"app_name"`
}

const pm2TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// wire returns l as a pm2Line.
func (l ringLine) wire() pm2Line {
	typ, msg := l.stream, string(l.text)
	if typ == "" {
		typ = logTypeSupervisor
		if n := len(msg); n > 0 && msg[n-1] == '\n' {
			msg = msg[:n-1]
		}
	}
	return pm2Line{Message: msg, Timestamp: l.t.UTC().Format(pm2TimeLayout), Type: typ, ProcessID: l.slot, AppName: l.label}
}

// fromWire is the ringLine a pm2Line describes (the client's side of GET /logs).
func fromWire(p pm2Line) ringLine {
	l := ringLine{label: p.AppName, slot: p.ProcessID, text: []byte(p.Message)}
	l.t, _ = time.Parse(time.RFC3339Nano, p.Timestamp)
	if p.Type != logTypeSupervisor {
		l.stream = p.Type
	} else {
		l.text = append(l.text, '\n')
	}
	return l
}

// Modes of a logPrinter.
const (
	printPM2  = ""     // `ID|APP | line`, and the supervisor's events as they were logged
	printRaw  = "raw"  // the apps' lines as they wrote them
	printJSON = "json" // pm2Line objects, one a line
)

// logPrinter writes log lines in one of PM2's forms. The prefix's width is PM2's: at least
// 3, and once an `ID|APP` is wider, its width + 1, from then on.
type logPrinter struct {
	mode  string
	stamp *cluster.LogDateFormat // --timestamp: "TIME " before each app line; nil: none
	// escape writes the apps' control characters as escapes (appendPrintable): for a
	// terminal, which would obey them.
	escape bool

	mu  sync.Mutex
	pad int
	buf []byte
}

// defaultTimestamp is `pm2 logs --timestamp`'s format when none is given.
const defaultTimestamp = "YYYY-MM-DD-HH:mm:ss"

// print writes l: an app's line to out (to errw for an err line with --raw, as pm2 does),
// an event of the supervisor's as it was logged (not with --raw or --json).
func (p *logPrinter) print(out, errw io.Writer, l ringLine) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.buf[:0]
	switch {
	case p.mode == printJSON:
		j, _ := json.Marshal(l.wire())
		b = append(append(b, j...), '\n')
	case l.stream == "": // the supervisor's own event, already a line
		if p.mode == printRaw {
			return
		}
		b = append(b, l.text...)
	case p.mode == printRaw: // as written, whatever the output: --raw is for pipes
		b = append(append(b, l.text...), '\n')
		if l.stream == cluster.StreamErr {
			out = errw
		}
	default:
		if p.stamp != nil {
			b = append(p.stamp.AppendFormat(b, l.t.Local()), ' ')
		}
		start := len(b)
		b = append(append(strconv.AppendInt(b, int64(l.slot), 10), '|'), l.label...)
		if w := len(b) - start; w > max(p.pad, 3) {
			p.pad = w + 1
		}
		for len(b)-start < max(p.pad, 3) {
			b = append(b, ' ')
		}
		b = append(b, " | "...)
		if p.escape {
			b = appendPrintable(b, l.text)
		} else {
			b = append(b, l.text...)
		}
		b = append(b, '\n')
	}
	out.Write(b)
	p.buf = b
}

// appendPrintable appends text to dst with every control character a terminal would act
// on written as an escape instead: C0 controls but tab (\x1b for ESC), DEL, C1 controls
// (U+0080 to U+009F, \u009b), and bytes that are not UTF-8 (\xff), which a terminal not in
// UTF-8 mode may read as C1. An app's line is text its requests choose (a path with
// ESC ]0;...BEL retitles the operator's terminal, ESC [2J clears it).
func appendPrintable(dst, text []byte) []byte {
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

// isTerminal says whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// appOutput takes the apps' lines from their clusters (cluster.Options.Output): into the
// ring for `supervisor logs`, and printed to the supervisor's log (and an app's own
// out_file, with several apps) as PM2 prints them, or as JSON objects with -log-format json.
type appOutput struct {
	ring  *logRing
	sink  io.Writer // the supervisor's log, shared with its zap core (locked)
	main  *logPrinter
	mode  string // printPM2 or printJSON
	level zapcore.LevelEnabler
}

// newAppOutput: the apps' lines count as info, as they did as "worker output" entries:
// -log-level warn drops them (the -log-dir files keep them), which the ceiling sweeps use
// to keep an app's request log out of what they measure.
func newAppOutput(ring *logRing, sink io.Writer, jsonFormat bool, level zapcore.LevelEnabler) *appOutput {
	o := &appOutput{ring: ring, sink: sink, mode: printPM2, level: level}
	if jsonFormat {
		o.mode = printJSON
	}
	// The supervisor's own terminal gets the apps' lines escaped; its files as written.
	o.main = &logPrinter{mode: o.mode, escape: isTerminal(sink)}
	return o
}

// forApp returns the Output of app name (label: what its lines show as APP), also writing
// to file when not nil.
func (o *appOutput) forApp(name, label string, file io.Writer) func(cluster.OutputLine) {
	var own *logPrinter
	if file != nil {
		own = &logPrinter{mode: o.mode}
	}
	return func(ol cluster.OutputLine) {
		if !o.level.Enabled(zapcore.InfoLevel) {
			return
		}
		l := ringLine{app: name, label: label, slot: ol.Slot, stream: ol.Stream, t: ol.Time, text: ol.Text}
		o.main.print(o.sink, o.sink, l)
		if own != nil {
			own.print(file, file, l)
		}
		o.ring.addLine(l)
	}
}

// parseTimestamp is --timestamp's value: "" none, "true" (the flag alone) PM2's default.
func parseTimestamp(v string) (*cluster.LogDateFormat, error) {
	switch v {
	case "", "false":
		return nil, nil
	case "true":
		v = defaultTimestamp
	}
	f, err := cluster.ParseLogDateFormat(v)
	if err != nil {
		return nil, fmt.Errorf("timestamp: %w", err)
	}
	return &f, nil
}

// logsQuery reads GET /logs's form parameters into sel and the printer they ask for:
// format ("" PM2's view, raw, json: pm2Line objects, which `supervisor logs` asks for and
// renders), timestamp (a day.js format, or true for the default one, for PM2's view), type
// (out or err: that stream's lines only) and apps=1 (the apps' lines only).
func logsQuery(q url.Values, sel *lineFilter) (*logPrinter, error) {
	p := &logPrinter{mode: q.Get("format")}
	switch p.mode {
	case printPM2, printJSON: // json: the events too (type supervisor), unless apps=1
	case printRaw:
		sel.appOnly = true
	default:
		return nil, fmt.Errorf("format: %q: want raw or json (or none: ID|APP | line)", p.mode)
	}
	switch sel.stream = q.Get("type"); sel.stream {
	case "", cluster.StreamOut, cluster.StreamErr:
	default:
		return nil, fmt.Errorf("type: %q: want out or err", sel.stream)
	}
	sel.appOnly = sel.appOnly || q.Get("apps") == "1"
	stamp, err := parseTimestamp(q.Get("timestamp"))
	if err != nil {
		return nil, err
	}
	p.stamp = stamp
	return p, nil
}

// errNoWorker is a slot that no app of the supervisor has (mapped to 404).
var errNoWorker = errors.New("no such worker")

// hasSlot reports whether an app named (every app for "") has a worker in slot: `logs 7`
// for a slot that does not exist is an error naming those that do, not an empty log.
func (f *fleet) hasSlot(name string, slot int) error {
	apps, err := f.pick(name)
	if err != nil {
		return err
	}
	var ids []string
	for _, a := range apps {
		sup := a.current()
		if sup == nil {
			continue
		}
		for _, r := range sup.Status() {
			if r.ID == slot {
				return nil
			}
			id := strconv.Itoa(r.ID)
			if len(apps) > 1 && a.name != "" {
				id = a.name + " " + id
			}
			ids = append(ids, id)
		}
	}
	who := "this supervisor has"
	if name != "" && name != "all" {
		who = "app " + name + " has"
	}
	if len(ids) == 0 {
		return fmt.Errorf("worker %d: %w: %s no running worker (supervisor status lists them)", slot, errNoWorker, who)
	}
	return fmt.Errorf("worker %d: %w: %s %s (supervisor status lists them)", slot, errNoWorker, who, strings.Join(ids, ", "))
}

// appLabel is what an app's lines show as APP: its name, or for the one app of a
// configuration without names its program's (as PM2 names an app after its script).
func appLabel(sp cluster.App) string {
	if sp.Name != "" || len(sp.Config.Command) == 0 {
		return sp.Name
	}
	return filepath.Base(sp.Config.Command[0])
}

// errLogFormat is -log-format's refusal.
func errLogFormat(v string) error {
	return fmt.Errorf("log-format: %q: want console (the default: readable lines, the apps' as ID|APP | line) or json (one JSON object per line, for a collector)", v)
}

// logsOptions are `supervisor logs`' flags of PM2's: --raw, --json, --timestamp [FORMAT],
// --err, --out.
type logsOptions struct {
	raw, json, errOnly, outOnly bool
	timestamp                   string // "" none; "true" the flag alone
	stamp                       *cluster.LogDateFormat
}

func (o *logsOptions) flags(fs *flag.FlagSet) {
	fs.BoolVar(&o.raw, "raw", false, "the apps' lines only, as they wrote them, without ID|APP (err lines to stderr, as pm2 logs --raw)")
	fs.BoolVar(&o.json, "json", false, "the apps' lines only, one JSON object each: message, timestamp, type (out or err), process_id, app_name (pm2 logs --json)")
	fs.Var((*timestampFlag)(&o.timestamp), "timestamp", "[FORMAT] put each app line's time in front, in day.js tokens as pm2 (default "+defaultTimestamp+"; --timestamp=FORMAT, or the next argument)")
	fs.BoolVar(&o.errOnly, "err", false, "the apps' stderr lines only (pm2 logs --err)")
	fs.BoolVar(&o.outOnly, "out", false, "the apps' stdout lines only (pm2 logs --out)")
}

// check refuses flags that exclude each other and compiles the timestamp's format.
func (o *logsOptions) check() error {
	switch {
	case o.raw && o.json:
		return errors.New("--raw and --json: choose one")
	case o.errOnly && o.outOnly:
		return errors.New("--err and --out: choose one (neither: both)")
	case o.timestamp != "" && (o.raw || o.json):
		return errors.New("--timestamp goes with neither --raw (the lines as written) nor --json (which has a timestamp field)")
	}
	var err error
	o.stamp, err = parseTimestamp(o.timestamp)
	return err
}

// query asks GET /logs for pm2Line objects of the lines wanted, which print renders.
func (o *logsOptions) query(q url.Values) {
	q.Set("format", printJSON)
	if o.raw || o.json {
		q.Set("apps", "1")
	}
	if o.errOnly {
		q.Set("type", cluster.StreamErr)
	}
	if o.outOnly {
		q.Set("type", cluster.StreamOut)
	}
}

// print renders the pm2Line objects of r to stdout (an err line with --raw to stderr)
// until r ends.
func (o *logsOptions) print(r io.Reader, stdout, stderr io.Writer) error {
	p := &logPrinter{mode: printPM2, stamp: o.stamp, escape: isTerminal(stdout)}
	if o.raw {
		p.mode = printRaw
	}
	if o.json {
		p.mode = printJSON
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20) // an event's entry can be long; a worker's line is cut at 4 KiB
	for sc.Scan() {
		var w pm2Line
		if err := json.Unmarshal(sc.Bytes(), &w); err != nil {
			return fmt.Errorf("decode a log line: %w", err)
		}
		p.print(stdout, stderr, fromWire(w))
	}
	return sc.Err()
}

// timestampFlag is --timestamp [FORMAT]: a flag that may stand alone ("true").
type timestampFlag string

func (t *timestampFlag) String() string     { return string(*t) }
func (t *timestampFlag) Set(v string) error { *t = timestampFlag(v); return nil }
func (t *timestampFlag) IsBoolFlag() bool   { return true }

// timestampArg joins --timestamp and the argument after it, as pm2's parser takes it for
// the format (`--timestamp HH:mm`), unless that argument is a flag or a slot number: Go's
// flag package takes a flag's value after a space only for flags that need one.
func timestampArg(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if (a == "--timestamp" || a == "-timestamp") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && !isNumber(args[i+1]) {
			a += "=" + args[i+1]
			i++
		}
		out = append(out, a)
	}
	return out
}

// isLabel reports whether v is the label of the one app without a name (its program's
// name, which its lines show as APP): `logs app.js` is then that app's log, as in pm2.
func (f *fleet) isLabel(v string) bool {
	return len(f.apps) == 1 && f.apps[0].name == "" && v == appLabel(cluster.App{Config: *f.apps[0].config()})
}
