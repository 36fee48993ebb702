package cron

import (
	"strings"
	"testing"
	"time"
)

func TestNext(t *testing.T) {
	utc := time.UTC
	// 2026-12-05 is a Saturday.
	from := time.Date(2026, 12, 5, 6, 41, 15, 0, utc)
	tests := []struct {
		name, expr string
		from       time.Time
		want       time.Time
	}{
		{"every minute", "* * * * *", from, time.Date(2026, 12, 5, 6, 42, 0, 0, utc)},
		{"every second", "* * * * * *", from, time.Date(2026, 12, 5, 6, 41, 16, 0, utc)},
		{"every 10 seconds", "*/10 * * * * *", from, time.Date(2026, 12, 5, 6, 41, 20, 0, utc)},
		{"03:00 daily", "0 3 * * *", from, time.Date(2026, 12, 6, 3, 0, 0, 0, utc)},
		{"@daily", "@daily", from, time.Date(2026, 12, 6, 0, 0, 0, 0, utc)},
		{"@hourly", "@HOURLY", from, time.Date(2026, 12, 5, 7, 0, 0, 0, utc)},
		{"@weekly on a Saturday", "@weekly", from, time.Date(2026, 12, 6, 0, 0, 0, 0, utc)},
		{"@monthly", "@monthly", from, time.Date(2027, 1, 1, 0, 0, 0, 0, utc)},
		{"@yearly", "@yearly", from, time.Date(2027, 1, 1, 0, 0, 0, 0, utc)},
		{"every 15 minutes", "*/15 * * * *", from, time.Date(2026, 12, 5, 6, 45, 0, 0, utc)},
		{"range with step", "0 8-18/4 * * *", from, time.Date(2026, 12, 5, 8, 0, 0, 0, utc)},
		{"a/n to the end", "50/5 * * * *", from, time.Date(2026, 12, 5, 6, 50, 0, 0, utc)},
		{"list", "5,40,45 * * * *", from, time.Date(2026, 12, 5, 6, 45, 0, 0, utc)},
		{"weekday names", "0 9 * * MON-FRI", from, time.Date(2026, 12, 7, 9, 0, 0, 0, utc)},
		{"sunday as 7", "0 0 * * 7", from, time.Date(2026, 12, 6, 0, 0, 0, 0, utc)},
		{"month name", "0 0 1 jan *", from, time.Date(2027, 1, 1, 0, 0, 0, 0, utc)},
		{"dom or dow when both set", "0 0 13 * FRI", from, time.Date(2026, 12, 11, 0, 0, 0, 0, utc)},
		{"dom and dow when dow is *", "0 0 13 * *", from, time.Date(2026, 12, 13, 0, 0, 0, 0, utc)},
		{"leap day", "0 0 29 2 *", from, time.Date(2028, 2, 29, 0, 0, 0, 0, utc)},
		{"strictly after", "41 6 * * *", time.Date(2026, 12, 5, 6, 41, 0, 0, utc), time.Date(2026, 12, 6, 6, 41, 0, 0, utc)},
		{"half-hour zone", "0 * * * *", time.Date(2026, 12, 5, 6, 10, 0, 0, time.FixedZone("IST", 5*3600+1800)),
			time.Date(2026, 12, 5, 7, 0, 0, 0, time.FixedZone("IST", 5*3600+1800))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Next(tc.from)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(tc.want) {
				t.Errorf("Next(%v) = %v, want %v", tc.from, got, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ name, expr, want string }{
		{"too few fields", "* * *", "3 fields: want 5 fields"},
		{"too many fields", "* * * * * * *", "7 fields"},
		{"minute out of range", "60 * * * *", "minute 60: out of range 0 to 59"},
		{"hour word", "0 noon * * *", `hour "noon": not a number from 0 to 23`},
		{"backwards range", "0 5-3 * * *", "range ends before it starts"},
		{"zero step", "*/0 * * * *", `step "0": want 1 to 59`},
		{"bad day name", "0 0 * * funday", `day of week "funday": not a number from 0 to 7 nor a name (SUN-SAT)`},
		{"empty list item", "1,,2 * * * *", "empty list item"},
		{"unknown macro", "@often", "unknown macro"},
		{"empty", "", "0 fields"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.expr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%q) error %v, want %q", tc.expr, err, tc.want)
			}
		})
	}
}

func TestNever(t *testing.T) {
	s, err := Parse("0 0 31 2 *")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(time.Now()); err != ErrNever {
		t.Fatalf("31 February: %v, want ErrNever", err)
	}
}

// FuzzParse: any input parses or errors without panicking, and a parsed schedule's Next is
// after its argument and matches it again (Next of one second before is itself).
func FuzzParse(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/5 1-3 1,15 jan-mar mon-fri", "0 0 29 2 *", "@daily", "1 2 3 4 5 6", "7-7/7 * * * 0-7"} {
		f.Add(s)
	}
	from := time.Date(2026, 12, 5, 6, 41, 15, 0, time.UTC)
	f.Fuzz(func(t *testing.T, expr string) {
		s, err := Parse(expr)
		if err != nil {
			return
		}
		next, err := s.Next(from)
		if err != nil {
			return
		}
		if !next.After(from) {
			t.Fatalf("%q: Next(%v) = %v, not after", expr, from, next)
		}
		again, err := s.Next(next.Add(-time.Second))
		if err != nil || !again.Equal(next) {
			t.Fatalf("%q: Next(%v) = %v, %v; want %v", expr, next.Add(-time.Second), again, err, next)
		}
	})
}
