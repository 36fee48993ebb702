package control

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestWorkerJSON: a worker's counters are null when it reports none (a program without our
// ipc), 0 when it reports 0, and the JSON reads back as it was.
func TestWorkerJSON(t *testing.T) {
	tests := []struct {
		name string
		in   Worker
		want string // a fragment of the JSON
	}{
		{"counted", Worker{ID: 1, Requests: 7, RPS: 2.5, Connections: 3}, `"requests":7,"rps":2.5,"connections":3`},
		{"counted zero", Worker{ID: 1}, `"requests":0,"rps":0,"connections":0`},
		{"not reported", Worker{ID: 1, NoCounters: true}, `"requests":null,"rps":null,"connections":null`},
		{"loops", Worker{ID: 1, Connections: 4, LoopConnections: []int64{2, 2}}, `"loop_connections":[2,2]`},
		{"not serving", Worker{Status: "not-serving", NotServing: "why", NoCounters: true}, `"status":"not-serving"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), tc.want) {
				t.Errorf("got %s, want it to contain %s", b, tc.want)
			}
			var back Worker
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, tc.in) {
				t.Errorf("round trip: got %+v, want %+v", back, tc.in)
			}
		})
	}
}
