package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/journey"
	"github.com/onehost/onehost/internal/srcaddr"
)

func TestSpreadLine(t *testing.T) {
	reconnects := int64(3)
	for _, tc := range []struct {
		name       string
		spread     srcaddr.Report
		rate       float64
		reconnects *int64
		want       string
	}{
		{"kernel's choice, all at once", srcaddr.Report{Conns: 10, MaxPerPair: 10}, 0, &reconnects,
			"connections: 10 from the kernel's choice of source address, opened all at once, 3 reconnects\n"},
		{"spread, paced", srcaddr.Report{Addrs: []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}, Auto: true, Conns: 50000, MaxPerPair: 12500},
			10000, &reconnects,
			"connections: 50,000 over 4 source addresses (127.0.0.2–127.0.0.5), ≤ 12,500 per pair, opened at 10,000/s, 3 reconnects\n"},
		{"one given address", srcaddr.Report{Addrs: []string{"10.0.0.5"}, Conns: 8, MaxPerPair: 8}, 0, &reconnects,
			"connections: 8 from source address 10.0.0.5, opened all at once, 3 reconnects\n"},
		{"scattered addresses, users", srcaddr.Report{Addrs: []string{"10.0.0.1", "10.0.0.9", "10.0.1.1", "10.0.2.1", "10.0.3.1"}, Conns: 20000, MaxPerPair: 4000}, 0, nil,
			"connections: 20,000 over 5 source addresses (10.0.0.1, 10.0.0.9, 10.0.1.1, … 2 more), ≤ 4,000 per pair\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := spreadLine(tc.spread, tc.rate, tc.reconnects); got != tc.want {
				t.Errorf("spreadLine:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestRunSpread runs the command with --local-addrs and checks the server's view and the
// report's.
func TestRunSpread(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]map[string]bool{} // client address -> its connections
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		mu.Lock()
		if seen[host] == nil {
			seen[host] = map[string]bool{}
		}
		seen[host][r.RemoteAddr] = true
		mu.Unlock()
		w.Write([]byte("ok"))
	}))
	srv.Start()
	t.Cleanup(srv.Close)
	out, err := runCmd(t, "-c", "6", "-d", "0.5", "-n", "--local-addrs", "127.0.0.2-127.0.0.4", "--connect-rate", "100", srv.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	if want := "connections: 6 over 3 source addresses (127.0.0.2–127.0.0.4), ≤ 2 per pair, opened at 100/s, 0 reconnects\n"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		if n := len(seen[a]); n != 2 {
			t.Errorf("server saw %d connections from %s, want 2 (all it saw: %v)", n, a, seen)
		}
	}
	if len(seen) != 3 {
		t.Errorf("server saw clients from %d addresses, want 3: %v", len(seen), seen)
	}
}

// TestUsersSpreadLine checks that `autocannon users` says how its connections were spread,
// right under the users.
func TestUsersSpreadLine(t *testing.T) {
	r := journey.Merge(journey.Result{Users: 16000, TimeScale: 1, Elapsed: time.Second,
		Spread: srcaddr.Report{Addrs: []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}, Auto: true, Conns: 16000, MaxPerPair: 4000}})
	var b strings.Builder
	printUsersResult(&b, usersOutput{Result: r})
	want := "users: 16000 (16000 user-equivalents)\nconnections: 16,000 over 4 source addresses (127.0.0.2–127.0.0.5), ≤ 4,000 per pair\n"
	if !strings.HasPrefix(b.String(), want) {
		t.Errorf("output starts\n%s\nwant\n%s", b.String(), want)
	}
}
