package http1

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestListenerMadeBlocking: another process sharing the listening socket switches it to
// blocking mode (what os.File.Fd does to a socket's File: the flag belongs to the socket's
// open file description, shared by every duplicate and process). The server goes on
// accepting, the socket is non-blocking again after the next connection, and a drain with
// nothing left to accept ends at once. Before, the loop's accept blocked its whole process
// and Shutdown never returned.
func TestListenerMadeBlocking(t *testing.T) { forTransports(t, testListenerMadeBlocking) }

func testListenerMadeBlocking(t *testing.T, transport string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Transport: transport, Handler: echoHandler{}}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	addr := ln.Addr().String()
	get := func(path string) {
		t.Helper()
		c, br := dial(t, addr)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\n\r\n", path)
		if got, err := readResponse(br); err != nil || got.status != 200 {
			t.Fatalf("GET %s: %+v, %v", path, got, err)
		}
	}
	get("/before")

	rc, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	nonblocking := func() bool {
		var fl int
		rc.Control(func(fd uintptr) { fl, _ = unix.FcntlInt(fd, unix.F_GETFL, 0) })
		return fl&unix.O_NONBLOCK != 0
	}
	rc.Control(func(fd uintptr) { unix.SetNonblock(int(fd), false) })
	if nonblocking() {
		t.Fatal("the listening socket is still non-blocking")
	}
	for i := range 3 {
		get(fmt.Sprintf("/after/%d", i))
	}
	if !nonblocking() {
		t.Error("the listening socket is still blocking after three connections")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown after the socket was made blocking: %v (after %v)", err, time.Since(start))
	}
	if err := <-done; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve = %v, want ErrServerClosed", err)
	}
}
