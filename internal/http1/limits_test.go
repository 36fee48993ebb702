package http1

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// TestFreshConnectionTimeout: a connection that sends nothing is closed after
// FirstRequestTimeout, not the longer IdleTimeout of a kept-alive one; a connection that
// has made a request waits IdleTimeout for the next. The default is at most nginx's
// client_header_timeout, 60 s (a silent connection was held 75 s, the idle timeout).
func TestFreshConnectionTimeout(t *testing.T) { forTransports(t, testFreshConnectionTimeout) }

func testFreshConnectionTimeout(t *testing.T, transport string) {
	if got := (&Server{}).firstTO(); got > 60*time.Second || got >= (&Server{}).idle() {
		t.Fatalf("default first-request timeout %v: want at most 60 s, below the idle timeout", got)
	}
	addr := startServer(t, &Server{Transport: transport, FirstRequestTimeout: 300 * time.Millisecond, IdleTimeout: 10 * time.Second})
	silent, sbr := dial(t, addr)
	used, ubr := dial(t, addr)
	start := time.Now()
	io.WriteString(used, "GET /1 HTTP/1.1\r\nHost: h\r\n\r\n")
	if r, err := readResponse(ubr); err != nil || r.status != 200 {
		t.Fatalf("first request: %+v, %v", r, err)
	}
	silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := sbr.ReadByte(); err == nil || isNetTimeout(err) {
		t.Fatalf("silent connection: read %v after %v; want it closed after the first-request timeout", err, time.Since(start))
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Errorf("silent connection closed after %v, before its 300 ms", took)
	}
	time.Sleep(300 * time.Millisecond) // the used connection, idle past the first-request timeout
	io.WriteString(used, "GET /2 HTTP/1.1\r\nHost: h\r\n\r\n")
	if r, err := readResponse(ubr); err != nil || r.status != 200 {
		t.Fatalf("kept-alive connection after %v idle: %+v, %v; want 200 (IdleTimeout is 10 s)", time.Since(start), r, err)
	}
}

// TestMaxConns: past MaxConns a new connection is closed at once, unanswered, and counted
// (Stats.Refused), while those open are served on; once one ends, a new one is served.
func TestMaxConns(t *testing.T) { forTransports(t, testMaxConns) }

func testMaxConns(t *testing.T, transport string) {
	s := &Server{Transport: transport, MaxConns: 3}
	addr := startServer(t, s)
	var open []net.Conn
	var brs []*bufio.Reader
	for i := range 3 {
		c, br := dial(t, addr)
		brs = append(brs, br)
		io.WriteString(c, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
		if r, err := readResponse(br); err != nil || r.status != 200 {
			t.Fatalf("connection %d: %+v, %v", i, r, err)
		}
		open = append(open, c)
	}
	over, obr := dial(t, addr)
	io.WriteString(over, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
	if r, err := readResponse(obr); err == nil {
		t.Fatalf("a fourth connection under MaxConns 3 was answered: %+v", r)
	}
	if st := s.Stats(); st.Refused != 1 || st.Connections != 3 {
		t.Errorf("Stats: refused %d, open %d; want 1 and 3", st.Refused, st.Connections)
	}
	io.WriteString(open[1], "GET /y HTTP/1.1\r\nHost: h\r\n\r\n") // the open ones are served on
	if r, err := readResponse(brs[1]); err != nil || r.status != 200 {
		t.Fatalf("an open connection at the limit: %+v, %v", r, err)
	}
	open[0].Close()
	// Once the server has seen the close, a new connection is served.
	for deadline := time.Now().Add(5 * time.Second); s.Stats().Connections > 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	c, br := dial(t, addr)
	io.WriteString(c, "GET /z HTTP/1.1\r\nHost: h\r\n\r\n")
	if r, err := readResponse(br); err != nil || r.status != 200 {
		t.Fatalf("a new connection after one closed: %+v, %v", r, err)
	}
}
