package main

// The write owner across hand-started workers (no supervisor): each worker binds its own
// port here, all serve one file, and the tests choose which worker gets each request, so
// that a write on one worker and a read on another are two processes for sure.

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite" // database/sql driver: the checks after a crash
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/onehost/onehost/internal/seedtest"
	"github.com/onehost/onehost/internal/sqlitec"
	"github.com/onehost/onehost/internal/token"
)

// Requests to a "rotate-N.test" base go to the next of its workers' addresses, one after
// the other (see rotatingBase): do() dials a fresh connection per request.
var rotations sync.Map // "rotate-N.test:80" → *rotation

type rotation struct {
	addrs []string
	next  atomic.Uint64
}

var rotationSeq atomic.Int64

func init() {
	tr := http.DefaultTransport.(*http.Transport)
	d := &net.Dialer{Timeout: 10 * time.Second}
	tr.Proxy = nil
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if r, ok := rotations.Load(addr); ok {
			rr := r.(*rotation)
			addr = rr.addrs[(rr.next.Add(1)-1)%uint64(len(rr.addrs))]
		}
		return d.DialContext(ctx, network, addr)
	}
}

// rotatingBase returns a base URL whose requests go to addrs in turn.
func rotatingBase(addrs ...string) string {
	host := fmt.Sprintf("rotate-%d.test:80", rotationSeq.Add(1))
	rotations.Store(host, &rotation{addrs: addrs})
	return "http://" + host
}

// startGroup starts n workers on db, each on its own port, and returns them with the index
// of the one that owns writes (from their logs).
func startGroup(t *testing.T, db string, n int, env ...string) ([]*worker, int) {
	t.Helper()
	var ws []*worker
	for i := range n {
		ws = append(ws, startWorker(t, append([]string{"SQLITE_PATH=" + db, fmt.Sprintf("WORKER_ID=%d", i)}, env...)...))
	}
	owner := -1
	for i, w := range ws {
		logs := w.Logs()
		switch {
		case strings.Contains(logs, `"msg":"write owner: this process"`):
			if owner >= 0 {
				t.Fatalf("workers %d and %d both own writes", owner, i)
			}
			owner = i
		case !strings.Contains(logs, `"msg":"write owner: following"`):
			t.Fatalf("worker %d says neither that it owns writes nor whom it follows:\n%s", i, logs)
		}
	}
	if owner < 0 {
		t.Fatal("no worker owns writes")
	}
	ownerPID := ws[owner].Cmd.Process.Pid
	for i, w := range ws {
		if i != owner && !strings.Contains(w.Logs(), fmt.Sprintf(`"owner_pid":%d`, ownerPID)) {
			t.Errorf("worker %d does not follow the owner (pid %d):\n%s", i, ownerPID, w.Logs())
		}
	}
	return ws, owner
}

func addrs(ws []*worker) []string {
	var a []string
	for _, w := range ws {
		a = append(a, w.Addr)
	}
	return a
}

func bearer(user int64, name string) string {
	return "Bearer " + token.Sign([]byte(testSecret), user, name, time.Now(), time.Now().Add(time.Hour))
}

var likeCount = regexp.MustCompile(`"like_count":(\d+)`)

// TestWriteOwner: two and three workers started by hand on one file elect one write owner;
// the challenge's checks pass with every request on the next worker, so each write and the
// read that follows it run in different processes.
func TestWriteOwner(t *testing.T) { forTransports(t, testWriteOwner) }

