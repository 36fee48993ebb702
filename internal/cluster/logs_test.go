package cluster

import (
	"bytes"
	"strings"
	"testing"

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
