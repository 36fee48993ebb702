// Command idlerss measures what idle keep-alive connections cost a server in memory: it
// reads the server's VmRSS, opens n connections that each make one request and read its
// answer, lets them sit idle (as the challenge's users do between steps), reads VmRSS
// again and prints both with the difference per connection.
//
// Usage:
//
//	idlerss -pid PID [-n 10000] [-settle 3s] http://HOST:PORT/PATH
//
// It needs a descriptor limit above n (it raises its soft limit to the hard one), and so
// does the server.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "idlerss:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("idlerss", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pid := fs.Int("pid", 0, "the server's process id (its /proc/PID/status is read)")
	n := fs.Int("n", 10000, "connections to open")
	settle := fs.Duration("settle", 3*time.Second, "how long the connections idle before the second reading")
	par := fs.Int("parallel", 64, "connections opened at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *pid <= 0 || *n <= 0 {
		return errors.New("usage: idlerss -pid PID [-n 10000] http://HOST:PORT/PATH")
	}
	u, err := url.Parse(fs.Arg(0))
	if err != nil || u.Host == "" {
		return fmt.Errorf("parse url %q: want http://HOST:PORT/PATH", fs.Arg(0))
	}
	raiseLimit()
	req := []byte("GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\n\r\n")

	before, err := vmRSS(*pid)
	if err != nil {
		return err
	}
	conns := make([]net.Conn, *n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan int)
	)
	for range *par {
		wg.Go(func() {
			for i := range next {
				c, err := oneRequest(ctx, u.Host, req)
				mu.Lock()
				if err != nil && first == nil {
					first = fmt.Errorf("connection %d: %w", i, err)
				}
				mu.Unlock()
				conns[i] = c
			}
		})
	}
	for i := range *n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	time.Sleep(*settle)
	after, err := vmRSS(*pid)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "connections %d rss_before_kb %d rss_after_kb %d kb_per_conn %.2f\n",
		*n, before, after, float64(after-before)/float64(*n))
	return nil
}

// oneRequest opens a connection, makes one request and reads its answer (headers and a
// Content-Length body), and returns the connection, open and idle.
func oneRequest(ctx context.Context, host string, req []byte) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(req); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(c, 1024)
	length := 0
	status := ""
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("read answer: %w", err)
		}
		line = strings.TrimRight(line, "\r\n")
		if status == "" {
			status = line
			continue
		}
		if line == "" {
			break
		}
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "content-length") {
			length, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if _, err := io.CopyN(io.Discard, br, int64(length)); err != nil {
		c.Close()
		return nil, fmt.Errorf("read body: %w", err)
	}
	if !strings.Contains(status, " 200 ") {
		c.Close()
		return nil, fmt.Errorf("answer %q, want 200", status)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// vmRSS is the process's resident set in KiB.
func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read server memory: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("read server memory: no VmRSS in /proc/%d/status", pid)
}

func raiseLimit() {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
}
