package http1

import (
	"fmt"
	"net"
	"testing"

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
	ln := startListener(t, &Server{Transport: transport, Handler: echoHandler{}})
	addr := ln.Addr().String()
	get := func(path string) {
		t.Helper()
		c, br := dial(t, addr)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: h\r\n\r\n", path)
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

	// The drain that must end at once is startListener's cleanup (Shutdown within 5 s,
	// Serve returning ErrServerClosed).
}
