package cluster

import (
	"testing"
	"time"
)

func TestParseNodeMsg(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		ok         bool
		want       nodeMsg
	}{
		{"stats", `{"onehost":"stats","requests":12,"connections":3}`, true, nodeMsg{Onehost: "stats", Requests: 12, Connections: 3}},
		{"host", `{"onehost":"host","host":"localhost","bound":"0.0.0.0","kept":true}`, true, nodeMsg{Onehost: "host", Host: "localhost", Bound: "0.0.0.0", Kept: true}},
		{"listening is not one", `"onehost:listening"`, false, nodeMsg{}},
		{"the app's own message", `{"cmd":"x","data":1}`, false, nodeMsg{}},
		{"Node's own", `{"cmd":"NODE_HANDLE_ACK"}`, false, nodeMsg{}},
		{"empty onehost", `{"onehost":""}`, false, nodeMsg{}},
		{"broken", `{"onehost":"stats",`, false, nodeMsg{}},
		{"negative requests", `{"onehost":"stats","requests":-1}`, false, nodeMsg{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseNodeMsg([]byte(tc.line))
			if ok != tc.ok || (ok && got != tc.want) {
				t.Errorf("parseNodeMsg(%s) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func FuzzParseNodeMsg(f *testing.F) {
	f.Add([]byte(`{"onehost":"stats","requests":12,"connections":3}`))
	f.Add([]byte(`{"onehost":"host","host":"::1","bound":"::","kept":true}`))
	f.Add([]byte(`"ready"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, ok := parseNodeMsg(b); ok && m.Onehost == "" {
			t.Errorf("accepted %q with no onehost", b)
		}
	})
}

func TestSameHost(t *testing.T) {
	for _, tc := range []struct {
		host, bound string
		want        bool
	}{
		{"localhost", "127.0.0.1", true},
		{"localhost", "::1", true},
		{"LOCALHOST", "::ffff:127.0.0.1", true},
		{"localhost", "10.0.0.1", false},
		{"127.0.0.1", "::ffff:127.0.0.1", true},
		{"::1", "::1", true},
		{"10.0.0.1", "10.0.0.2", false},
		{"example.com", "10.0.0.2", false},
		{"localhost", "", false},
	} {
		if got := sameHost(tc.host, tc.bound); got != tc.want {
			t.Errorf("sameHost(%q, %q) = %v, want %v", tc.host, tc.bound, got, tc.want)
		}
	}
}

func TestNodeIdleGrace(t *testing.T) {
	for _, tc := range []struct {
		name      string
		kill, out time.Duration
	}{
		{"PM2's kill_timeout: half of it", 1600 * time.Millisecond, 800 * time.Millisecond},
		{"short kill_timeout: half of it", 400 * time.Millisecond, 200 * time.Millisecond},
		{"long kill_timeout: 1 s", 30 * time.Second, time.Second},
	} {
		if got := nodeIdleGrace(tc.kill); got != tc.out {
			t.Errorf("%s: nodeIdleGrace(%v) = %v, want %v", tc.name, tc.kill, got, tc.out)
		}
	}
}
