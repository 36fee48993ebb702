package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/onehost/onehost/internal/ipc"
)

// TestKeepAliveOverIPC plays the supervisor of `supervisor drain` and `ready`: a keepalive
// message turns keep-alive off, and a kept-alive client's next response says
// "Connection: close" and its connection closes, while new connections are still served;
// the next message turns it back on.
func TestKeepAliveOverIPC(t *testing.T) { forTransports(t, testKeepAliveOverIPC) }

func testKeepAliveOverIPC(t *testing.T, transport string) {
	ln, sup, cmd, logs := startInherited(t, "TRANSPORT="+transport, "GOMAXPROCS=1")
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs.String())
		}
	}()
	if m, err := sup.Recv(); err != nil || m.Type != ipc.TypeReady {
		t.Fatalf("first message %+v, %v; want ready", m, err)
	}
	// setKeepAlive sends the message and waits until the worker has acted on it: the
	// channel is served in order, so the answer to a stats request that follows means so.
	setKeepAlive := func(on bool) {
		t.Helper()
		if err := sup.Send(ipc.Msg{Type: ipc.TypeKeepAlive, CloseAfterResponse: !on}); err != nil {
			t.Fatal(err)
		}
		if err := sup.Send(ipc.Msg{Type: ipc.TypeStats}); err != nil {
			t.Fatal(err)
		}
		if m, err := sup.Recv(); err != nil || m.Type != ipc.TypeStats {
			t.Fatalf("stats after keepalive: %+v, %v", m, err)
		}
	}
	type client struct {
		c  net.Conn
		br *bufio.Reader
	}
	dial := func() client {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return client{c, bufio.NewReader(c)}
	}
	// get sends one request and reports whether the response closes the connection.
	get := func(cl client) (closes bool) {
		t.Helper()
		fmt.Fprint(cl.c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(cl.br, nil)
		if err != nil {
			t.Fatalf("GET /health: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET /health: %s", resp.Status)
		}
		return resp.Close
	}
	kept := dial()
	if get(kept) {
		t.Fatal("before: Connection: close, want keep-alive")
	}
	setKeepAlive(false)
	if !get(kept) {
		t.Error("keep-alive off: the kept-alive client's next response kept it alive, want Connection: close")
	}
	if _, err := kept.br.ReadByte(); err != io.EOF {
		t.Errorf("keep-alive off: after the response the connection gave %v, want EOF", err)
	}
	if !get(dial()) {
		t.Error("keep-alive off: a new connection's response kept it alive, want Connection: close")
	}
	setKeepAlive(true)
	again := dial()
	for i := range 2 {
		if get(again) {
			t.Errorf("keep-alive on again, request %d: Connection: close, want keep-alive", i)
		}
	}
}
