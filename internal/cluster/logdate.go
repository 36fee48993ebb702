package cluster

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultLogDateFormat is the stamp PM2's `time: true` gives every line.
const DefaultLogDateFormat = "YYYY-MM-DDTHH:mm:ss"

// dateFormat is a log_date_format compiled: PM2 formats it with day.js, whose tokens these
// are (YYYY YY M MM MMM MMMM D DD d dd ddd dddd H HH h hh m mm s ss SSS Z ZZ A a X x, and
// [text] kept as is); anything else is literal, as in day.js.
type dateFormat []dateToken

type dateToken struct {
	tok  string // "" for literal text
	text string
}

// dayjsTokens, longest first so that MMMM wins over MM.
var dayjsTokens = []string{"YYYY", "MMMM", "dddd", "SSS", "MMM", "ddd", "YY", "MM", "DD", "dd", "HH", "hh", "mm", "ss", "ZZ",
	"M", "D", "d", "H", "h", "m", "s", "Z", "A", "a", "X", "x"}

// parseDateFormat compiles a day.js format. It fails only on an unclosed [.
func parseDateFormat(f string) (dateFormat, error) {
	var out dateFormat
	lit := func(s string) {
		if n := len(out); n > 0 && out[n-1].tok == "" {
			out[n-1].text += s
			return
		}
		out = append(out, dateToken{text: s})
	}
next:
	for len(f) > 0 {
		if f[0] == '[' {
			end := strings.IndexByte(f, ']')
			if end < 0 {
				return nil, fmt.Errorf("%q: a [ without its ]: day.js keeps text in [brackets] as is", f)
			}
			lit(f[1:end])
			f = f[end+1:]
			continue
		}
		for _, t := range dayjsTokens {
			if strings.HasPrefix(f, t) {
				out = append(out, dateToken{tok: t})
				f = f[len(t):]
				continue next
			}
		}
		lit(f[:1])
		f = f[1:]
	}
	return out, nil
}

// append writes t in the format to b.
func (df dateFormat) append(b []byte, t time.Time) []byte {
	pad := func(b []byte, n, width int) []byte {
		s := strconv.Itoa(n)
		for i := len(s); i < width; i++ {
			b = append(b, '0')
		}
		return append(b, s...)
	}
	for _, d := range df {
		switch d.tok {
		case "":
			b = append(b, d.text...)
		case "YYYY":
			b = pad(b, t.Year(), 4)
		case "YY":
			b = pad(b, t.Year()%100, 2)
		case "MMMM":
			b = append(b, t.Month().String()...)
		case "MMM":
			b = append(b, t.Month().String()[:3]...)
		case "MM":
			b = pad(b, int(t.Month()), 2)
		case "M":
			b = strconv.AppendInt(b, int64(t.Month()), 10)
		case "DD":
			b = pad(b, t.Day(), 2)
		case "D":
			b = strconv.AppendInt(b, int64(t.Day()), 10)
		case "dddd":
			b = append(b, t.Weekday().String()...)
		case "ddd":
			b = append(b, t.Weekday().String()[:3]...)
		case "dd":
			b = append(b, t.Weekday().String()[:2]...)
		case "d":
			b = strconv.AppendInt(b, int64(t.Weekday()), 10)
		case "HH":
			b = pad(b, t.Hour(), 2)
		case "H":
			b = strconv.AppendInt(b, int64(t.Hour()), 10)
		case "hh", "h":
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			b = pad(b, h, len(d.tok))
		case "mm":
			b = pad(b, t.Minute(), 2)
		case "m":
			b = strconv.AppendInt(b, int64(t.Minute()), 10)
		case "ss":
			b = pad(b, t.Second(), 2)
		case "s":
			b = strconv.AppendInt(b, int64(t.Second()), 10)
		case "SSS":
			b = pad(b, t.Nanosecond()/1e6, 3)
		case "Z":
			b = t.AppendFormat(b, "-07:00")
		case "ZZ":
			b = t.AppendFormat(b, "-0700")
		case "A":
			b = t.AppendFormat(b, "PM")
		case "a":
			b = t.AppendFormat(b, "pm")
		case "X":
			b = strconv.AppendInt(b, t.Unix(), 10)
		case "x":
			b = strconv.AppendInt(b, t.UnixMilli(), 10)
		}
	}
	return b
}

// LogDateFormat is a day.js format compiled, for the stamps of others than the workers'
// lines: `supervisor logs --timestamp FORMAT` (PM2's, the same tokens).
type LogDateFormat struct{ df dateFormat }

// ParseLogDateFormat compiles a day.js format (see dateFormat); it fails only on an
// unclosed [.
func ParseLogDateFormat(f string) (LogDateFormat, error) {
	df, err := parseDateFormat(f)
	return LogDateFormat{df}, err
}

// AppendFormat writes t in the format to b.
func (f LogDateFormat) AppendFormat(b []byte, t time.Time) []byte { return f.df.append(b, t) }
