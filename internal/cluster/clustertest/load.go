// Package clustertest helps tests of code that runs a cluster: a client load that keeps
// requests going across reloads, restarts and scaling, and counts every failure.
package clustertest

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Load is a running set of clients: half on keep-alive connections, half on a fresh
// connection per request, so both the accept queues and idle keep-alives are exercised.
type Load struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	firstErr   error
	stop       chan struct{}
	once       sync.Once
	wg         sync.WaitGroup
}

// Result is what a Load saw.
type Result struct {
	OK, Failed int64
	FirstErr   error // the first failure, with its client and time; nil when none
}

// StartLoad starts clients doing GET url, expecting 200, until Stop.
func StartLoad(url string, clients int) *Load {
	return StartLoadFunc(clients, func(c *http.Client, _, _ int) error {
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		return err
	})
}

// StartLoadFunc starts clients that each call do, request after request (i counts them),
// with a client of their own, until Stop; an error is a failed request.
func StartLoadFunc(clients int, do func(c *http.Client, client, i int) error) *Load {
	l := &Load{stop: make(chan struct{})}
	for i := range clients {
		tr := &http.Transport{DisableKeepAlives: i%2 == 1, MaxIdleConnsPerHost: 1}
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer tr.CloseIdleConnections()
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				if err := do(c, i, n); err != nil {
					l.failed.Add(1)
					l.mu.Lock()
					if l.firstErr == nil {
						l.firstErr = fmt.Errorf("client %d (keep-alive %v) at %s: %w", i, i%2 == 0, time.Now().Format("15:04:05.000"), err)
					}
					l.mu.Unlock()
					continue
				}
				l.ok.Add(1)
			}
		}()
	}
	return l
}

// Stop stops the clients, waits for them, and returns the counts.
func (l *Load) Stop() Result {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return Result{OK: l.ok.Load(), Failed: l.failed.Load(), FirstErr: l.firstErr}
}

// Finish stops the clients and fails t on any failed request, or when none succeeded.
func (l *Load) Finish(t testing.TB) {
	t.Helper()
	r := l.Stop()
	t.Logf("load: %d requests ok, %d failed", r.OK, r.Failed)
	if r.Failed > 0 {
		t.Errorf("%d of %d requests failed, first: %v", r.Failed, r.Failed+r.OK, r.FirstErr)
	}
	if r.OK == 0 {
		t.Error("no request succeeded")
	}
}
