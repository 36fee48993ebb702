package loadgen

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func run(t *testing.T, cfg Config) *Result {
	t.Helper()
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

// ms converts a histogram value (µs) to milliseconds.
func ms(us int64) float64 { return float64(us) / 1000 }

func TestAmountIsExact(t *testing.T) {
	tests := []struct {
		name        string
		conns, pipe int
		amount      int64
		workers     int
	}{
		{name: "one connection", conns: 1, pipe: 1, amount: 100},
		{name: "pipelined", conns: 4, pipe: 3, amount: 1000},
		{name: "more connections than requests", conns: 20, pipe: 2, amount: 7},
		{name: "workers", conns: 6, pipe: 2, amount: 500, workers: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, func(int64, int64) reply { return ok })
			res := run(t, Config{URL: s.URL, Connections: tt.conns, Pipelining: tt.pipe, Amount: tt.amount, Workers: tt.workers})
			if res.Responses != tt.amount || res.Sent != tt.amount || s.requests.Load() != tt.amount {
				t.Errorf("responses %d, sent %d, server saw %d; want %d each", res.Responses, res.Sent, s.requests.Load(), tt.amount)
			}
			if got := res.Latency.TotalCount(); got != tt.amount {
				t.Errorf("latency count %d, want %d", got, tt.amount)
			}
			if res.StatusCodes[200] != tt.amount || res.Errors != 0 {
				t.Errorf("status codes %v, errors %d; want %d×200, no errors", res.StatusCodes, res.Errors, tt.amount)
			}
			if wantBytes := tt.amount * int64(len(ok.bytes)); res.Bytes != wantBytes {
				t.Errorf("bytes %d, want %d", res.Bytes, wantBytes)
			}
		})
	}
}

func TestRequestBytes(t *testing.T) {
	var mu sync.Mutex
	var got []string
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 4096)
		n, _ := c.Read(buf)
		mu.Lock()
		got = append(got, string(buf[:n]))
		mu.Unlock()
		c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
	}()
	url := "http://" + ln.Addr().String() + "/api/resource/123?x=1"
	res := run(t, Config{
		URL: url, Connections: 1, Amount: 1, Method: "PATCH",
		Headers: []Header{{"Content-Type", "application/json"}},
		Body:    []byte(`{"foo1":"bar"}`),
	})
	<-done
	want := "PATCH /api/resource/123?x=1 HTTP/1.1\r\nHost: " + ln.Addr().String() +
		"\r\nConnection: keep-alive\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n{\"foo1\":\"bar\"}"
	if len(got) != 1 || got[0] != want {
		t.Errorf("request %q, want %q", got, want)
	}
	if res.Responses != 1 {
		t.Errorf("responses %d, want 1", res.Responses)
	}
}

func TestFixedDelayPercentiles(t *testing.T) {
	const delay = 20 * time.Millisecond
	s := newTestServer(t, func(int64, int64) reply {
		time.Sleep(delay)
		return ok
	})
	res := run(t, Config{URL: s.URL, Connections: 2, Amount: 30})
	h := res.Latency
	// Every latency includes the delay; histogram precision is 3 significant digits, so a
	// recorded value can read up to 0.1 % low.
	if min := ms(h.Min()); min < 19.98 {
		t.Errorf("min latency %.3f ms, below the server's %v delay", min, delay)
	}
	// The generous upper bound only guards against gross misattribution (a busy machine
	// adds scheduling delay, never takes it away).
	if p50 := ms(h.ValueAtQuantile(50)); p50 > 200 {
		t.Errorf("p50 %.3f ms, want about %v", p50, delay)
	}
}

// TestStall checks the open loop's defence against coordinated omission: while the
// server stalls for a second, requests keep falling due, and their wait shows in the
// latencies. A closed loop only blames the requests that were in flight.
func TestStall(t *testing.T) {
	stallServer := func(t *testing.T) *testServer {
		var mu sync.Mutex
		var until time.Time
		return newTestServer(t, func(_, total int64) reply {
			mu.Lock()
			if total == 50 {
				until = time.Now().Add(time.Second)
			}
			wait := time.Until(until)
			mu.Unlock()
			time.Sleep(wait)
			return ok
		})
	}
	t.Run("rate", func(t *testing.T) {
		s := stallServer(t)
		res := run(t, Config{URL: s.URL, Connections: 2, Rate: 200, Duration: 2500 * time.Millisecond})
		if p99 := ms(res.Latency.ValueAtQuantile(99)); p99 < 500 {
			t.Errorf("rate mode p99 %.1f ms, want ≥ 500 ms after a 1 s stall", p99)
		}
		if res.Sent > 501 { // requests 0 to 500 fall due in [0, 2.5 s]
			t.Errorf("sent %d requests in 2.5 s at 200/s, more than the schedule's 500", res.Sent)
		}
	})
	t.Run("closed", func(t *testing.T) {
		s := stallServer(t)
		res := run(t, Config{URL: s.URL, Connections: 2, Duration: 2500 * time.Millisecond})
		if max := ms(res.Latency.Max()); max < 900 {
			t.Errorf("closed mode max %.1f ms, want the 1 s stall to show", max)
		}
		if res.Responses < 200 {
			t.Skipf("only %d responses: machine too busy to judge the percentiles", res.Responses)
		}
		if p90 := ms(res.Latency.ValueAtQuantile(90)); p90 > 500 {
			t.Errorf("closed mode p90 %.1f ms: the stall was blamed on requests never sent during it", p90)
		}
	})
}