func testWriteOwner(t *testing.T, transport string) {
	if testing.Short() {
		t.Skip("starts workers on copies of the seed")
	}
	t.Run("42 checks through 2 workers", func(t *testing.T) {
		ws, _ := startGroup(t, seedtest.Path(t), 2, "TRANSPORT="+transport)
		officialChecks(t, rotatingBase(addrs(ws)...))
	})
	t.Run("3 workers", func(t *testing.T) {
		ws, owner := startGroup(t, seedtest.Path(t), 3, "TRANSPORT="+transport)
		t.Run("42 checks", func(t *testing.T) { officialChecks(t, rotatingBase(addrs(ws)...)) })

		t.Run("16 simultaneous identical likes over 3 processes", func(t *testing.T) {
			auth := bearer(7, "someone")
			codes := make(chan int, 16)
			var start sync.WaitGroup
			start.Add(1)
			for i := range 16 {
				go func() {
					start.Wait()
					codes <- do(t, "POST", "http://"+ws[i%3].Addr+"/posts/4343/like", auth, "").status
				}()
			}
			start.Done()
			var got []int
			for range 16 {
				got = append(got, <-codes)
			}
			slices.Sort(got)
			if want := append(slices.Repeat([]int{200}, 15), 201); !slices.Equal(got, want) {
				t.Errorf("statuses %v, want fifteen 200 and one 201", got)
			}
		})

		t.Run("read your writes across workers", func(t *testing.T) {
			// Each like is acknowledged by one worker and counted by the next read on
			// another; each post is readable on another worker at once.
			for i := range 60 {
				w, r := ws[i%3], ws[(i+1)%3]
				post := 1000 + i
				before := do(t, "GET", fmt.Sprintf("http://%s/posts/%d", r.Addr, post), "", "")
				m := likeCount.FindStringSubmatch(before.body)
				if m == nil {
					t.Fatalf("GET /posts/%d: %d %s", post, before.status, before.body)
				}
				n, _ := strconv.Atoi(m[1])
				if got := do(t, "POST", fmt.Sprintf("http://%s/posts/%d/like", w.Addr, post), bearer(int64(20+i), "reader"), ""); got.status != 201 {
					t.Fatalf("like on worker %d: %d %s", i%3, got.status, got.body)
				}
				after := do(t, "GET", fmt.Sprintf("http://%s/posts/%d", r.Addr, post), "", "")
				if want := fmt.Sprintf(`"like_count":%d`, n+1); !strings.Contains(after.body, want) {
					t.Fatalf("like acknowledged by worker %d, then GET on worker %d: %s, want %s", i%3, (i+1)%3, after.body, want)
				}
				created := do(t, "POST", "http://"+w.Addr+"/posts", bearer(int64(20+i), "reader"), fmt.Sprintf(`{"body":"ryw %d"}`, i))
				var id int64
				if _, err := fmt.Sscanf(created.body, `{"post":{"id":%d`, &id); err != nil || created.status != 201 {
					t.Fatalf("create on worker %d: %d %s", i%3, created.status, created.body)
				}
				if got := do(t, "GET", fmt.Sprintf("http://%s/posts/%d", r.Addr, id), "", ""); got.status != 200 ||
					!strings.Contains(got.body, fmt.Sprintf(`"body":"ryw %d"`, i)) {
					t.Fatalf("post created on worker %d, then GET on worker %d: %d %s", i%3, (i+1)%3, got.status, got.body)
				}
			}
		})

		t.Run("followers forward, the owner commits", func(t *testing.T) {
			for i, w := range ws {
				if err := w.Stop(t, syscall.SIGTERM); err != nil {
					t.Fatalf("worker %d: %v", i, err)
				}
			}
			// The owner stops first or last; either way every worker's final counters say
			// what it did. Only the first owner's are checked: a follower that outlived it
			// took over for the rest of the shutdown.
			logs := ws[owner].Logs()
			if m := regexp.MustCompile(`"Served":(\d+)`).FindStringSubmatch(logs); m == nil || m[1] == "0" {
				t.Errorf("the owner served no forwarded write:\n%s", logs)
			}
			for i, w := range ws {
				if i == owner {
					continue
				}
				if m := regexp.MustCompile(`"Forwarded":(\d+)`).FindStringSubmatch(w.Logs()); m == nil || m[1] == "0" {
					t.Errorf("follower %d forwarded no write:\n%s", i, w.Logs())
				}
			}
		})
	})
}

// ack records what the writers saw: acknowledged posts (id → body) and likes, undecided
// answers (503), transport errors.
type ack struct {
	mu        sync.Mutex
	posts     map[int64]string
	likes     map[[2]int64]bool
	undecided int
	other     map[string]int
}

func newAck() *ack {
	return &ack{posts: map[int64]string{}, likes: map[[2]int64]bool{}, other: map[string]int{}}
}

// add takes in b's acknowledged writes.
func (a *ack) add(b *ack) {
	for k, v := range b.posts {
		a.posts[k] = v
	}
	for k := range b.likes {
		a.likes[k] = true
	}
}

