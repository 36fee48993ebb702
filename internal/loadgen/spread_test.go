package loadgen

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestSpreadSourceAddresses checks, from the server's view of its clients, which source
// addresses the connections came from and how many from each.
func TestSpreadSourceAddresses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		want    map[string]int // connections the server accepted, by client address
		perPair int
		auto    bool
	}{
		{"few: the kernel's choice", Config{Connections: 3, PerAddr: 3},
			map[string]int{"127.0.0.1": 3}, 3, false},
		{"over three addresses", Config{Connections: 9, PerAddr: 3},
			map[string]int{"127.0.0.2": 3, "127.0.0.3": 3, "127.0.0.4": 3}, 3, true},
		{"uneven, two workers", Config{Connections: 7, PerAddr: 3, Workers: 2},
			map[string]int{"127.0.0.2": 3, "127.0.0.3": 2, "127.0.0.4": 2}, 3, true},
		{"given addresses", Config{Connections: 4, LocalAddrs: []netip.Addr{netip.MustParseAddr("127.0.0.7"), netip.MustParseAddr("127.0.0.9")}},
			map[string]int{"127.0.0.7": 2, "127.0.0.9": 2}, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, func(int64, int64) reply { return ok })
			cfg := tc.cfg
			// A duration, not an amount: every connection opens however late its loop
			// starts.
			cfg.URL, cfg.Duration = s.URL, 300*time.Millisecond
			res := run(t, cfg)
			if res.Responses == 0 || res.Errors != 0 || res.Reconnects != 0 {
				t.Fatalf("responses %d, errors %d, reconnects %d; want some, 0, 0", res.Responses, res.Errors, res.Reconnects)
			}
			s.mu.Lock()
			got := maps.Clone(s.byIP)
			s.mu.Unlock()
			if !maps.Equal(got, tc.want) {
				t.Errorf("server accepted %v, want %v", got, tc.want)
			}
			sp := res.Spread
			if sp.Conns != cfg.Connections || sp.MaxPerPair() != tc.perPair || sp.Auto != tc.auto {
				t.Errorf("result's spread: %d connections, %d per pair, auto %v; want %d, %d, %v",
					sp.Conns, sp.MaxPerPair(), sp.Auto, cfg.Connections, tc.perPair, tc.auto)
			}
		})
	}
}

func TestUnusableLocalAddress(t *testing.T) {
	s := newTestServer(t, func(int64, int64) reply { return ok })
	// TEST-NET-1: no interface of this host has it, so bind() must fail.
	cfg := Config{URL: s.URL, Amount: 10, LocalAddrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}}
	if _, err := Run(context.Background(), cfg); err == nil {
		t.Fatal("Run from an address this host does not have: no error")
	}
}

// TestConnectRate checks the pacing of the first connects against the loops' own record
// of when each started: the k-th connect of the run (in time) never before start + k/rate.
// That bound holds however busy the machine is (a late loop only connects later), so the
// test cannot flake; it also means opening N connections takes at least (N-1)/rate.
func TestConnectRate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      Config
		wantRate float64 // the pace reported; 0: all at once
	}{
		{"paced, one worker", Config{Connections: 40, ConnectRate: 200}, 200},
		{"paced, three workers", Config{Connections: 40, ConnectRate: 200, Workers: 3}, 200},
		{"default above the burst", Config{Connections: ConnectBurst + 200}, DefaultConnectRate},
		{"default within the burst: all at once", Config{Connections: 50}, 0},
		{"unbounded", Config{Connections: ConnectBurst + 200, ConnectRate: -1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, func(int64, int64) reply { return ok })
			cfg := tc.cfg
			cfg.URL, cfg.Duration = s.URL, time.Second
			e, err := newEngine(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			first := map[int]int64{} // connection -> its first connect
			e.onConnect = func(id int, at int64) {
				mu.Lock()
				defer mu.Unlock()
				if _, ok := first[id]; !ok {
					first[id] = at
				}
			}
			res, err := e.start(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.ConnectRate != tc.wantRate {
				t.Errorf("connect rate %v, want %v", res.ConnectRate, tc.wantRate)
			}
			mu.Lock()
			defer mu.Unlock()
			// Connection 0 was dialed before the run started; the loops made the rest.
			if len(first) != cfg.Connections-1 {
				t.Fatalf("%d connections made a first connect, want %d", len(first), cfg.Connections-1)
			}
			at := slices.Sorted(maps.Values(first))
			for i, a := range at {
				k := i + 1 // connection 0 is position 0
				if early := e.openAt(k) - a; early > 0 {
					t.Fatalf("connect %d of the run started %v before start + %d/rate", k, time.Duration(early), k)
				}
			}
			if tc.wantRate > 0 {
				min := time.Duration(float64(cfg.Connections-1) / tc.wantRate * float64(time.Second))
				if took := time.Duration(at[len(at)-1] - e.t0); took < min {
					t.Errorf("opened %d connections in %v, want at least %v", cfg.Connections, took, min)
				}
			}
		})
	}
}

// TestReconnectsCounted checks that every connect after a connection's first is counted,
// against what the server accepted.
func TestReconnectsCounted(t *testing.T) {
	closeAfter := func(every int64) func(seq, total int64) reply {
		return func(seq, _ int64) reply {
			if (seq+1)%every == 0 {
				return reply{bytes: []byte("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"), close: true}
			}
			return ok
		}
	}
	for _, tc := range []struct {
		name     string
		answer   func(seq, total int64) reply
		min, max int64 // reconnects
	}{
		{"keep-alive: none", func(int64, int64) reply { return ok }, 0, 0},
		// 100 requests, one per connection: 2 first connects, 98 reconnects, and the
		// other connection's last one, which may find the amount already spent.
		{"closed after each response", closeAfter(1), 98, 99},
		{"closed after every 10th response", closeAfter(10), 8, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, tc.answer)
			res := run(t, Config{URL: s.URL, Connections: 2, Amount: 100})
			if res.Responses != 100 || res.Errors != 0 {
				t.Fatalf("responses %d errors %d, want 100 and 0", res.Responses, res.Errors)
			}
			if res.Reconnects < tc.min || res.Reconnects > tc.max {
				t.Errorf("%d reconnects, want %d..%d", res.Reconnects, tc.min, tc.max)
			}
			// The server may not have accepted the last connect yet, never more.
			if acc := s.accepted.Load(); acc > 2+res.Reconnects || acc < 2+res.Reconnects-1 {
				t.Errorf("server accepted %d connections; 2 first connects and %d reconnects", acc, res.Reconnects)
			}
		})
	}
}
