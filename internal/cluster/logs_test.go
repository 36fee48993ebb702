package cluster

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// TestLineLoggerMergesJSON: a worker's structured line becomes an entry of the
// supervisor's log (its message, level and fields beside the slot), not JSON escaped in a
// string; anything else stays "worker output".
func TestLineLoggerMergesJSON(t *testing.T) {
	tests := []struct {
		name, line string
		want       []string // substrings of the logged entry
		absent     []string
	}{
		{"zap line", `{"level":"warn","ts":"2026-12-01T10:00:00.000Z","msg":"write owner: gone","worker":1,"pid":42,"key":"k"}`,
			[]string{`"level":"warn"`, `"msg":"write owner: gone"`, `"slot":1`, `"key":"k"`, `"worker":1`}, []string{`"line"`, `"pid":42`, `2026-12-01T10:00:00`}},
		{"float and nested", `{"msg":"stats","rate":1.5,"obj":{"a":[1,2]}}`,
			[]string{`"level":"info"`, `"msg":"stats"`, `"rate":1.5`, `"obj":{"a":[1,2]}`}, nil},
		{"unknown level", `{"level":"chatty","msg":"x"}`, []string{`"level":"info"`, `"msg":"x"`}, nil},
		{"plain text", `gunicorn booting worker`, []string{`"msg":"worker output"`, `"line":"gunicorn booting worker"`}, nil},
		{"json without msg", `{"a":1}`, []string{`"msg":"worker output"`}, nil},
		{"two objects", `{"msg":"a"}{"msg":"b"}`, []string{`"msg":"worker output"`}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&buf), zap.InfoLevel))
			w := &lineLogger{log: log.With(zap.Int("slot", 1), zap.Int("pid", 7))}
			w.Write([]byte(tc.line + "\n"))
			got := buf.String()
			for _, s := range tc.want {
				if !strings.Contains(got, s) {
					t.Errorf("logged %s\nwant %s in it", got, s)
				}
			}
			for _, s := range tc.absent {
				if strings.Contains(got, s) {
					t.Errorf("logged %s\nwant no %s", got, s)
				}
			}
		})
	}
}

// TestLineLoggerOutput: with Options.Output, each line goes there as written (with its
// slot, pid, stream, and log_date_format's stamp), and none to the log, a JSON one
// included.
func TestLineLoggerOutput(t *testing.T) {
	stamp, _ := parseDateFormat("[T]")
	tests := []struct {
		name  string
		stamp dateFormat
		in    []string // writes
		want  []string // lines given to Output
		cut   []bool
	}{
		{"lines across writes", nil, []string{"a\nb", "c\n", "\n"}, []string{"a", "bc"}, []bool{false, false}},
		{"stack trace", nil, []string{"Error: x\n    at f (a.js:1:2)\n    at g (a.js:3:4)\n"},
			[]string{"Error: x", "    at f (a.js:1:2)", "    at g (a.js:3:4)"}, []bool{false, false, false}},
		{"json stays a line", nil, []string{`{"level":"warn","msg":"m"}` + "\n"}, []string{`{"level":"warn","msg":"m"}`}, []bool{false}},
		{"stamped", stamp, []string{"up\n"}, []string{"T: up"}, []bool{false}},
		{"cut", nil, []string{strings.Repeat("x", maxLogLine+10) + "\n"}, []string{strings.Repeat("x", maxLogLine)}, []bool{true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&buf), zap.InfoLevel))
			var got []string
			var cut []bool
			w := &lineLogger{log: log, stamp: tc.stamp, slot: 3, pid: 42, stream: StreamErr, out: func(l OutputLine) {
				if l.Slot != 3 || l.PID != 42 || l.Stream != StreamErr || l.Time.IsZero() {
					t.Errorf("line %+v: want slot 3, pid 42, err, a time", l)
				}
				got, cut = append(got, string(l.Text)), append(cut, l.Truncated)
			}}
			for _, s := range tc.in {
				w.Write([]byte(s))
			}
			w.flush()
			if !slices.Equal(got, tc.want) || !slices.Equal(cut, tc.cut) {
				t.Errorf("Output got %q (cut %v), want %q (cut %v)", got, cut, tc.want, tc.cut)
			}
			if buf.Len() > 0 {
				t.Errorf("logged %s: want nothing with Output set", buf.String())
			}
		})
	}
}

// TestOutputStreams: a real worker's stdout and stderr lines reach Options.Output each
// with its stream (two pipes), and none is logged as "worker output".
func TestOutputStreams(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var lines []OutputLine
	_, logs := startClusterOpts(t, Config{Instances: 1}, Options{Output: func(l OutputLine) {
		mu.Lock()
		defer mu.Unlock()
		l.Text = bytes.Clone(l.Text)
		lines = append(lines, l)
	}})
	waitFor(t, 10*time.Second, "the worker's stderr line", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if l.Stream == StreamErr && strings.HasPrefix(string(l.Text), "fake worker up") && l.Slot == 0 && l.PID > 0 {
				return true
			}
		}
		return false
	})
	if strings.Contains(logs.String(), "worker output") {
		t.Errorf("a line logged as worker output besides Output:\n%s", logs)
	}
}