// writer sends likes and posts to addr over one keep-alive connection until stop, redialing
// after a transport error, and records every outcome in a. Users come from 1..50 (the tiny
// database), each (user, post) pair once, so every acknowledged like is a new row.
func writer(addr string, g int, stop <-chan struct{}, a *ack, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		var nc net.Conn
		var br *bufio.Reader
		defer func() {
			if nc != nil {
				nc.Close()
			}
		}()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if nc == nil {
				var err error
				if nc, err = net.DialTimeout("tcp", addr, time.Second); err != nil {
					a.mu.Lock()
					a.other["dial"]++
					a.mu.Unlock()
					time.Sleep(10 * time.Millisecond)
					nc = nil
					continue
				}
				br = bufio.NewReader(nc)
			}
			user, post := int64(1+(g*7+i)%50), int64(1+(g*1000+i)%200)
			auth := bearer(user, "user_"+strconv.FormatInt(user, 10))
			var req, body string
			if i%3 == 2 {
				body = fmt.Sprintf("writer %d says %d", g, i)
				js := `{"body":"` + body + `"}`
				req = fmt.Sprintf("POST /posts HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", auth, len(js), js)
			} else {
				user = int64(1 + (g*13+i/2)%50)
				post = int64(1 + (g*37+i*11)%200)
				auth = bearer(user, "user_"+strconv.FormatInt(user, 10))
				req = fmt.Sprintf("POST /posts/%d/like HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\nContent-Length: 0\r\n\r\n", post, auth)
			}
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			_, err := io.WriteString(nc, req)
			var resp *http.Response
			if err == nil {
				resp, err = http.ReadResponse(br, nil)
			}
			var got []byte
			if err == nil {
				got, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			a.mu.Lock()
			switch {
			case err != nil:
				a.other["transport"]++
				nc.Close()
				nc = nil
			case resp.StatusCode == 201 && body != "":
				var id int64
				fmt.Sscanf(string(got), `{"post":{"id":%d`, &id)
				a.posts[id] = body
			case (resp.StatusCode == 201 || resp.StatusCode == 200) && body == "":
				a.likes[[2]int64{user, post}] = true
			case resp.StatusCode == 503:
				a.undecided++
			default:
				a.other[fmt.Sprintf("%d %s", resp.StatusCode, got)]++
			}
			a.mu.Unlock()
		}
	}()
}

// reader reads posts and the feed from addr over one keep-alive connection until stop and
// counts the reads that did not answer 200.
func reader(t *testing.T, addr string, stop <-chan struct{}, failed, ok *atomic.Int64, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		defer nc.Close()
		br := bufio.NewReader(nc)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			path := "/feed"
			if i%2 == 0 {
				path = fmt.Sprintf("/posts/%d", 1+i%200)
			}
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			_, err := io.WriteString(nc, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
			var resp *http.Response
			if err == nil {
				resp, err = http.ReadResponse(br, nil)
			}
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if err != nil || resp.StatusCode != 200 {
				failed.Add(1)
				t.Errorf("read %s: %v %v", path, err, resp)
				return
			}
			ok.Add(1)
		}
	}()
}

// checkAcknowledged checks that every acknowledged write is in db and that the file
// passes PRAGMA integrity_check.
func checkAcknowledged(t *testing.T, db string, a *ack) {
	t.Helper()
	sdb, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	missing := 0
	for id, body := range a.posts {
		var got string
		if err := sdb.QueryRow(`SELECT body FROM posts WHERE id = ?`, id).Scan(&got); err != nil || got != body {
			if missing++; missing <= 3 {
				t.Errorf("acknowledged post %d (%q): %q, %v", id, body, got, err)
			}
		}
	}
	for k := range a.likes {
		var n int
		if err := sdb.QueryRow(`SELECT count(*) FROM likes WHERE user_id = ? AND post_id = ?`, k[0], k[1]).Scan(&n); err != nil || n != 1 {
			if missing++; missing <= 3 {
				t.Errorf("acknowledged like of post %d by user %d: %d rows, %v", k[1], k[0], n, err)
			}
		}
	}
	var check string
	if err := sdb.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Errorf("PRAGMA integrity_check = %q, %v; want ok", check, err)
	}
	if missing > 0 {
		t.Errorf("%d of %d acknowledged writes missing", missing, len(a.posts)+len(a.likes))
	}
}

// TestOwnerKill9UnderWriteLoad: the write owner is killed (-9) while all three workers take
// writes. Every acknowledged write is in the file, which passes integrity_check; a surviving
// worker owns writes within a second; reads on the survivors never fail; their writes fail
// only as undecided (503), and only those in flight to the dead owner.
func TestOwnerKill9UnderWriteLoad(t *testing.T) { forTransports(t, testOwnerKill9UnderWriteLoad) }

