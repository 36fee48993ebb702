package main

// Hostile conditions for one worker: its database file deleted, renamed or made
// unreadable while it runs, its descriptors exhausted, slow and non-reading clients, a load
// above capacity. The figures they log are the ones in docs/reliability.md; the slow ones
// run only with ONEHOST_SLOW=1 (make reliability).

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/seedtest"
	"github.com/onehost/onehost/internal/token"
)

// slow skips t unless ONEHOST_SLOW=1: tests that wait out the server's 10 s timeouts or
// load the machine for many seconds run under `make reliability`, not `make test`.
func slow(t *testing.T) {
	t.Helper()
	if os.Getenv("ONEHOST_SLOW") != "1" {
		t.Skip("slow: set ONEHOST_SLOW=1 (make reliability)")
	}
}

// ipcWorker is a worker started the way the supervisor starts it: the listening socket at
// fd 3, the ipc channel at fd 4, so the test can read the stats (and health) it reports.
type ipcWorker struct {
	Cmd  *exec.Cmd
	Addr string
	sup  *ipc.Conn
	logs *lockedBuffer
	done chan error
}

// lockedBuffer is a strings.Builder safe for the exec copy goroutine and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startIPCWorker starts the test binary as a supervised worker with env, running as cred
// when it is not nil, and waits for its ready message.
func startIPCWorker(t *testing.T, bin string, cred *syscall.Credential, env ...string) *ipcWorker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	lf, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	sup, child, err := ipc.Pair()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append([]string{"ONEHOST_TEST_WORKER=1", "JWT_SECRET=" + testSecret, "LISTEN_FDS=1", ipc.EnvFD + "=4",
		"GORACE=atexit_sleep_ms=0"}, env...)
	cmd.ExtraFiles = []*os.File{lf, child}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	w := &ipcWorker{Cmd: cmd, Addr: ln.Addr().String(), sup: sup, logs: &lockedBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = w.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child.Close()
	go func() { w.done <- cmd.Wait() }()
	t.Cleanup(func() {
		sup.Close() // the worker reads EOF and drains
		select {
		case <-w.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-w.done
			t.Error("worker did not stop within 10 s of losing its supervisor")
		}
		if t.Failed() {
			t.Logf("worker logs:\n%s", w.logs)
		}
	})
	if m, err := sup.Recv(); err != nil || m.Type != ipc.TypeReady {
		t.Fatalf("first message %+v, %v; want ready\n%s", m, err, w.logs)
	}
	return w
}

// stats asks for the worker's counters and health.
func (w *ipcWorker) stats(t *testing.T) ipc.Msg {
	t.Helper()
	if err := w.sup.Send(ipc.Msg{Type: ipc.TypeStats}); err != nil {
		t.Fatal(err)
	}
	m, err := w.sup.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// waitStats polls the stats until ok holds (the probe runs every second).
func (w *ipcWorker) waitStats(t *testing.T, what string, ok func(ipc.Msg) bool) ipc.Msg {
	t.Helper()
	var m ipc.Msg
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if m = w.stats(t); ok(m) {
			return m
		}
	}
	t.Fatalf("stats never showed %s; last %+v", what, m)
	return m
}

var degradedBody = regexp.MustCompile(`^\{"status":"degraded","db":"unreachable","error":"[^"\\]+"\}$`)