func TestRateSchedule(t *testing.T) {
	s := newTestServer(t, func(int64, int64) reply { return ok })
	res := run(t, Config{URL: s.URL, Connections: 3, Rate: 100, Amount: 40})
	// 40 requests due at k/100 s take 0.39 s at least.
	if d := res.Duration(); d < 390*time.Millisecond {
		t.Errorf("40 requests at 100/s took %v, want ≥ 390 ms", d)
	}
	if res.Responses != 40 || res.Mode != "rate" {
		t.Errorf("responses %d mode %q, want 40 rate", res.Responses, res.Mode)
	}
}

// TestPipelinedInOrder checks that the i-th response on a connection is matched to the
// i-th request: the server numbers its answers through the status code (210 to 259, none of them bodiless) (and varies
// their framing and length), and every connection must see them in order.
func TestPipelinedInOrder(t *testing.T) {
	s := newTestServer(t, func(seq, _ int64) reply {
		body := strings.Repeat("x", int(seq%37))
		if seq%2 == 0 {
			return reply{bytes: fmt.Appendf(nil, "HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s", 210+seq%50, len(body), body)}
		}
		return reply{bytes: fmt.Appendf(nil, "HTTP/1.1 %d X\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", 210+seq%50, len(body)+1, body+"y")}
	})
	e, err := newEngine(Config{URL: s.URL, Connections: 3, Pipelining: 8, Amount: 3000})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[int][]int{}
	lastDue := map[int]int64{}
	var disorder atomic.Int64
	e.observe = func(id, status int, due int64) {
		mu.Lock()
		defer mu.Unlock()
		seen[id] = append(seen[id], status)
		if due < lastDue[id] {
			disorder.Add(1)
		}
		lastDue[id] = due
	}
	res, err := e.start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Responses != 3000 || res.Errors != 0 {
		t.Fatalf("responses %d errors %d, want 3000 and 0", res.Responses, res.Errors)
	}
	for id, statuses := range seen {
		for i, st := range statuses {
			if want := 210 + i%50; st != want {
				t.Fatalf("connection %d: response %d has status %d, want %d", id, i, st, want)
			}
		}
	}
	if n := disorder.Load(); n > 0 {
		t.Errorf("%d responses matched to a request sent after a later one's", n)
	}
}

func TestChunkedSplitWrites(t *testing.T) {
	// The body arrives in many small writes, cutting chunk lines and CRLFs apart.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	resp := []byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"3;name=val\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nTrailer: x\r\n\r\n")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 4096)
		for range 5 {
			if _, err := c.Read(buf); err != nil {
				return
			}
			for i := 0; i < len(resp); i += 3 {
				c.Write(resp[i:min(i+3, len(resp))])
				time.Sleep(time.Millisecond)
			}
		}
	}()
	res := run(t, Config{URL: "http://" + ln.Addr().String() + "/", Connections: 1, Amount: 5})
	wg.Wait()
	if res.Responses != 5 || res.Errors != 0 || res.Bytes != int64(5*len(resp)) {
		t.Errorf("responses %d errors %d bytes %d, want 5, 0, %d", res.Responses, res.Errors, res.Bytes, 5*len(resp))
	}
}

func TestErrorsAndReconnects(t *testing.T) {
	tests := []struct {
		name       string
		answer     func(seq, total int64) reply
		wantErrors bool
	}{
		{
			name: "server drops every 10th request",
			answer: func(seq, _ int64) reply {
				if seq == 9 {
					return reply{close: true}
				}
				return ok
			},
			wantErrors: true,
		},
		{
			name: "server sends garbage",
			answer: func(seq, _ int64) reply {
				if seq == 4 {
					return reply{bytes: []byte("garbage\r\n\r\n")}
				}
				return ok
			},
			wantErrors: true,
		},
		{
			name: "Connection: close after each response",
			answer: func(int64, int64) reply {
				return reply{bytes: []byte("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"), close: true}
			},
		},
		{
			name: "HTTP/1.0 body delimited by close",
			answer: func(int64, int64) reply {
				return reply{bytes: []byte("HTTP/1.0 200 OK\r\n\r\nuntil the end"), close: true}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, tt.answer)
			const amount = 200
			res := run(t, Config{URL: s.URL, Connections: 3, Pipelining: 2, Amount: amount})
			if got := res.Responses + res.Errors; got != amount {
				t.Errorf("responses %d + errors %d = %d, want the amount %d", res.Responses, res.Errors, got, amount)
			}
			if (res.Errors > 0) != tt.wantErrors {
				t.Errorf("errors %d, want errors: %v", res.Errors, tt.wantErrors)
			}
			if s.accepted.Load() < 2 {
				t.Errorf("server accepted %d connections, want reconnects", s.accepted.Load())
			}
		})
	}
}