func testOwnerKill9UnderWriteLoad(t *testing.T, transport string) {
	if testing.Short() {
		t.Skip("starts workers")
	}
	db := seedtest.Tiny(t, t.TempDir(), false)
	ws, owner := startGroup(t, db, 3, "TRANSPORT="+transport)
	var survivors []*worker
	for i, w := range ws {
		if i != owner {
			survivors = append(survivors, w)
		}
	}
	onOwner, onSurvivors := newAck(), newAck()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 6 {
		w := ws[g%3]
		a := onSurvivors
		if w == ws[owner] {
			a = onOwner
		}
		writer(w.Addr, g, stop, a, &wg)
	}
	var readFailed, readOK atomic.Int64
	for _, w := range survivors {
		reader(t, w.Addr, stop, &readFailed, &readOK, &wg)
	}
	time.Sleep(700 * time.Millisecond)
	onSurvivors.mu.Lock()
	before := len(onSurvivors.likes) + len(onSurvivors.posts)
	onSurvivors.mu.Unlock()
	killed := time.Now()
	if err := ws[owner].Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	var newOwner *worker
	for newOwner == nil {
		for _, w := range survivors {
			if strings.Contains(w.Logs(), `"msg":"write owner: this process"`) {
				took, newOwner = time.Since(killed), w
			}
		}
		if time.Since(killed) > 5*time.Second {
			t.Fatal("no surviving worker owns writes 5 s after the owner was killed")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(time.Second)
	onSurvivors.mu.Lock()
	after := len(onSurvivors.likes) + len(onSurvivors.posts)
	onSurvivors.mu.Unlock()
	close(stop)
	wg.Wait()
	for _, w := range survivors {
		w.Stop(t, syscall.SIGTERM)
	}
	t.Logf("owner killed: new owner after %v; survivors' writes: %d acknowledged (%d after the kill), %d undecided, other %v; reads %d ok, %d failed; writes on the killed owner: %d acknowledged, errors %v",
		took.Round(time.Millisecond), after, after-before, onSurvivors.undecided, onSurvivors.other, readOK.Load(), readFailed.Load(),
		len(onOwner.likes)+len(onOwner.posts), onOwner.other)
	if took > time.Second {
		t.Errorf("new owner after %v, want within a second", took)
	}
	if after <= before {
		t.Errorf("no write acknowledged by the survivors after the kill")
	}
	if onSurvivors.undecided > 4 || len(onSurvivors.other) > 0 {
		t.Errorf("survivors' writes: %d undecided (want at most the 4 writers' requests in flight), other failures %v",
			onSurvivors.undecided, onSurvivors.other)
	}
	if readFailed.Load() > 0 {
		t.Errorf("%d reads failed on the survivors", readFailed.Load())
	}
	onSurvivors.add(onOwner)
	checkAcknowledged(t, db, onSurvivors)
}

// TestFollowerKill9: killing a worker that is not the owner affects nobody else: the
// others' reads and writes never fail and the owner stays the owner.
func TestFollowerKill9(t *testing.T) { forTransports(t, testFollowerKill9) }

func testFollowerKill9(t *testing.T, transport string) {
	if testing.Short() {
		t.Skip("starts workers")
	}
	db := seedtest.Tiny(t, t.TempDir(), false)
	ws, owner := startGroup(t, db, 3, "TRANSPORT="+transport)
	victim := (owner + 1) % 3
	others, victims := newAck(), newAck()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var readFailed, readOK atomic.Int64
	for g := range 6 {
		a := others
		if g%3 == victim {
			a = victims
		}
		writer(ws[g%3].Addr, g, stop, a, &wg)
		if g%3 != victim {
			reader(t, ws[g%3].Addr, stop, &readFailed, &readOK, &wg)
		}
	}
	time.Sleep(500 * time.Millisecond)
	ws[victim].Cmd.Process.Signal(syscall.SIGKILL)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	for i, w := range ws {
		if i != owner && i != victim && strings.Contains(w.Logs(), `"msg":"write owner: this process"`) {
			t.Errorf("worker %d took over writes, though the owner lives", i)
		}
	}
	for i, w := range ws {
		if i != victim {
			w.Stop(t, syscall.SIGTERM)
		}
	}
	t.Logf("follower killed: the others' writes %d acknowledged, %d undecided, other %v; reads %d ok, %d failed",
		len(others.likes)+len(others.posts), others.undecided, others.other, readOK.Load(), readFailed.Load())
	if others.undecided > 0 || len(others.other) > 0 || readFailed.Load() > 0 {
		t.Errorf("the survivors were affected: %d undecided writes, failures %v, %d failed reads", others.undecided, others.other, readFailed.Load())
	}
	others.add(victims)
	checkAcknowledged(t, db, others)
}

// TestHungOwner: an owner that is stopped (SIGSTOP) does not hold writes forever. A write
// sent to it fails as undecided after WRITE_TIMEOUT; from a second of silence on, the
// follower commits its writes itself; when the owner runs again, it answers again.
func TestHungOwner(t *testing.T) { forTransports(t, testHungOwner) }

func testHungOwner(t *testing.T, transport string) {
	if testing.Short() {
		t.Skip("starts workers")
	}
	db := seedtest.Tiny(t, t.TempDir(), false)
	ws, owner := startGroup(t, db, 2, "WRITE_TIMEOUT=1500ms", "TRANSPORT="+transport)
	f := ws[1-owner]
	a := newAck()
	// Nothing is in flight, but an idle owner still runs SQLite (its checkpointer every
	// 250 ms), and CI once stopped it while it held SQLite's write lock: every follower
	// write then failed for 200 s. A process stopped holding that lock blocks every writer
	// of the file until it runs again, SQLite's locks, not ours (docs/reliability.md). So
	// the owner is stopped again until a probe finds the lock free; what is tested is that
	// a silent owner does not hold the follower's writes.
	stopped := false
	defer func() {
		if stopped {
			ws[owner].Cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	for try := 0; ; try++ {
		if err := ws[owner].Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped = true
		if writeLockFree(t, db) {
			break
		}
		if try == 20 {
			t.Fatal("the owner held SQLite's write lock every one of 20 times it was stopped")
		}
		t.Logf("the owner was stopped holding SQLite's write lock; running it on and stopping it again")
		ws[owner].Cmd.Process.Signal(syscall.SIGCONT)
		stopped = false
		time.Sleep(20 * time.Millisecond)
	}
	type outcome struct {
		status int
		took   time.Duration
	}
	var outs []outcome
	for i := 0; i < 40; i++ {
		user, post := int64(1+i%50), int64(1+i)
		start := time.Now()
		r := do(t, "POST", fmt.Sprintf("http://%s/posts/%d/like", f.Addr, post), bearer(user, "u"), "")
		outs = append(outs, outcome{r.status, time.Since(start)})
		if r.status == 201 {
			a.likes[[2]int64{user, post}] = true
		}
		if len(outs) > 3 && outs[len(outs)-1].status == 201 && outs[len(outs)-2].status == 201 {
			break
		}
	}
	ws[owner].Cmd.Process.Signal(syscall.SIGCONT)
	stopped = false
	t.Logf("writes to a follower while the owner is stopped: %v", outs)
	if outs[0].status != 503 || outs[0].took < time.Second || outs[0].took > 3*time.Second {
		t.Errorf("first write: %d after %v, want 503 after the 1.5 s write timeout", outs[0].status, outs[0].took)
	}
	last := outs[len(outs)-1]
	if last.status != 201 {
		t.Errorf("writes while the owner is stopped never succeeded: %v", outs)
	}
	for _, o := range outs {
		if o.took > 3*time.Second {
			t.Errorf("a write waited %v, more than the bound", o.took)
		}
	}
	// The owner runs again: it is heard (its late answers arrive) and writes go to it.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(f.Logs(), `"msg":"write owner: answers again"`) {
		if time.Now().After(deadline) {
			t.Fatalf("follower did not hear the owner again:\n%s", f.Logs())
		}
		do(t, "POST", fmt.Sprintf("http://%s/posts/150/like", f.Addr), bearer(9, "u"), "")
		time.Sleep(50 * time.Millisecond)
	}
	for _, w := range ws {
		w.Stop(t, syscall.SIGTERM)
	}
	checkAcknowledged(t, db, a)
}

// writeLockFree reports whether a write transaction on db can start now (BEGIN IMMEDIATE,
// no waiting): whether any process holds SQLite's write lock on it.
func writeLockFree(t *testing.T, db string) bool {
	t.Helper()
	c, err := sqlitec.Open(db, sqlite3.SQLITE_OPEN_READWRITE)
	if err != nil {
		t.Fatalf("open %s: %v", db, err)
	}
	defer c.Close()
	if err := c.Exec("BEGIN IMMEDIATE"); err != nil {
		var se *sqlitec.Error
		if errors.As(err, &se) && se.Code&0xff == sqlite3.SQLITE_BUSY {
			return false
		}
		t.Fatalf("begin a write transaction on %s: %v", db, err)
	}
	if err := c.Exec("ROLLBACK"); err != nil {
		t.Fatalf("roll back on %s: %v", db, err)
	}
	return true
}
