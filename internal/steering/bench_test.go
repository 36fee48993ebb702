package steering

import (
	"bytes"
	"context"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkAcceptHeavy: one new connection per request (request, answer, close), both ends
// in this process, against a plain TCP listener (Listen) and against the MPTCP listener Go
// makes by default since 1.24 (the client is plain TCP either way, so the MPTCP listener
// falls back at accept). ns/op is both ends' cost of one connection:
//
//	taskset -c 1 go test -run - -bench AcceptHeavy -count 6 ./internal/steering
func BenchmarkAcceptHeavy(b *testing.B) {
	for _, tc := range []struct {
		name   string
		listen func() (net.Listener, error)
	}{
		{"tcp", func() (net.Listener, error) { return Listen(context.Background(), "127.0.0.1:0") }},
		{"mptcp", func() (net.Listener, error) {
			var lc net.ListenConfig
			lc.SetMultipathTCP(true)
			return lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ln, err := tc.listen()
			if err != nil {
				b.Skip(err)
			}
			if p, _ := Protocol(ln.(*net.TCPListener)); tc.name == "mptcp" && p == unix.IPPROTO_TCP {
				b.Skip("the kernel made a TCP socket: no MPTCP here")
			}
			defer ln.Close()
			go serveClose(ln)
			req := []byte("GET / HTTP/1.1\r\nHost: b\r\n\r\n")
			buf := make([]byte, 256)
			for b.Loop() {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				c.Write(req)
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				c.Close()
			}
		})
	}
}

// serveClose answers every connection's first request and closes it, until ln closes.
func serveClose(ln net.Listener) {
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 512)
			n := 0
			for !bytes.Contains(buf[:n], []byte("\r\n\r\n")) && n < len(buf) {
				m, err := c.Read(buf[n:])
				if err != nil {
					return
				}
				n += m
			}
			c.Write(resp)
		}()
	}
}
