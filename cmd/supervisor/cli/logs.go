package cli

import (
	"bufio"
	"context"
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
	"github.com/onehost/onehost/internal/control"
)

// Logs is `supervisor logs [APP] [ID] [-f] [-n|--lines 15] [--raw|--json] [--timestamp
// [FORMAT]] [--err|--out]`, as `pm2 logs`: the last lines the supervisor keeps (its own and
// its workers', or one app's, one slot's), and with -f every new one until interrupted.
func Logs(ctx context.Context, env Env, args []string) error {
	fs := flags(env, "logs")
	socket := socketFlag(fs, env)
	lines := fs.Int("n", 15, "how many of the last lines to print (0: all the supervisor keeps, 2,000)")
	follow := fs.Bool("f", false, "then keep printing new lines until interrupted (pm2 logs)")
	fs.IntVar(lines, "lines", 15, "the same as -n (pm2 logs --lines N)")
	nostream := fs.Bool("nostream", false, "print the last lines and return, as without -f (pm2 logs --nostream)")
	var lo logsOptions
	lo.flags(fs)
	args = timestampArg(args)
	var pos []string
	for len(args) > 0 && (args[0] == "" || args[0][0] != '-') {
		pos, args = append(pos, args[0]), args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	// logs takes its flags anywhere, as pm2 logs (`logs -socket S api --lines 5 --err`).
	for rest := fs.Args(); len(rest) > 1; rest = fs.Args() {
		pos = append(pos, rest[0])
		if err := fs.Parse(timestampArg(rest[1:])); err != nil {
			return err
		}
	}
	pos = append(pos, fs.Args()...)
	c, err := client(fs, socket, env)
	if err != nil {
		return err
	}
	var app, slot string
	for i, a := range pos { // [APP] [SLOT]
		switch {
		case i > 1 || slot != "":
			return fmt.Errorf("logs: unexpected argument %q: want [APP] [SLOT]", a)
		case isNumber(a):
			if n, _ := strconv.Atoi(a); n < 0 {
				return fmt.Errorf("logs: %q is not a slot number (supervisor status lists them)", a)
			}
			slot = a
		case i == 0:
			app = a
		default:
			return fmt.Errorf("logs: %q is not a slot number (supervisor status lists them)", a)
		}
	}
	if *nostream && *follow {
		return fmt.Errorf("logs: -f and --nostream: choose one (--nostream is what logs does without -f)")
	}
	if *lines < 0 {
		return fmt.Errorf("logs: -n %d: want a count >= 0", *lines)
	}
	if err := lo.check(); err != nil {
		return fmt.Errorf("logs: %w", err)
	}
	q := control.AppQuery(app)
	q.Set("n", strconv.Itoa(*lines))
	if slot != "" {
		q.Set("slot", slot)
	}
	if *follow {
		q.Set("follow", "1")
	}
	lo.query(q)
	body, err := c.Logs(ctx, q)
	if err != nil {
		return prefixed("logs", err)
	}
	defer body.Close()
	if err := lo.print(body, env.Stdout, env.Stderr); err != nil && ctx.Err() == nil { // until the end, or ^C with -f
		return fmt.Errorf("logs: %w", err)
	}
	return nil
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
