package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/onehost/onehost/internal/applog"
	"github.com/onehost/onehost/internal/cluster"
)

// The apps' output as PM2 prints it (pm2 logs, pm2-runtime): each line the app writes is a
// line of its own, `ID|APP | line`, never an entry with the line escaped in a field, so
// that a stack trace reads as one and `logs --raw` gives back exactly what the app wrote.
// The supervisor's own events stay zap entries (-log-format console or json) between them.

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
	fs.Var((*timestampFlag)(&o.timestamp), "timestamp", "[FORMAT] put each app line's time in front, in day.js tokens as pm2 (default "+applog.DefaultTimestamp+"; --timestamp=FORMAT, or the next argument)")
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
	o.stamp, err = applog.ParseTimestamp(o.timestamp)
	return err
}

// query asks GET /logs for applog.Entry objects of the lines wanted, which print renders.
func (o *logsOptions) query(q url.Values) {
	q.Set("format", applog.FormatJSON)
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

// print renders the applog.Entry objects of r to stdout (an err line with --raw to stderr)
// until r ends.
func (o *logsOptions) print(r io.Reader, stdout, stderr io.Writer) error {
	p := &applog.Printer{Mode: applog.FormatPM2, Stamp: o.stamp, Escape: applog.IsTerminal(stdout)}
	if o.raw {
		p.Mode = applog.FormatRaw
	}
	if o.json {
		p.Mode = applog.FormatJSON
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20) // an event's entry can be long; a worker's line is cut at 4 KiB
	for sc.Scan() {
		var w applog.Entry
		if err := json.Unmarshal(sc.Bytes(), &w); err != nil {
			return fmt.Errorf("decode a log line: %w", err)
		}
		p.Print(stdout, stderr, applog.FromEntry(w))
	}
	return sc.Err()
}

// timestampFlag is --timestamp [FORMAT]: a flag that may stand alone ("true").
type timestampFlag string

func (t *timestampFlag) String() string { return string(*t) }

func (t *timestampFlag) Set(v string) error { *t = timestampFlag(v); return nil }

func (t *timestampFlag) IsBoolFlag() bool { return true }

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
	return len(f.apps) == 1 && f.apps[0].name == "" && v == applog.Label(cluster.App{Config: *f.apps[0].config()})
}
