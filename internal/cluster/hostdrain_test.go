package cluster

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// closesAfter sends one request on a new connection and reports whether the response
// closes it (Connection: close).
func closesAfter(t *testing.T, addr string) bool {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.Close
}

// TestHostDrain: the capacity snapshot follows the workers, and the host's drain turns
// every worker's keep-alive off, a worker that comes online meanwhile included, and back on.
func TestHostDrain(t *testing.T) {
	t.Parallel()
	mode := filepath.Join(t.TempDir(), "mode")
	os.WriteFile(mode, []byte("ok"), 0o600)
	s := startCluster(t, Config{Instances: 2, ListenTimeout: Duration(time.Minute)}, "FAKE_MODE_FILE="+mode)
	if got := s.Serving(); got != (Serving{Online: 2, Desired: 2}) {
		t.Errorf("Serving = %+v, want 2 of 2", got)
	}
	// every checks n new connections, which reach both slots whatever the steering.
	every := func(closes bool) bool {
		for range 20 {
			if closesAfter(t, s.Addr()) != closes {
				return false
			}
		}
		return true
	}
	if !every(false) {
		t.Fatal("before the drain: a response closed its connection")
	}
	if err := s.SetHostDrained(true); err != nil {
		t.Fatal(err)
	}
	if !s.HostDrained() {
		t.Error("HostDrained = false after SetHostDrained(true)")
	}
	// The message is asynchronous to the worker: wait for both slots to have it.
	waitFor(t, 5*time.Second, "every response Connection: close", func() bool { return every(true) })

	// A worker that comes online while drained is told too.
	old := pids(s)[0]
	syscall.Kill(old, syscall.SIGKILL)
	waitFor(t, 10*time.Second, "slot 0 online again", func() bool {
		r := s.Status()[0]
		return r.Status == StateOnline && r.PID != old
	})
	waitFor(t, 5*time.Second, "the new worker closes too", func() bool { return every(true) })

	if err := s.SetHostDrained(false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "keep-alive again", func() bool { return every(false) })

	// A worker that never says ready is no capacity: 1 of 2.
	os.WriteFile(mode, []byte("notready"), 0o600)
	syscall.Kill(pids(s)[1], syscall.SIGKILL)
	waitFor(t, 10*time.Second, "Serving 1 of 2", func() bool { return s.Serving() == Serving{Online: 1, Desired: 2} })
}