// TestHealthFollowsDatabaseFile: the database file renamed or deleted under a running
// worker. GET /health answers the contract's 503, the stats tell the supervisor it is
// unhealthy and why, writes answer 500 (a 201 would be lost to the next process that opens
// the path), reads keep working, and putting the file back heals all of it.
func TestHealthFollowsDatabaseFile(t *testing.T) {
	dir := t.TempDir()
	db := seedtest.Tiny(t, dir, true)
	w := startIPCWorker(t, os.Args[0], nil, "SQLITE_PATH="+db, "PRODUCTS_PATH="+filepath.Join(dir, "products.db"))
	base := "http://" + w.Addr
	auth := "Bearer " + token.Sign([]byte(testSecret), 1, "user_1", time.Now(), time.Now().Add(time.Hour))
	w.waitStats(t, "healthy", func(m ipc.Msg) bool { return m.Healthy })

	for _, tt := range []struct {
		name          string
		break_, heal_ func() error
	}{
		{"renamed", func() error { return os.Rename(db, db+".moved") }, func() error { return os.Rename(db+".moved", db) }},
		{"deleted", func() error { return os.Remove(db) }, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.break_(); err != nil {
				t.Fatal(err)
			}
			if r := do(t, "GET", base+"/health", "", ""); r.status != 503 || !degradedBody.MatchString(r.body) {
				t.Errorf("GET /health = %d %s, want 503 matching %s", r.status, r.body, degradedBody)
			}
			m := w.waitStats(t, "unhealthy", func(m ipc.Msg) bool { return !m.Healthy && m.Error != "" })
			if !strings.Contains(m.Error, "deleted, renamed or replaced") {
				t.Errorf("stats error %q, want it to say the file was deleted, renamed or replaced", m.Error)
			}
			expect(t, do(t, "POST", base+"/posts", auth, `{"body":"into the void?"}`), 500, `{"error":"internal server error"}`)
			if r := do(t, "GET", base+"/posts/1", "", ""); r.status != 200 {
				t.Errorf("GET /posts/1 = %d %s, want reads to keep working", r.status, r.body)
			}
			if tt.heal_ == nil {
				return
			}
			if err := tt.heal_(); err != nil {
				t.Fatal(err)
			}
			if r := do(t, "GET", base+"/health", "", ""); r.status != 200 {
				t.Errorf("GET /health after the file came back = %d %s", r.status, r.body)
			}
			w.waitStats(t, "healthy again", func(m ipc.Msg) bool { return m.Healthy && m.Error == "" })
			if r := do(t, "POST", base+"/posts", auth, `{"body":"back"}`); r.status != 201 {
				t.Errorf("POST /posts after the file came back = %d %s, want 201", r.status, r.body)
			}
		})
	}
	if strings.Count(w.logs.String(), `"msg":"database unhealthy"`) != 2 {
		t.Errorf("want one \"database unhealthy\" line per fault (changes only), logs:\n%s", w.logs)
	}
	if strings.Contains(w.logs.String(), "panic") {
		t.Errorf("a panic in the logs:\n%s", w.logs)
	}
}

