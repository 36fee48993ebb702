package cli

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/onehost/onehost/internal/applog"
	"github.com/onehost/onehost/internal/cluster"
)

// TestTimestampArg: --timestamp takes the next argument as its format, as pm2's parser
// does, unless it is a flag or a slot number.
func TestTimestampArg(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args, want []string
	}{
		{"alone", []string{"--timestamp"}, []string{"--timestamp"}},
		{"format after", []string{"--timestamp", "HH:mm", "-n", "3"}, []string{"--timestamp=HH:mm", "-n", "3"}},
		{"flag after", []string{"-timestamp", "--raw"}, []string{"-timestamp", "--raw"}},
		{"slot after", []string{"--timestamp", "1"}, []string{"--timestamp", "1"}},
		{"with =", []string{"--timestamp=YYYY"}, []string{"--timestamp=YYYY"}},
		{"after --", []string{"--", "--timestamp", "x"}, []string{"--", "--timestamp", "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := timestampArg(tc.args); !slices.Equal(got, tc.want) {
				t.Errorf("timestampArg(%q) = %q, want %q", tc.args, got, tc.want)
			}
		})
	}
}

// FuzzLogLine: what GET /logs?format=json sends, `supervisor logs` reads back as the same
// line, and prints in every mode without failing; any bytes from the socket at most end
// the printing with an error.
func FuzzLogLine(f *testing.F) {
	f.Add("Error: boom", "err", 1, "api", "YYYY-MM-DD-HH:mm:ss")
	f.Add(`{"level":"info","msg":"x"}`, "out", 0, "printer", "[T]")
	f.Add("2026-12-05T08:28:27.789Z  INFO  worker started\n", "", -1, "", "")
	f.Add("\x00\xff\n", "out", 99999, "a|b", "[")
	f.Fuzz(func(t *testing.T, msg, stream string, slot int, label, stamp string) {
		if stream != "" {
			stream = []string{cluster.StreamOut, cluster.StreamErr}[len(stream)%2]
		}
		l := applog.Line{Label: label, Slot: slot, Stream: stream, Time: time.UnixMilli(1764923307789), Text: []byte(msg)}
		if stream == "" && !strings.HasSuffix(msg, "\n") {
			l.Text = append(l.Text, '\n') // an event's entry ends its line
		}
		w := l.Entry()
		b, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		var back applog.Entry
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if got := applog.FromEntry(back).Entry(); got != w && utf8.ValidString(msg) && utf8.ValidString(label) {
			t.Errorf("round trip: %+v, want %+v", got, w)
		}
		for _, o := range []logsOptions{{}, {raw: true}, {json: true}, {timestamp: stamp}} {
			if o.check() != nil {
				continue
			}
			var out, errb bytes.Buffer
			if err := o.print(bytes.NewReader(append(b, '\n')), &out, &errb); err != nil {
				t.Errorf("print %s: %v", b, err)
			}
			o.print(strings.NewReader(msg), &out, &errb) // not JSON: an error, no panic
		}
	})
}
