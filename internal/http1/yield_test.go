package http1

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// loadHelperEnv names the address a re-run of this test binary loads (TestLoadHelper).
const loadHelperEnv = "HTTP1_TEST_LOAD_ADDR"

// TestLoopYields: a loop that always has events to serve still lets Go's scheduler run,
// so a goroutine woken by the netpoller (here, one reading a socket) runs while the loop
// is busy, not only when the runtime preempts the loop (sysmon polls the network and
// preempts after 10 ms). The loop yields every loopYield (100 µs) of busy work; each
// request here spins 50 µs, so the goroutine must run within a few dozen requests, where
// 10 ms would be 200. GOMAXPROCS=1, as in a prefork worker (the write owner's goroutines
// that read its followers' writes wait so). The load comes from another process, this
// test binary run again as TestLoadHelper, so that nothing in this process needs the P to
// keep the loop busy.
func TestLoopYields(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a load generator process for a second or more")
	}
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)

	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "watched")
	watched, err := net.FileConn(f) // a duplicate, in the netpoller
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer watched.Close()
	defer unix.Close(fds[1])

	const spin = 50 * time.Microsecond
	const warm = 1000 // requests served before the byte is sent: the load is flowing
	var served atomic.Int64
	var sentAt, ranAt atomic.Int64
	sentAt.Store(-1)
	ranAt.Store(-1)
	ran := make(chan struct{})
	go func() {
		var b [1]byte
		if _, err := watched.Read(b[:]); err == nil {
			ranAt.Store(served.Load())
		}
		close(ran)
	}()
	h := HandlerFunc(func(w *Response, r *Request) {
		for start := time.Now(); time.Since(start) < spin; {
		}
		if n := served.Add(1); n == warm {
			// On the loop: the byte makes the watcher runnable, through the netpoller only.
			sentAt.Store(n)
			if _, err := unix.Write(fds[1], []byte{1}); err != nil {
				t.Errorf("write the watched socket: %v", err)
			}
		}
		w.Body = append(w.Body, "ok"...)
	})
	s := &Server{Transport: TransportLoop, Loops: 1, Handler: h}
	addr := startServer(t, s)

	load := exec.Command(os.Args[0], "-test.run=^TestLoadHelper$", "-test.count=1")
	load.Env = append(os.Environ(), loadHelperEnv+"="+addr)
	load.Stdout, load.Stderr = os.Stdout, os.Stderr
	stdin, err := load.StdinPipe() // closed: the helper stops
	if err != nil {
		t.Fatal(err)
	}
	if err := load.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		load.Wait()
	}()

	select {
	case <-ran:
	case <-time.After(20 * time.Second):
		t.Fatalf("the watcher did not run within 20 s (%d requests served)", served.Load())
	}
	at := ranAt.Load()
	if at < 0 {
		t.Fatal("the watcher's read failed")
	}
	sent := sentAt.Load()
	t.Logf("byte sent at request %d, watcher ran at request %d", sent, at)
	if at-sent > 50 {
		t.Errorf("the watcher ran %d requests (of %v each) after its socket became readable; want it within the loop's next yields (a few dozen at most)", at-sent, spin)
	}
}

// TestLoadHelper is TestLoopYields' load generator, in a process of its own: 16
// connections, each keeping 8 pipelined GETs outstanding, until stdin closes. Skipped unless loadHelperEnv names the address.
func TestLoadHelper(t *testing.T) {
	addr := os.Getenv(loadHelperEnv)
	if addr == "" {
		t.Skip("the load generator of TestLoopYields")
	}
	stop := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	// Each connection keeps up to 8 requests outstanding, writing 4 at a time while it
	// reads the answers, so the server's loop never runs out of input; few per connection,
	// because the loop serves what one read brought before it looks at the clock.
	const conns, depth, outstanding = 16, 4, 8
	var batch []byte
	for range depth {
		batch = append(batch, "GET /load HTTP/1.1\r\nHost: x\r\n\r\n"...)
	}
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				fmt.Fprintln(os.Stderr, "load helper:", err)
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			tokens := make(chan struct{}, outstanding/depth)
			done := make(chan struct{})
			go func() { // the reader: frees a batch's token once its answers are in
				defer close(done)
				br := bufio.NewReader(c)
				for {
					for range depth {
						if _, err := readResponse(br); err != nil {
							return
						}
					}
					<-tokens
				}
			}()
			defer func() { c.Close(); <-done }()
			for {
				select {
				case <-stop:
					return
				case <-done:
					return
				case tokens <- struct{}{}:
				}
				if _, err := c.Write(batch); err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
}
