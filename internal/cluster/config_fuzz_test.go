package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The scalar parsers of the configuration, one fuzz target each (FuzzParseConfig in
// config_test.go drives the whole document). Each checks the range the parser promises and
// that what it accepts means what it says: the canonical spelling of the value parses back
// to the same value.

func FuzzParseByteSize(f *testing.F) {
	for _, s := range []string{"300M", "1G", "512k", "0", " 7 ", "4096G", "-1M", "1.5G", "M", "", "1T", "9223372036854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		b, err := ParseByteSize(in)
		if err != nil {
			return
		}
		if b < 0 || b > 1<<42 {
			t.Fatalf("ParseByteSize(%q) = %d, outside 0 to 4 TiB", in, b)
		}
		if again, err := ParseByteSize(strconv.FormatInt(int64(b), 10)); err != nil || again != b {
			t.Fatalf("ParseByteSize(%q) = %d, but its byte count parses as %d, %v", in, b, again, err)
		}
	})
}

func FuzzParseInstances(f *testing.F) {
	for _, s := range []string{"max", "-1", "0", "1", "1024", "1025", "-2", "MAX", " 2", "+3", "0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		n, err := ParseInstances(in)
		if err != nil {
			return
		}
		if n < -1 || n > MaxInstances {
			t.Fatalf("ParseInstances(%q) = %d, out of range", in, n)
		}
		if c := n.Count(); c < 1 || c > MaxInstances {
			t.Fatalf("ParseInstances(%q).Count() = %d workers", in, c)
		}
		if again, err := ParseInstances(strconv.Itoa(int(n))); err != nil || again != n {
			t.Fatalf("ParseInstances(%q) = %d, but %d parses as %d, %v", in, n, n, again, err)
		}
	})
}

func FuzzParseScale(f *testing.F) {
	for _, s := range []string{"4", "+1", "-1", "0", "+0", "-0", "zero", "", "1e3", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		n, rel, err := ParseScale(in)
		if err != nil {
			return
		}
		if !rel && n < 1 {
			t.Fatalf("ParseScale(%q) = absolute %d, want at least 1", in, n)
		}
		spelled := strconv.Itoa(n)
		if rel && n >= 0 {
			spelled = "+" + spelled
		}
		if n2, rel2, err := ParseScale(spelled); err != nil || n2 != n || rel2 != rel {
			t.Fatalf("ParseScale(%q) = %d %v, but %q parses as %d %v, %v", in, n, rel, spelled, n2, rel2, err)
		}
	})
}

// FuzzLoadConfigDurations puts one fuzzed scalar into every duration field of a file that
// LoadConfig reads (the path the supervisor takes): accepted values are within the field's
// documented range, and a value that is a plain integer means milliseconds.
func FuzzLoadConfigDurations(f *testing.F) {
	for _, s := range []string{"1.6s", "1600", "0", "500ms", "-1s", "1h", "86400000", "86400001", "1e3", "'2s'", "[1]", "{a: 1}", "0x10", "1_000", "\"\"", "~", "!!int 5"} {
		f.Add(s)
	}
	dir := f.TempDir()
	n := 0
	f.Fuzz(func(t *testing.T, in string) {
		if strings.ContainsAny(in, "\n\r") {
			return // one scalar on one line; FuzzParseConfig covers documents
		}
		n++
		path := filepath.Join(dir, fmt.Sprintf("c%d.yaml", n))
		for _, field := range []string{"kill_timeout", "listen_timeout", "restart_delay", "min_uptime", "heartbeat_timeout"} {
			if err := os.WriteFile(path, []byte(field+": "+in+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := LoadConfig(path)
			if err != nil {
				if !strings.Contains(err.Error(), path) {
					t.Fatalf("LoadConfig(%s: %q) = %v, want the error to name the file", field, in, err)
				}
				continue
			}
			d := map[string]Duration{"kill_timeout": c.KillTimeout, "listen_timeout": c.ListenTimeout,
				"restart_delay": c.RestartDelay, "min_uptime": c.MinUptime, "heartbeat_timeout": c.HeartbeatTimeout}[field]
			if d < 0 || d.D() > time.Hour {
				t.Fatalf("LoadConfig(%s: %q) = %v, outside the field's range", field, in, d.D())
			}
			if ms, err := strconv.ParseInt(strings.TrimSpace(in), 10, 64); err == nil && d.D() != time.Duration(ms)*time.Millisecond {
				t.Fatalf("LoadConfig(%s: %q) = %v, want %d ms", field, in, d.D(), ms)
			}
		}
		os.Remove(path)
	})
}
