package cluster

import (
	"strings"
	"testing"
	"time"
)

func TestDateFormat(t *testing.T) {
	at := time.Date(2026, 12, 5, 6, 4, 9, 7e6, time.FixedZone("", -(4*3600+1800)))
	tests := []struct{ name, format, want string }{
		{"time: true", DefaultLogDateFormat, "2026-12-05T06:04:09"},
		{"with zone", "YYYY-MM-DD HH:mm:ss Z", "2026-12-05 06:04:09 -04:30"},
		{"milliseconds", "HH:mm:ss.SSS", "06:04:09.007"},
		{"names", "ddd, DD-MMM-YYYY, hh:mm:ss A ZZ", "Sat, 05-Dec-2026, 06:04:09 AM -0430"},
		{"long names, unpadded", "dddd D MMMM YY, h:m:s a", "Saturday 5 December 26, 6:4:9 am"},
		{"escaped text", "[at] HH[h]", "at 06h"},
		{"literal letters", "YYYY-MM-DD Q", "2026-12-05 Q"},
		{"epoch", "X x", "1796466849 1796466849007"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			df, err := parseDateFormat(tc.format)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(df.append(nil, at)); got != tc.want {
				t.Errorf("%q: %q, want %q", tc.format, got, tc.want)
			}
		})
	}
	if _, err := parseDateFormat("YYYY [open"); err == nil || !strings.Contains(err.Error(), "a [ without its ]") {
		t.Errorf("unclosed bracket: %v", err)
	}
}

// FuzzDateFormat: any format compiles or is refused without panicking, and formats any
// time.
func FuzzDateFormat(f *testing.F) {
	for _, s := range []string{DefaultLogDateFormat, "[x]YYYYMMMMddddSSSZZAaXx", "[", "hh h H"} {
		f.Add(s, int64(0))
	}
	f.Fuzz(func(t *testing.T, format string, unix int64) {
		df, err := parseDateFormat(format)
		if err != nil {
			return
		}
		df.append(nil, time.Unix(unix%(1<<40), 0))
	})
}