// TestHealthNoticesUnreadableDatabase: chmod 000 is a fault only for a process that
// permission bits bind, so the worker runs as nobody (uid 65534); root only.
func TestHealthNoticesUnreadableDatabase(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs the worker as uid 65534: needs root")
	}
	const nobody = 65534
	dir := t.TempDir()
	// nobody must be able to execute the test binary and write beside the database (its
	// -wal and -shm files): a directory of its own with a copy of the binary.
	for _, d := range []string{filepath.Dir(dir), dir} { // t.TempDir's parent is 0700 too
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "worker.test")
	copyFile(t, os.Args[0], bin, 0o755)
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	db := seedtest.Tiny(t, data, true)
	for _, p := range []string{data, db} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	w := startIPCWorker(t, bin, &syscall.Credential{Uid: nobody, Gid: nobody},
		"SQLITE_PATH="+db, "PRODUCTS_PATH="+filepath.Join(data, "products.db"))
	base := "http://" + w.Addr
	w.waitStats(t, "healthy", func(m ipc.Msg) bool { return m.Healthy })
	if err := os.Chmod(db, 0); err != nil {
		t.Fatal(err)
	}
	r := do(t, "GET", base+"/health", "", "")
	if r.status != 503 || !degradedBody.MatchString(r.body) || !strings.Contains(r.body, "permission denied") {
		t.Errorf("GET /health with mode 000 = %d %s, want 503 saying permission denied", r.status, r.body)
	}
	w.waitStats(t, "unhealthy", func(m ipc.Msg) bool { return strings.Contains(m.Error, "permission denied") })
	if err := os.Chmod(db, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := do(t, "GET", base+"/health", "", ""); r.status != 200 {
		t.Errorf("GET /health after chmod 600 = %d %s", r.status, r.body)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

// openFDs counts the descriptors pid has open.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// healthOn sends GET /health on c and reports the outcome: "ok", "closed" (EOF or reset
// before any answer: refused cleanly) or "hung" (nothing within the deadline).
func healthOn(c net.Conn, br *bufio.Reader, deadline time.Duration) string {
	c.SetDeadline(time.Now().Add(deadline))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return "closed"
	}
	status, err := readHTTP(br)
	var ne net.Error
	switch {
	case err == nil && status == "HTTP/1.1 200 OK":
		return "ok"
	case err == nil:
		return "status " + status
	case errors.As(err, &ne) && ne.Timeout():
		return "hung"
	}
	return "closed"
}

// TestDescriptorExhaustion: the worker's descriptor limit is lowered to what it has open
// plus 24, then keep-alive connections are opened until one is turned away. The one turned
// away must be closed at once (not left hanging in the accept queue), a log line must say
// why, the connections already open must keep working, and once some close, new ones are
// served again.
func TestDescriptorExhaustion(t *testing.T) {
	dir := t.TempDir()
	w := startWorker(t, "SQLITE_PATH="+seedtest.Tiny(t, dir, true), "PRODUCTS_PATH="+filepath.Join(dir, "products.db"))
	pid := w.Cmd.Process.Pid
	// A first request: every lazily opened descriptor (SQLite's -wal and -shm, the
	// runtime's) is open before the count.
	if r := do(t, "GET", "http://"+w.Addr+"/posts/1", "", ""); r.status != 200 {
		t.Fatalf("GET /posts/1 = %d", r.status)
	}
	const spare = 24
	limit := uint64(openFDs(t, pid) + spare)
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: limit}, nil); err != nil {
		t.Skipf("lower the worker's descriptor limit: %v", err)
	}

	type client struct {
		c  net.Conn
		br *bufio.Reader
	}
	var open []client
	defer func() {
		for _, c := range open {
			c.c.Close()
		}
	}()
	turnedAway := ""
	for i := 0; i < spare+16 && turnedAway == ""; i++ {
		c, err := net.DialTimeout("tcp", w.Addr, 5*time.Second)
		if err != nil {
			turnedAway = "dial: " + err.Error()
			break
		}
		br := bufio.NewReader(c)
		switch got := healthOn(c, br, 5*time.Second); got {
		case "ok":
			open = append(open, client{c, br})
		default:
			turnedAway = got
			c.Close()
		}
	}
	t.Logf("limit %d descriptors: %d keep-alive connections served, the next one %q", limit, len(open), turnedAway)
	if turnedAway == "" {
		t.Fatalf("all %d connections were served under a limit of %d descriptors: the limit did not bind", len(open), limit)
	}
	if turnedAway != "closed" {
		t.Errorf("the connection over the limit was %q, want it closed at once", turnedAway)
	}
	if len(open) < spare/2 {
		t.Errorf("only %d connections served with %d spare descriptors", len(open), spare)
	}
	// Several more in a row are turned away the same way, none hangs.
	for i := range 5 {
		c, err := net.DialTimeout("tcp", w.Addr, 5*time.Second)
		if err != nil {
			continue // refused is clean too
		}
		if got := healthOn(c, bufio.NewReader(c), 5*time.Second); got != "closed" {
			t.Errorf("extra connection %d over the limit: %q, want closed", i, got)
		}
		c.Close()
	}
	for i, c := range open {
		if got := healthOn(c.c, c.br, 5*time.Second); got != "ok" {
			t.Errorf("open connection %d during exhaustion: %q, want ok", i, got)
		}
	}
	logs := w.Logs()
	if !strings.Contains(logs, "out of descriptors: closing new connections at once") || !strings.Contains(logs, "too many open files") {
		t.Errorf("no log line saying why connections are closed:\n%s", logs)
	}
	// Recovery: free a few descriptors, and new connections are served again.
	for _, c := range open[:4] {
		c.c.Close()
	}
	open = open[4:]
	var got string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", w.Addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got = healthOn(c, bufio.NewReader(c), 5*time.Second)
		c.Close()
		if got == "ok" {
			break
		}
	}
	if got != "ok" {
		t.Errorf("after closing 4 connections a new one is %q, want served", got)
	}
}

// rssAnon is pid's anonymous resident memory (heap, stacks; not the mapped database file,
// whose pages the kernel may drop at will) in bytes.
func rssAnon(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no RssAnon in /proc/PID/status")
	return 0
}

