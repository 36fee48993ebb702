package journey

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestJourneySpreadsSourceAddresses checks, from the server's view of its clients, that
// users beyond PerAddr per source address are spread over 127.0.0.2, .3, … round-robin.
func TestJourneySpreadsSourceAddresses(t *testing.T) {
	forEngines(t, testJourneySpreadsSourceAddresses)
}

func testJourneySpreadsSourceAddresses(t *testing.T, engine string) {
	var mu sync.Mutex
	seen := map[string]map[string]bool{} // remote IP -> remote ip:port seen
	fake := &fakeFeed{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		mu.Lock()
		if seen[host] == nil {
			seen[host] = map[string]bool{}
		}
		seen[host][r.RemoteAddr] = true
		mu.Unlock()
		fake.ServeHTTP(w, r)
	}))
	srv.Start()
	defer srv.Close()

	cfg := fastConfig(srv.URL, 9, 300*time.Millisecond, engine)
	cfg.PerAddr = 3 // 9 users: three addresses, three users each
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 {
		t.Fatal("no requests")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	if len(seen) != len(want) {
		t.Fatalf("server saw clients from %v, want exactly %v", keys(seen), want)
	}
	for _, a := range want {
		if n := len(seen[a]); n == 0 || n > 3 {
			t.Errorf("%s: %d connections, want 1..3 (users that reconnect would add more)", a, n)
		}
	}
	if res.Spread.MaxPerPair != 3 || len(res.Spread.Addrs) != 3 || !res.Spread.Auto {
		t.Errorf("result's spread = %+v, want 3 auto addresses, 3 per pair", res.Spread)
	}
}

func keys(m map[string]map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
