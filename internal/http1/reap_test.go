package http1

import (
	"io"
	"strconv"
	"testing"
	"time"
)

// TestTimeouts: the reaper enforces each deadline per wait, not per connection, and to
// within one period (an eighth of the shorter read timeout here).
func TestTimeouts(t *testing.T) { forTransports(t, testTimeouts) }

func testTimeouts(t *testing.T, transport string) {
	tests := []struct {
		name       string
		idle, read time.Duration
		// send is written and its answer read (unless wantStatus is 408), then the client
		// waits pause; all that times over. then, if any, is written after the last pause.
		send  string
		pause time.Duration
		times int
		then  string
		// wantStatus is each answer's status; wantClose: the server closed at the end.
		wantStatus int
		wantClose  bool
	}{
		{
			name: "busy keep-alive outlives the idle timeout",
			idle: 300 * time.Millisecond,
			send: "GET /x HTTP/1.1\r\nHost: h\r\n\r\n", pause: 100 * time.Millisecond,
			times:      12,                   // 1.2 s of requests on one connection, 4× the idle timeout
			wantStatus: 200, wantClose: true, // and idle after them, it is closed
		},
		{
			name: "each request gets its own read timeout",
			idle: 5 * time.Second, read: 300 * time.Millisecond,
			// two requests, each sent in two halves 200 ms apart: 400 ms of partial
			// input in all, more than the read timeout, but less for either request
			send: "GET /x HT", pause: 200 * time.Millisecond, times: 1,
			then:       "TP/1.1\r\nHost: h\r\n\r\nGET /y HTTP/1.1\r\nHost: h\r\n",
			wantStatus: 200,
		},
		{
			name: "half a request past the read timeout",
			read: 200 * time.Millisecond,
			send: "GET /x HTTP/1.1\r\nHost: h\r\nX-Half: ", pause: 600 * time.Millisecond, times: 1,
			wantStatus: 408, wantClose: true,
		},
		{
			name: "idle past the idle timeout",
			idle: 200 * time.Millisecond,
			send: "GET /x HTTP/1.1\r\nHost: h\r\n\r\n", pause: 600 * time.Millisecond, times: 1,
			wantStatus: 200, wantClose: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := startServer(t, &Server{Transport: transport, IdleTimeout: tt.idle, ReadTimeout: tt.read})
			c, br := dial(t, addr)
			answer := func(what string) {
				t.Helper()
				r, err := readResponse(br)
				if err != nil || r.status != tt.wantStatus {
					t.Fatalf("%s: %+v, %v; want %d", what, r, err, tt.wantStatus)
				}
			}
			for i := 0; i < tt.times; i++ {
				io.WriteString(c, tt.send)
				if tt.wantStatus != 408 && tt.then == "" {
					answer("request " + strconv.Itoa(i))
				}
				time.Sleep(tt.pause)
			}
			if tt.then != "" {
				io.WriteString(c, tt.then)
				answer("first request")
				time.Sleep(tt.pause)
				io.WriteString(c, "\r\n")
				answer("second request")
			}
			if tt.wantStatus == 408 {
				answer("after the pause")
			}
			if cl := closed(c, br); cl != tt.wantClose {
				t.Errorf("closed = %v, want %v", cl, tt.wantClose)
			}
		})
	}
}

// TestReaperEnds: the reaper goroutine ends once no connection is left, and the next
// connection starts one again.
func TestReaperEnds(t *testing.T) { forTransports(t, testReaperEnds) }

func testReaperEnds(t *testing.T, transport string) {
	if transport == TransportLoop {
		t.Skip("the loop keeps the deadlines itself, on its timerfd (see TestLoopIdleCostsNothing)")
	}
	s := &Server{Transport: transport, IdleTimeout: 80 * time.Millisecond}
	addr := startServer(t, s)
	reaping := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.reaping
	}
	for round := 0; round < 2; round++ {
		c, br := dial(t, addr)
		io.WriteString(c, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
		if _, err := readResponse(br); err != nil {
			t.Fatal(err)
		}
		if !reaping() {
			t.Fatalf("round %d: no reaper while a connection is open", round)
		}
		c.Close()
		deadline := time.Now().Add(3 * time.Second)
		for reaping() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if reaping() {
			t.Fatalf("round %d: the reaper still runs with no connection left", round)
		}
	}
}
