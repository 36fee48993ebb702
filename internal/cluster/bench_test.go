package cluster

import (
	"testing"

	"go.uber.org/zap"
)

// BenchmarkLineLogger: every line a worker writes passes here.
func BenchmarkLineLogger(b *testing.B) {
	w := &lineLogger{log: zap.NewNop()}
	line := []byte(`{"level":"info","ts":"2026-11-30T00:57:22.589Z","msg":"descriptor limit","worker":0}` + "\n")
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		w.Write(line)
	}
}

func TestAllocationBudgets(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	tests := []struct {
		name   string
		budget float64
		f      func()
	}{
		{"lineLogger.Write with the level off", 0, func() {
			w := lineLoggerForBudget
			w.Write([]byte("a line\n"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := testing.AllocsPerRun(200, tt.f); got > tt.budget {
				t.Errorf("%s: %v allocations per call, budget %v", tt.name, got, tt.budget)
			}
		})
	}
}

var lineLoggerForBudget = &lineLogger{log: zap.NewNop()}
