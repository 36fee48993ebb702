package applog

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestAppendPrintable(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text, é and 日本", "plain text, é and 日本"},
		{"tab\tkept", "tab\tkept"},
		{"\x1b[2J\x07\x00\r\n\x7f", `\x1b[2J\x07\x00\x0d\x0a\x7f`},
		{"c1 \u0085 \u009b", `c1 \u0085 \u009b`},
		{"bad \xff\x9b end", `bad \xff\x9b end`},
	} {
		if got := string(AppendPrintable(nil, []byte(tc.in))); got != tc.want {
			t.Errorf("AppendPrintable(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestLogsQuery: GET /logs's parameters, as the CLI and curl send them: timestamp=true is
// the default format there too (as `logs --timestamp` alone), false none.
func TestLogsQuery(t *testing.T) {
	at := time.Date(2026, 12, 6, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name    string
		query   string
		stamp   string // the printer's stamp of at, "" for none
		appOnly bool
		err     string
	}{
		{"none", "", "", false, ""},
		{"true: the default format", "timestamp=true", "2026-12-06-03:04:05", false, ""},
		{"false", "timestamp=false", "", false, ""},
		{"a format", "timestamp=HH:mm", "03:04", false, ""},
		{"raw is the apps' lines", "format=raw", "", true, ""},
		{"apps=1", "apps=1&type=err", "", true, ""},
		{"unclosed bracket", "timestamp=[HH", "", false, "timestamp"},
		{"unknown format", "format=xml", "", false, "format"},
		{"unknown type", "type=all", "", false, "type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			var sel Filter
			p, err := ParseQuery(q, &sel)
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err+":") {
					t.Errorf("error %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var stamp string
			if p.Stamp != nil {
				stamp = string(p.Stamp.AppendFormat(nil, at))
			}
			if stamp != tc.stamp || sel.AppOnly != tc.appOnly {
				t.Errorf("stamp %q, apps only %v; want %q, %v", stamp, sel.AppOnly, tc.stamp, tc.appOnly)
			}
		})
	}
}
