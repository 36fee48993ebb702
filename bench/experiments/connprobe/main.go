// Command connprobe holds many keep-alive connections to one URL for a while and says what
// each client saw: answers by status, connections the server closed or reset, requests
// that got no answer at all within the timeout, and connections never answered even once.
// wrk folds the last two into numbers it does not always print (a connection waiting in a
// full accept queue is neither an error nor a timeout to it); bench/fd-demo.sh needs them.
//
// Usage:
//
//	connprobe [-c 300] [-d 5s] [-timeout 2s] http://HOST:PORT/PATH
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"sync"
	"time"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "connprobe:", err)
		os.Exit(1)
	}
}

// tally is what the clients saw; one per client, summed at the end.
type tally struct {
	status    map[int]int
	closed    int // EOF or reset before or while reading an answer
	stalled   int // no answer within the timeout
	dialErr   int
	answered  bool
	firstFail string
}

func (t *tally) fail(kind *int, err error) {
	*kind++
	if t.firstFail == "" {
		t.firstFail = err.Error()
	}
}

func run(ctx context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("connprobe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	conns := fs.Int("c", 300, "connections held at once")
	dur := fs.Duration("d", 5*time.Second, "how long to keep sending")
	timeout := fs.Duration("timeout", 2*time.Second, "how long a request may wait for its answer before it counts as stalled")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("want one URL argument")
	}
	u, err := url.Parse(fs.Arg(0))
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("parse URL %q: want http://HOST:PORT/PATH", fs.Arg(0))
	}
	req := []byte("GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\n\r\n")

	ctx, cancel := context.WithTimeout(ctx, *dur)
	defer cancel()
	tallies := make([]tally, *conns)
	var wg sync.WaitGroup
	for i := range tallies {
		wg.Add(1)
		go func(t *tally) {
			defer wg.Done()
			client(ctx, u.Host, req, *timeout, t)
		}(&tallies[i])
	}
	wg.Wait()

	sum := tally{status: map[int]int{}}
	never := 0
	for _, t := range tallies {
		for s, n := range t.status {
			sum.status[s] += n
		}
		sum.closed += t.closed
		sum.stalled += t.stalled
		sum.dialErr += t.dialErr
		if !t.answered {
			never++
		}
		if sum.firstFail == "" {
			sum.firstFail = t.firstFail
		}
	}
	codes := make([]int, 0, len(sum.status))
	for s := range sum.status {
		codes = append(codes, s)
	}
	sort.Ints(codes)
	fmt.Fprintf(stdout, "answers:")
	for _, s := range codes {
		fmt.Fprintf(stdout, " %d x%d", s, sum.status[s])
	}
	fmt.Fprintf(stdout, "; closed/reset %d; stalled (no answer in %v) %d; dial errors %d; connections never answered %d of %d\n",
		sum.closed, *timeout, sum.stalled, sum.dialErr, never, *conns)
	if sum.firstFail != "" {
		fmt.Fprintf(stdout, "first failure: %s\n", sum.firstFail)
	}
	return nil
}

// client sends requests one at a time on a keep-alive connection until ctx ends, dialling
// again after a failure (as a browser or a proxy would).
func client(ctx context.Context, host string, req []byte, timeout time.Duration, t *tally) {
	t.status = map[int]int{}
	var d net.Dialer
	for ctx.Err() == nil {
		nc, err := d.DialContext(ctx, "tcp", host)
		if err != nil {
			if ctx.Err() == nil {
				t.fail(&t.dialErr, err)
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		stop := context.AfterFunc(ctx, func() { nc.Close() })
		br := bufio.NewReader(nc)
		for ctx.Err() == nil {
			nc.SetDeadline(time.Now().Add(timeout))
			if _, err = nc.Write(req); err != nil {
				break
			}
			var resp *http.Response
			if resp, err = http.ReadResponse(br, nil); err != nil {
				break
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil {
				break
			}
			t.status[resp.StatusCode]++
			t.answered = true
			if resp.Close {
				err = io.EOF
				break
			}
		}
		stop()
		nc.Close()
		if ctx.Err() != nil {
			return
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.fail(&t.stalled, err)
		} else {
			t.fail(&t.closed, err)
		}
	}
}
