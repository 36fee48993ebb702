package main

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/seedtest"
)

// TestKeepAliveSurvives66s: proxies and the challenge reuse idle connections after 65 s.
func TestKeepAliveSurvives66s(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 66 s")
	}
	t.Parallel()
	w := startWorker(t, "SQLITE_PATH="+seedtest.Path(t))
	c, err := net.Dial("tcp", w.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range 2 {
		if i == 1 {
			time.Sleep(66 * time.Second)
		}
		fmt.Fprint(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
		if status, err := readHTTP(br); err != nil || status != "HTTP/1.1 200 OK" {
			t.Fatalf("request %d: %q, %v", i+1, status, err)
		}
	}
}

// TestFifteenThousandKeepAlives: serving directly means ~15,000 open connections.
func TestFifteenThousandKeepAlives(t *testing.T) { forTransports(t, testFifteenThousandKeepAlives) }

func testFifteenThousandKeepAlives(t *testing.T, transport string) {
	if testing.Short() {
		t.Skip("opens 15,000 connections")
	}
	const n = 15000
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	if lim.Max < n+1000 {
		t.Skipf("descriptor limit %d is below the %d this test needs", lim.Max, n+1000)
	}
	w := startWorker(t, "TRANSPORT="+transport, "SQLITE_PATH="+seedtest.Path(t))
	conns := make([]net.Conn, n)
	readers := make([]*bufio.Reader, n)
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	// One request on each connection as it opens, 64 at a time.
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 64)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := net.DialTimeout("tcp", w.Addr, 10*time.Second)
			if err != nil {
				errs <- fmt.Errorf("dial %d: %w", i, err)
				return
			}
			conns[i], readers[i] = c, bufio.NewReaderSize(c, 512)
			c.SetDeadline(time.Now().Add(60 * time.Second))
			fmt.Fprint(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
			if status, err := readHTTP(readers[i]); err != nil || status != "HTTP/1.1 200 OK" {
				errs <- fmt.Errorf("connection %d: %q, %v", i, status, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if failed < 5 {
			t.Error(err)
		}
		failed++
	}
	if failed > 0 {
		t.Fatalf("%d of %d connections failed", failed, n)
	}
	// All still open and served: a second request on every 50th.
	for i := 0; i < n; i += 50 {
		fmt.Fprint(conns[i], "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
		if status, err := readHTTP(readers[i]); err != nil || status != "HTTP/1.1 200 OK" {
			t.Fatalf("second request on connection %d: %q, %v", i, status, err)
		}
	}
}