func TestTimeouts(t *testing.T) {
	s := newTestServer(t, func(seq, _ int64) reply {
		if seq == 3 {
			return reply{hang: true}
		}
		return ok
	})
	res := run(t, Config{URL: s.URL, Connections: 2, Amount: 40, Timeout: 100 * time.Millisecond})
	if res.Timeouts == 0 || res.Errors < res.Timeouts {
		t.Errorf("timeouts %d errors %d, want timeouts counted, and in errors too", res.Timeouts, res.Errors)
	}
	if got := res.Responses + res.Errors; got != 40 {
		t.Errorf("responses %d + errors %d = %d, want 40", res.Responses, res.Errors, got)
	}
}

func TestNothingListening(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = Run(context.Background(), Config{URL: "http://" + addr + "/", Duration: time.Second})
	if err == nil || !strings.Contains(err.Error(), "connect to "+addr) {
		t.Errorf("err %v, want a connect error naming %s", err, addr)
	}
}

func TestBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "no URL", cfg: Config{}, want: "empty"},
		{name: "https", cfg: Config{URL: "https://example.com/"}, want: "only http"},
		{name: "no host", cfg: Config{URL: "http:///x"}, want: "no host"},
		{name: "bad port", cfg: Config{URL: "http://h:99999/"}, want: "bad port"},
		{name: "bad header", cfg: Config{URL: "http://h/", Headers: []Header{{"A b", "c"}}}, want: "bad header name"},
		{name: "header injection", cfg: Config{URL: "http://h/", Headers: []Header{{"A", "b\r\nc: d"}}}, want: "line break"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(context.Background(), tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestSamplesAndCancel(t *testing.T) {
	s := newTestServer(t, func(int64, int64) reply { return ok })
	ctx, cancel := context.WithTimeout(context.Background(), 350*time.Millisecond)
	defer cancel()
	var progress atomic.Int64
	res, err := Run(ctx, Config{
		URL: s.URL, Connections: 2, Duration: time.Hour, SampleInterval: 100 * time.Millisecond,
		Progress: func(Progress) { progress.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := res.Duration(); d > 10*time.Second {
		t.Errorf("canceled run lasted %v", d)
	}
	if len(res.Samples) == 0 || int64(len(res.Samples)) != progress.Load() {
		t.Fatalf("%d samples, %d progress calls; want some, equal", len(res.Samples), progress.Load())
	}
	var sum int64
	for _, sm := range res.Samples {
		sum += sm.Requests
	}
	if sum > res.Responses {
		t.Errorf("samples add up to %d requests, more than the %d responses", sum, res.Responses)
	}
	if res.Generator.Workers != 1 || res.Generator.UserSec+res.Generator.SysSec <= 0 {
		t.Errorf("generator %+v, want 1 worker and some CPU", res.Generator)
	}
}

// TestCheckBody: every whole body reaches Config.CheckBody with its Content-Encoding,
// chunked or not and pipelined, and the ones it refuses count as bad bodies and errors
// while the connection goes on.
func TestCheckBody(t *testing.T) {
	good := []byte("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\ngood")
	bad := []byte("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nba\r\n1\r\nd\r\n0\r\n\r\n")
	s := newTestServer(t, func(_, total int64) reply {
		if total%4 == 3 {
			return reply{bytes: bad}
		}
		return reply{bytes: good}
	})
	var mu sync.Mutex
	seen := map[string]int64{}
	check := func(coding string, body []byte) error {
		mu.Lock()
		seen[coding+" "+string(body)]++
		mu.Unlock()
		if string(body) != "good" {
			return errors.New("bad body")
		}
		return nil
	}
	const amount = 400
	res := run(t, Config{URL: s.URL, Connections: 2, Pipelining: 2, Amount: amount, CheckBody: check})
	if res.Responses != amount || res.BadBodies != amount/4 || res.Errors != amount/4 {
		t.Errorf("responses %d, bad bodies %d, errors %d; want %d, %d, %d", res.Responses, res.BadBodies, res.Errors, amount, amount/4, amount/4)
	}
	if want := map[string]int64{"gzip good": amount * 3 / 4, "gzip bad": amount / 4}; !maps.Equal(seen, want) {
		t.Errorf("bodies seen %v, want %v", seen, want)
	}
}
