package pageserver

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func serve(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(func() { s.Close() })
	return s
}

// closedWithin says whether the server closes c (a read ends) within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestIdleConnectionsClosed: connections that send nothing, and kept-alive ones that send
// no next request, are closed by the server; net/http's defaults keep both for ever.
func TestIdleConnectionsClosed(t *testing.T) {
	s := serve(t, Config{Name: "metrics", ReadHeaderTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	silent, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	kept, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	io.WriteString(kept, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(kept), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v %v", resp, err)
	}
	resp.Body.Close()
	for name, c := range map[string]net.Conn{"silent": silent, "kept alive": kept} {
		if !closedWithin(c, 20*time.Second) {
			t.Errorf("%s connection still open after 20 s", name)
		}
	}
}

// TestConnectionCap: with MaxConns held open by an attacker, more are refused at once
// rather than taking descriptors; once theirs close, a fresh request is answered.
func TestConnectionCap(t *testing.T) {
	s := serve(t, Config{Name: "dashboard", MaxConns: 4, ReadHeaderTimeout: time.Minute})
	var held []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	// The 5th is accepted and closed by the server.
	deadline := time.Now().Add(20 * time.Second)
	for s.Refused() == 0 && time.Now().Before(deadline) {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		closed := closedWithin(c, 2*time.Second)
		c.Close()
		if !closed {
			t.Fatal("a connection past the cap was kept open")
		}
	}
	if s.Refused() == 0 {
		t.Fatal("nothing refused past the cap")
	}
	for _, c := range held {
		c.Close()
	}
	// Slots come back as the held ones close: a request is answered again.
	for {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + s.Addr().String() + "/")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.TrimSpace(string(b)) == "ok" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer once the held connections closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestListenTakenPort: a port another program holds is an error from Listen, naming the
// page.
func TestListenTakenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := Listen(ln.Addr().String(), Config{Name: "metrics"}); err == nil || !strings.HasPrefix(err.Error(), "metrics: ") {
		t.Fatalf("Listen on a taken port: %v", err)
	}
}
