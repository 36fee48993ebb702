// Package cron parses cron expressions as PM2's cron_restart takes them and says when one
// next fires.
//
// An expression has five fields (minute hour day-of-month month day-of-week, crontab(5))
// or six with a leading seconds field, as PM2's cron library (croner) also accepts. Each
// field is `*`, a number, a range `a-b`, a step `*/n`, `a-b/n` or `a/n`, or a comma
// list of those; months and weekdays may be named (JAN-DEC, SUN-SAT, any case), and
// weekday 7 is Sunday as 0 is. The macros @yearly (@annually), @monthly, @weekly, @daily
// (@midnight) and @hourly stand for their usual expressions. When both day-of-month and
// day-of-week are restricted, a day matching either fires, as in Vixie cron; otherwise a
// day must match both.
package cron

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Schedule is a parsed expression. The zero value never fires.
type Schedule struct {
	second, minute, hour, dom, month, dow uint64 // bit i set: value i matches
	domStar, dowStar                      bool   // the field was a bare `*` (or `?`): unrestricted
}

type field struct {
	name     string
	min, max int
	names    []string // names[i] is value min+i; nil: numbers only
}

var (
	fSecond = field{"second", 0, 59, nil}
	fMinute = field{"minute", 0, 59, nil}
	fHour   = field{"hour", 0, 23, nil}
	fDom    = field{"day of month", 1, 31, nil}
	fMonth  = field{"month", 1, 12, []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}}
	fDow    = field{"day of week", 0, 7, []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun"}}
)

var macros = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
	"@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

// syntax is what every error ends with: how to write one.
const syntax = "want 5 fields (minute hour day-of-month month day-of-week, e.g. \"0 3 * * *\" for 03:00 daily) or 6 with seconds first, or @hourly, @daily, @weekly, @monthly, @yearly"

// Parse reads an expression.
func Parse(expr string) (Schedule, error) {
	e := strings.TrimSpace(expr)
	if m, ok := macros[strings.ToLower(e)]; ok {
		e = m
	} else if strings.HasPrefix(e, "@") {
		return Schedule{}, fmt.Errorf("%q: unknown macro: %s", expr, syntax)
	}
	fs := strings.Fields(e)
	switch len(fs) {
	case 5:
		fs = append([]string{"0"}, fs...)
	case 6:
	default:
		return Schedule{}, fmt.Errorf("%q: %d fields: %s", expr, len(fs), syntax)
	}
	var s Schedule
	var err error
	for i, f := range []struct {
		spec field
		out  *uint64
		star *bool
	}{{fSecond, &s.second, nil}, {fMinute, &s.minute, nil}, {fHour, &s.hour, nil},
		{fDom, &s.dom, &s.domStar}, {fMonth, &s.month, nil}, {fDow, &s.dow, &s.dowStar}} {
		if *f.out, err = parseField(fs[i], f.spec); err != nil {
			return Schedule{}, fmt.Errorf("%q: %w: %s", expr, err, syntax)
		}
		if f.star != nil {
			*f.star = fs[i] == "*" || fs[i] == "?"
		}
	}
	if s.dow&(1<<7) != 0 { // 7 is Sunday too
		s.dow |= 1
		s.dow &^= 1 << 7
	}
	return s, nil
}

// parseField reads one field into a bit set.
func parseField(text string, f field) (uint64, error) {
	var bits uint64
	for _, part := range strings.Split(text, ",") {
		if part == "" {
			return 0, fmt.Errorf("%s %q: empty list item", f.name, text)
		}
		rng, stepText, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 || n > f.max {
				return 0, fmt.Errorf("%s %q: step %q: want 1 to %d", f.name, part, stepText, f.max)
			}
			step = n
		}
		lo, hi := f.min, f.max
		switch {
		case rng == "*" || rng == "?":
		default:
			a, b, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = value(a, f); err != nil {
				return 0, err
			}
			hi = lo
			if isRange {
				if hi, err = value(b, f); err != nil {
					return 0, err
				}
				if hi < lo {
					return 0, fmt.Errorf("%s %q: range ends before it starts", f.name, part)
				}
			} else if hasStep { // a/n: from a to the end
				hi = f.max
			}
		}
		for v := lo; v <= hi; v += step {
			bits |= 1 << uint(v)
		}
	}
	return bits, nil
}

// value reads a number or a name of field f.
func value(text string, f field) (int, error) {
	if n, err := strconv.Atoi(text); err == nil {
		if n < f.min || n > f.max {
			return 0, fmt.Errorf("%s %d: out of range %d to %d", f.name, n, f.min, f.max)
		}
		return n, nil
	}
	for i, name := range f.names {
		if strings.EqualFold(text, name) {
			return f.min + i, nil
		}
	}
	if f.names != nil {
		return 0, fmt.Errorf("%s %q: not a number from %d to %d nor a name (%s-%s)", f.name, text, f.min, f.max,
			strings.ToUpper(f.names[0]), strings.ToUpper(f.names[len(f.names)-2]))
	}
	return 0, fmt.Errorf("%s %q: not a number from %d to %d", f.name, text, f.min, f.max)
}

// ErrNever: the schedule matches no time in the years searched (31 February, say).
var ErrNever = errors.New("the expression matches no date")

// searchYears bounds Next: a schedule that matches nothing within it never will (the
// calendar repeats every 400 years, and only a leap-day schedule needs more than one).
const searchYears = 8

// Next returns the first time after t (strictly, to the second) that s matches, in t's
// location, or ErrNever.
func (s Schedule) Next(t time.Time) (time.Time, error) {
	loc := t.Location()
	t = t.Truncate(time.Second).Add(time.Second)
	end := t.AddDate(searchYears, 0, 0)
	for t.Before(end) {
		switch {
		case s.month&(1<<uint(t.Month())) == 0:
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, loc)
		case !s.dayMatches(t):
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, loc)
		case s.hour&(1<<uint(t.Hour())) == 0:
			// By the calendar, not Truncate: zones whose offset is not whole hours.
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour()+1, 0, 0, 0, loc)
		case s.minute&(1<<uint(t.Minute())) == 0:
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute()+1, 0, 0, loc)
		case s.second&(1<<uint(t.Second())) == 0:
			t = t.Add(time.Second)
		default:
			return t, nil
		}
	}
	return time.Time{}, ErrNever
}

func (s Schedule) dayMatches(t time.Time) bool {
	dom := s.dom&(1<<uint(t.Day())) != 0
	dow := s.dow&(1<<uint(t.Weekday())) != 0
	if s.domStar || s.dowStar {
		return dom && dow
	}
	return dom || dow
}