// TestSlowClientsCostBoundedMemory opens 2,000 slowloris connections (a request head
// trickled a byte at a time) and 200 that pipeline thousands of requests and never read,
// measures what each costs the worker, and checks that a normal client is served meanwhile
// and that the server drops them all after its 10 s read and write timeouts.
func TestSlowClientsCostBoundedMemory(t *testing.T) {
	slow(t)
	dir := t.TempDir()
	w := startWorker(t, "SQLITE_PATH="+seedtest.Tiny(t, dir, true), "PRODUCTS_PATH="+filepath.Join(dir, "products.db"))
	pid := w.Cmd.Process.Pid
	for range 50 { // warm up: buffers pooled, statements run
		do(t, "GET", "http://"+w.Addr+"/feed", "", "")
	}
	base := rssAnon(t, pid)
	fds0 := openFDs(t, pid)

	// A normal keep-alive client, all along.
	stop := make(chan struct{})
	var served, failed atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := net.Dial("tcp", w.Addr)
		if err != nil {
			failed.Add(1)
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if healthOn(c, br, 5*time.Second) == "ok" {
				served.Add(1)
			} else {
				failed.Add(1)
				return
			}
		}
	}()

	const slowN, deafN = 2000, 200
	var slowConns, deafConns []net.Conn
	var writers sync.WaitGroup // the non-readers' writes, which end when their connection closes
	defer func() {
		for _, c := range append(slowConns, deafConns...) {
			c.Close()
		}
		writers.Wait()
	}()
	head := "GET /feed HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 64)
	slowOpened := time.Now()
	for range slowN {
		c, err := net.Dial("tcp", w.Addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, head[:20])
		slowConns = append(slowConns, c)
	}
	// Trickle: one more byte per connection every second, so the head is never complete.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 20; i < len(head); i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			for _, c := range slowConns {
				c.Write([]byte{head[i]})
			}
		}
	}()
	time.Sleep(2 * time.Second)
	slowRSS := rssAnon(t, pid)
	pipelined := strings.Repeat("GET /feed HTTP/1.1\r\nHost: x\r\n\r\n", 4000) // ~9 MB of answers each
	deafOpened := time.Now()
	for range deafN {
		c, err := net.Dial("tcp", w.Addr)
		if err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).SetReadBuffer(4096)
		writers.Add(1)
		go func() {
			defer writers.Done()
			io.WriteString(c, pipelined) // blocks once the worker stops reading; ends at Close
		}()
		deafConns = append(deafConns, c)
	}
	time.Sleep(3 * time.Second)
	allRSS := rssAnon(t, pid)
	perSlow := (slowRSS - base) / slowN
	perDeaf := (allRSS - slowRSS) / deafN
	t.Logf("RssAnon: %d KiB idle, %d KiB with %d slowloris (%d B each), %d KiB with %d non-readers more (%d KiB each); kernel TCP buffers (all sockets of the host) %s",
		base>>10, slowRSS>>10, slowN, perSlow, allRSS>>10, deafN, perDeaf>>10, tcpMem(t))
	if perSlow > 64<<10 {
		t.Errorf("a slowloris connection costs %d bytes, want at most 64 KiB", perSlow)
	}
	if perDeaf > 512<<10 {
		t.Errorf("a non-reading connection costs %d bytes, want at most 512 KiB (the 64 KiB flush threshold and buffers)", perDeaf)
	}

	// The slowloris ones go 10 s after their first byte. A non-reader goes 10 s after its
	// last write made progress, which is once the kernel has buffered all it will of its
	// answers (megabytes per connection on loopback): later, but bounded.
	slowGone := time.Duration(0)
	for openFDs(t, pid) > fds0+5 && time.Since(deafOpened) < time.Minute {
		if slowGone == 0 && openFDs(t, pid) <= fds0+5+deafN {
			slowGone = time.Since(slowOpened)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("descriptors: %d before, %d after; slowloris dropped by %v after they opened, non-readers by %v",
		fds0, openFDs(t, pid), slowGone.Round(time.Second), time.Since(deafOpened).Round(time.Second))
	if n := openFDs(t, pid); n > fds0+5 {
		t.Errorf("%d descriptors open a minute later, %d before: slow clients were not dropped", n, fds0)
	}
	close(stop)
	wg.Wait()
	t.Logf("normal client meanwhile: %d served, %d failed", served.Load(), failed.Load())
	if failed.Load() > 0 || served.Load() == 0 {
		t.Errorf("the normal client: %d served, %d failed; want all served", served.Load(), failed.Load())
	}
}

// tcpMem is the memory the kernel holds in TCP buffers, all sockets of the host together.
func tcpMem(t *testing.T) string {
	b, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "TCP: "); ok {
			f := strings.Fields(rest)
			for i := 0; i+1 < len(f); i += 2 {
				if f[i] == "mem" {
					pages, _ := strconv.ParseInt(f[i+1], 10, 64)
					return fmt.Sprintf("%d MiB", pages*int64(os.Getpagesize())>>20)
				}
			}
		}
	}
	return "unknown"
}

// TestOverloadBoundedMemory runs 1,000 keep-alive clients flat out against one worker
// (GOMAXPROCS=1, as under the supervisor): far more than it can serve, so latency rises,
// but every request is answered, nothing crashes, and memory stays bounded, since there is
// no queue besides the connections themselves (each holds at most a bounded read buffer and
// one batch of answers).
func TestOverloadBoundedMemory(t *testing.T) {
	slow(t)
	dir := t.TempDir()
	w := startWorker(t, "SQLITE_PATH="+seedtest.Tiny(t, dir, true), "PRODUCTS_PATH="+filepath.Join(dir, "products.db"), "GOMAXPROCS=1")
	pid := w.Cmd.Process.Pid
	run := func(conns int, d time.Duration) (ok, failed int64, lat []time.Duration, maxRSS int64) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		deadline := time.Now().Add(d)
		for i := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.Dial("tcp", w.Addr)
				if err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
					return
				}
				defer c.Close()
				br := bufio.NewReader(c)
				auth := token.Sign([]byte(testSecret), int64(1+i%50), "load", time.Now(), time.Now().Add(time.Hour))
				var mine []time.Duration
				var bad int64
				for j := 0; time.Now().Before(deadline); j++ {
					req := "GET /feed HTTP/1.1\r\nHost: x\r\n\r\n"
					if j%10 == 9 {
						req = fmt.Sprintf("POST /posts/%d/like HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 0\r\n\r\n", 1+(i*7+j)%200, auth)
					}
					t0 := time.Now()
					c.SetDeadline(time.Now().Add(30 * time.Second))
					if _, err := io.WriteString(c, req); err != nil {
						bad++
						break
					}
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						bad++
						break
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode >= 300 {
						bad++
					}
					mine = append(mine, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, mine...)
				failed += bad
				mu.Unlock()
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for {
			if r := rssAnon(t, pid); r > maxRSS {
				maxRSS = r
			}
			select {
			case <-done:
				slices.Sort(lat)
				return int64(len(lat)), failed, lat, maxRSS
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	pct := func(lat []time.Duration, p int) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)*p/100, len(lat)-1)]
	}
	base := rssAnon(t, pid)
	okL, failL, latL, rssL := run(8, 5*time.Second)
	okH, failH, latH, rssH := run(1000, 10*time.Second)
	t.Logf("8 clients: %d ok (%.0f/s), %d failed, p50 %v p99 %v, max RssAnon %d KiB", okL, float64(okL)/5, failL, pct(latL, 50), pct(latL, 99), rssL>>10)
	t.Logf("1000 clients: %d ok (%.0f/s), %d failed, p50 %v p99 %v max %v, max RssAnon %d KiB (idle %d KiB)",
		okH, float64(okH)/10, failH, pct(latH, 50), pct(latH, 99), pct(latH, 100), rssH>>10, base>>10)
	if failL+failH > 0 {
		t.Errorf("%d requests failed under overload, want none (slower, not lost)", failL+failH)
	}
	if rssH > base+256<<20 {
		t.Errorf("RssAnon reached %d MiB under overload (idle %d MiB): want it bounded by the connections", rssH>>20, base>>20)
	}
	if r := do(t, "GET", "http://"+w.Addr+"/health", "", ""); r.status != 200 {
		t.Errorf("GET /health after the overload = %d", r.status)
	}
}
