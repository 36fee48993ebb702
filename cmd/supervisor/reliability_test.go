package main

// Hostile conditions for the whole cluster, with the real worker: kill -9 of everything
// under a write load, kill -9 of one worker under load, a full disk, a database that is
// missing at start or goes away while running, and the control socket facing other users
// and garbage. The figures the subtests log are those in docs/reliability.md.

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver: test databases and the checks after a crash

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/procstat"
	"github.com/onehost/onehost/internal/seedtest"
	"github.com/onehost/onehost/internal/token"
)

const relSecret = "twelve-dollar-challenge"

// binaries are the real programs, built once for the subtests of TestReliability.
type binaries struct{ supervisor, worker string }

// buildBinaries builds the supervisor and the worker into a directory that other users may
// read and execute (the control-socket subtest runs a client as nobody).
func buildBinaries(t *testing.T, buildFlags ...string) binaries {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	args := append(append([]string{"build"}, buildFlags...), "-o", dir+"/", "github.com/onehost/onehost/cmd/supervisor",
		"github.com/onehost/onehost/cmd/worker")
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return binaries{filepath.Join(dir, "supervisor"), filepath.Join(dir, "worker")}
}

func TestReliability(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs clusters of real workers")
	}
	bins := buildBinaries(t)
	t.Run("ClusterKill9UnderWriteLoad", func(t *testing.T) { t.Parallel(); clusterKill9(t, bins) })
	t.Run("WorkerKill9UnderLoad", func(t *testing.T) { t.Parallel(); workerKill9(t, bins) })
	t.Run("DiskFull", func(t *testing.T) { t.Parallel(); diskFull(t, bins) })
	t.Run("DatabaseMissingAtStart", func(t *testing.T) { t.Parallel(); missingAtStart(t, bins) })
	t.Run("DatabaseGoneWhileRunning", func(t *testing.T) { t.Parallel(); goneWhileRunning(t, bins) })
	t.Run("ControlSocket", func(t *testing.T) { t.Parallel(); controlSocket(t, bins) })
	t.Run("SupervisorStall", func(t *testing.T) { t.Parallel(); supervisorStall(t, bins) })
	t.Run("SupervisorStallDuringReload", func(t *testing.T) { t.Parallel(); supervisorStallDuringReload(t, bins) })
	for name, where := range map[string]string{"SupervisorKill9Adopt": workerBeside,
		"SupervisorKill9AdoptWorkerElsewhere": workerElsewhere, "SupervisorKill9AdoptWorkerRelative": workerRelative} {
		t.Run(name, func(t *testing.T) { t.Parallel(); supervisorKill9Adopt(t, bins, where) })
	}
	t.Run("SupervisorUpgrade", func(t *testing.T) {
		t.Parallel()
		// The second build for the alternation, and one whose workers' protocol differs
		// (it cannot take the first's over: the way back).
		supervisorUpgrade(t, bins, buildBinaries(t), buildBinaries(t, "-ldflags=-X=github.com/onehost/onehost/internal/ipc.protoVersion=2"))
	})
	t.Run("SupervisorAndWorkerKill9", func(t *testing.T) { t.Parallel(); supervisorAndWorkerKill9(t, bins) })
	t.Run("UpgradeKeepsHeldApps", func(t *testing.T) { t.Parallel(); upgradeKeepsHeldApps(t, bins) })
}

// clusterConfig is a YAML configuration running n real workers on db.
func clusterConfig(n int, db, products string, extra string) string {
	return fmt.Sprintf("instances: %d\nwait_ready: true\nenv: {SQLITE_PATH: %q, PRODUCTS_PATH: %q, JWT_SECRET: %s, GORACE: atexit_sleep_ms=0}\n%s",
		n, db, products, relSecret, extra)
}

// processGone reports whether pid has exited (a zombie nobody reaps counts as gone).
func processGone(pid int) bool { return !procstat.Running("", pid) }

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// httpDo sends one request on a fresh connection and returns status and body.
func httpDo(method, url, auth, body string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func signed(user int64) string {
	return token.Sign([]byte(relSecret), user, "user_"+strconv.FormatInt(user, 10), time.Now(), time.Now().Add(time.Hour))
}

// acked is every write that got its 2xx: posts by id with their body, likes by (user, post).
type acked struct {
	mu    sync.Mutex
	posts map[int64]string
	likes map[[2]int64]bool
}

// writeLoad runs clients keep-alive writers (posts and likes, each like a new pair) until
// stop is closed or a request fails, recording every acknowledged write.
func writeLoad(addr string, clients int, stop <-chan struct{}, a *acked) *sync.WaitGroup {
	var wg sync.WaitGroup
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			user := int64(1 + g)
			auth := signed(user)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var req, body string
				post := int64(1 + i) // user g likes posts 1, 2, 3, ...: every like is new
				if i%3 == 2 {
					body = fmt.Sprintf("kill -9 test: client %d write %d", g, i)
					j := `{"body":"` + body + `"}`
					req = fmt.Sprintf("POST /posts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", auth, len(j), j)
				} else {
					req = fmt.Sprintf("POST /posts/%d/like HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 0\r\n\r\n", post, auth)
				}
				if _, err := io.WriteString(c, req); err != nil {
					return
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					return // the crash: this request is not acknowledged
				}
				rb, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					return
				}
				a.mu.Lock()
				switch {
				case body != "" && resp.StatusCode == 201:
					var id int64
					fmt.Sscanf(string(rb), `{"post":{"id":%d`, &id)
					a.posts[id] = body
				case body == "" && (resp.StatusCode == 201 || resp.StatusCode == 200):
					a.likes[[2]int64{user, post}] = true
				}
				a.mu.Unlock()
			}
		}()
	}
	return &wg
}

// clusterKill9: SIGKILL to the supervisor and every worker at once (their process group)
// in the middle of a write load; after a restart, every acknowledged post and like is there
// and the database passes PRAGMA integrity_check. On the small database, since
// integrity_check reads all of the 250 MB seed in ~15 s on a busy 2-core machine; with
// ONEHOST_SLOW=1, on a copy of the seed.
func clusterKill9(t *testing.T, bins binaries) {
	dir := t.TempDir()
	db := seedtest.Tiny(t, dir, false)
	if os.Getenv("ONEHOST_SLOW") == "1" {
		db = seedtest.Path(t)
	}
	cfg := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cfg, []byte(clusterConfig(2, db, filepath.Join(dir, "products.db"), "")), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	ctl := &runningCluster{socket: sock}
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("supervisor logs:\n%s", logs)
		}
	})
	start := func() (*exec.Cmd, control.Status) {
		t.Helper()
		cmd := exec.Command(bins.supervisor, "run", "-config", cfg, "-socket", sock, "-listen", "127.0.0.1:0")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Stderr = logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var st control.Status
		waitUntil(t, 60*time.Second, "cluster online", func() bool {
			var err error
			st, err = ctl.status()
			return err == nil && len(st.Workers) == 2 && everyOnline(st)
		})
		return cmd, st
	}
	cmd, st := start()
	a := &acked{posts: map[int64]string{}, likes: map[[2]int64]bool{}}
	stop := make(chan struct{})
	wg := writeLoad(st.Addr, 8, stop, a)
	time.Sleep(1500 * time.Millisecond)
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, w := range st.Workers { // each worker leads its own process group
		syscall.Kill(w.PID, syscall.SIGKILL)
	}
	cmd.Wait()
	for _, w := range st.Workers {
		waitUntil(t, 5*time.Second, "worker gone", func() bool { return processGone(w.PID) })
	}
	close(stop)
	wg.Wait()
	if len(a.posts) == 0 || len(a.likes) == 0 {
		t.Fatalf("no write acknowledged before the kill (%d posts, %d likes)", len(a.posts), len(a.likes))
	}

	restartAt := time.Now()
	cmd, st = start()
	t.Logf("kill -9 of the cluster after %d acknowledged posts and %d likes; online again %v after the restart",
		len(a.posts), len(a.likes), time.Since(restartAt).Round(time.Millisecond))
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	missing := 0
	for id, body := range a.posts {
		code, got, err := httpDo("GET", fmt.Sprintf("http://%s/posts/%d", st.Addr, id), "", "")
		if err != nil || code != 200 || !strings.Contains(got, `"body":"`+body+`"`) {
			missing++
			if missing <= 3 {
				t.Errorf("acknowledged post %d (%q) after the restart: %d %s %v", id, body, code, got, err)
			}
		}
	}
	sdb, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	for k := range a.likes {
		var n int
		if err := sdb.QueryRow(`SELECT count(*) FROM likes WHERE user_id = ? AND post_id = ?`, k[0], k[1]).Scan(&n); err != nil || n != 1 {
			missing++
			if missing <= 3 {
				t.Errorf("acknowledged like of post %d by user %d after the restart: %d rows, %v", k[1], k[0], n, err)
			}
		}
	}
	var check string
	checkStart := time.Now()
	if err := sdb.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Errorf("PRAGMA integrity_check = %q, %v; want ok", check, err)
	}
	t.Logf("after the restart: %d of %d acknowledged writes missing, integrity_check %q (%v)", missing, len(a.posts)+len(a.likes), check, time.Since(checkStart).Round(time.Millisecond))
}

// workerKill9: SIGKILL to one of two workers under load. Only the connections it held may
// fail; a connection opened after it died never does (it waits in the slot's socket queue
// for the successor); the successor is online within the first backoff step plus a start.
func workerKill9(t *testing.T, bins binaries) {
	dir := t.TempDir()
	db := seedtest.Tiny(t, dir, false)
	c := startRun(t, clusterConfig(2, db, filepath.Join(dir, "products.db"), ""), "-log-format", "json", "--", bins.worker) // the restart check reads the entry's JSON
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	victim := st.Workers[0].PID

	type failure struct {
		dialed time.Time
		err    error
	}
	var mu sync.Mutex
	var fails []failure
	var ok int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const keepAlive, fresh = 4, 4
	for i := range keepAlive + fresh {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var conn net.Conn
			var br *bufio.Reader
			var dialed time.Time
			defer func() {
				if conn != nil {
					conn.Close()
				}
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if conn == nil {
					dialed = time.Now()
					var err error
					if conn, err = net.DialTimeout("tcp", st.Addr, 5*time.Second); err != nil {
						mu.Lock()
						fails = append(fails, failure{dialed, err})
						mu.Unlock()
						conn = nil
						continue
					}
					br = bufio.NewReader(conn)
				}
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				_, err := io.WriteString(conn, "GET /posts/1 HTTP/1.1\r\nHost: x\r\n\r\n")
				var resp *http.Response
				if err == nil {
					resp, err = http.ReadResponse(br, nil)
				}
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				mu.Lock()
				if err != nil {
					fails = append(fails, failure{dialed, err})
				} else {
					ok++
				}
				mu.Unlock()
				if err != nil || i >= keepAlive { // fresh clients: one request per connection
					conn.Close()
					conn = nil
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	killed := time.Now()
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "killed worker gone", func() bool { return processGone(victim) })
	goneAt := time.Now()
	var back time.Duration
	waitUntil(t, 30*time.Second, "slot 0 online again", func() bool {
		s, err := c.status()
		if err == nil && s.Workers[0].PID != victim && s.Workers[0].Status == "online" {
			back = time.Since(killed)
			return true
		}
		return false
	})
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	var late []failure
	for _, f := range fails {
		if f.dialed.After(goneAt) {
			late = append(late, f)
		}
	}
	t.Logf("kill -9 of one worker of two: %d requests ok, %d failed (on connections it held), slot online again %v after the kill",
		ok, len(fails), back.Round(time.Millisecond))
	for _, f := range late {
		t.Errorf("a connection opened %v after the worker died failed: %v", f.dialed.Sub(goneAt), f.err)
	}
	if len(fails) > keepAlive+fresh {
		t.Errorf("%d requests failed, more than the %d connections the clients can hold at once: %v", len(fails), keepAlive+fresh, fails)
	}
	if !strings.Contains(c.logs.String(), `"msg":"restarting worker","slot":0,"delay":0.1`) {
		t.Errorf("no restart of slot 0 after the first backoff step (100 ms) in the log")
	}
}

// diskFull: the database's file system fills up under a running cluster. Writes answer
// 500 with the contract's body, reads and /health keep working, no worker exits, and
// writes succeed again once space returns.
func diskFull(t *testing.T, bins binaries) {
	if os.Geteuid() != 0 {
		t.Skip("mounts a small tmpfs: needs root")
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "disk")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("mount a tmpfs: %v (not permitted here)", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) }) // runs after the cluster stops
	db := seedtest.Tiny(t, mnt, false)
	c := startRun(t, clusterConfig(2, db, filepath.Join(dir, "products.db"), ""), "--", bins.worker)
	st, _ := c.status()
	base := "http://" + st.Addr

	// Fill the disk.
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(f, zeroReader{})
	f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs ended with %v, want ENOSPC", err)
	}
	// Eight clients post at once, so that the write owner's batches hold several posts:
	// a batch that meets the full disk must fail as a whole, every post of it 500 and none
	// of them in the file afterwards.
	auth := signed(1)
	var mu sync.Mutex
	created, failed := map[string]bool{}, map[string]bool{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 250; i++ {
				mu.Lock()
				enough := len(failed) >= 40
				mu.Unlock()
				if enough {
					return
				}
				text := fmt.Sprintf("full disk %d %d %s", g, i, strings.Repeat("x", 480))
				code, got, err := httpDo("POST", base+"/posts", auth, `{"body":"`+text+`"}`)
				mu.Lock()
				switch {
				case err != nil:
					t.Errorf("POST /posts on a full disk: %v (a worker died?)", err)
				case code == 201:
					created[text] = true // space the WAL already had
				case code == 500 && got == `{"error":"internal server error"}`:
					failed[text] = true
				default:
					t.Errorf("POST /posts on a full disk = %d %s, want 201 or 500 internal server error", code, got)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if len(failed) == 0 {
		t.Fatalf("%d posts created on a full disk, none failed", len(created))
	}
	waitUntil(t, 5*time.Second, "the reason in the log", func() bool {
		return strings.Contains(c.logs.String(), "database or disk is full")
	})
	for _, path := range []string{"/posts/1", "/feed", "/health"} {
		if code, got, err := httpDo("GET", base+path, "", ""); err != nil || code != 200 {
			t.Errorf("GET %s on a full disk = %d %s %v, want 200", path, code, got, err)
		}
	}
	// Space returns.
	os.Remove(filler)
	var code int
	waitUntil(t, 10*time.Second, "a write succeeds after space returned", func() bool {
		code, _, _ = httpDo("POST", base+"/posts", auth, `{"body":"space is back"}`)
		return code == 201
	})
	after, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range after.Workers {
		if w.PID != st.Workers[i].PID || w.Restarts != 0 || w.Status != "online" {
			t.Errorf("worker %d after the full disk: %+v, want the same pid %d, online, no restart", i, w, st.Workers[i].PID)
		}
	}
	// Every 201 is in the file, no 500 is: nothing acknowledged was lost, nothing that
	// failed was half saved.
	sdb, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	for acked, bodies := range map[bool]map[string]bool{true: created, false: failed} {
		for body := range bodies {
			var n int
			if err := sdb.QueryRow(`SELECT count(*) FROM posts WHERE body = ?`, body).Scan(&n); err != nil || (n == 1) != acked {
				t.Errorf("post %.20q… answered %v: %d rows in the file, %v", body, map[bool]string{true: "201", false: "500"}[acked], n, err)
			}
		}
	}
	t.Logf("full disk: %d posts still fit, then %d answered 500 (none in the file); reads 200; writes back once space returned; no restart",
		len(created), len(failed))
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// missingAtStart: SQLITE_PATH names no file. Each worker exits at once with a clear error,
// the slot's backoff retries, and after max_restarts the slot is errored (not restarted
// forever); once the file exists, `supervisor reload` brings the slot back.
func missingAtStart(t *testing.T, bins binaries) {
	dir := t.TempDir()
	db := filepath.Join(dir, "feed.db")
	cfg := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cfg, []byte(clusterConfig(1, db, filepath.Join(dir, "products.db"),
		// min_uptime far above how long the worker takes to fail: a -race worker on a loaded
		// machine can take over the default 1 s to exit, and a start that lasted
		// min_uptime counts as stable, so the restarts would never run out.
		"max_restarts: 2\nexp_backoff_restart_delay: 50ms\nmin_uptime: 30s\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &runningCluster{socket: filepath.Join(dir, "s.sock"), done: make(chan error, 1), logs: &syncBuffer{}}
	go func() {
		c.done <- run(context.Background(), []string{"run", "-config", cfg, "-socket", c.socket, "-listen", "127.0.0.1:0", "-log-format", "json", "--", bins.worker},
			func(string) string { return "" }, io.Discard, c.logs)
	}()
	t.Cleanup(func() {
		c.cmd("stop")
		select {
		case <-c.done:
		case <-time.After(15 * time.Second):
			t.Error("run did not return after stop")
		}
		if t.Failed() {
			t.Logf("supervisor log:\n%s", c.logs)
		}
	})
	start := time.Now()
	waitUntil(t, 30*time.Second, "slot errored", func() bool {
		st, err := c.status()
		return err == nil && len(st.Workers) == 1 && st.Workers[0].Status == "errored"
	})
	t.Logf("missing database: slot errored %v after start (max_restarts 2, first delay 50 ms)", time.Since(start).Round(time.Millisecond))
	logs := c.logs.String()
	if !strings.Contains(logs, "open feed database") || !strings.Contains(logs, "no such file or directory") {
		t.Errorf("the worker's reason (open feed database: no such file) is not in the log")
	}
	if strings.Count(logs, `"msg":"worker started"`) != 3 {
		t.Errorf("%d worker starts, want 3 (max_restarts 2 + 1)", strings.Count(logs, `"msg":"worker started"`))
	}
	seedtest.Tiny(t, dir, false)
	if out, err := c.cmd("reload"); err != nil {
		t.Fatalf("reload once the database exists: %v %s", err, out)
	}
	if st, _ := c.status(); !everyOnline(st) {
		t.Errorf("after reload: %+v, want online", st.Workers)
	}
}

// goneWhileRunning: the database renamed away under two workers. `supervisor status`
// shows both unhealthy with the reason, nothing restarts, and renaming it back heals.
func goneWhileRunning(t *testing.T, bins binaries) {
	dir := t.TempDir()
	db := seedtest.Tiny(t, dir, false)
	c := startRun(t, clusterConfig(2, db, filepath.Join(dir, "products.db"), "stats_interval: 200ms\n"), "--", bins.worker)
	before, _ := c.status()
	health := func(want string) func() bool {
		return func() bool {
			st, err := c.status()
			if err != nil {
				return false
			}
			for _, w := range st.Workers {
				if w.Health != want {
					return false
				}
			}
			return true
		}
	}
	waitUntil(t, 10*time.Second, "workers healthy", health("ok"))
	if err := os.Rename(db, db+".away"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "workers unhealthy", health("unhealthy"))
	table, err := c.cmd("status")
	if err != nil || !strings.Contains(table, "unhealthy") || !strings.Contains(table, "worker 1 unhealthy: ping feed database: database file was deleted, renamed or replaced") {
		t.Errorf("status table:\n%s%v\nwant both workers unhealthy, with the reason", table, err)
	}
	t.Logf("status with the database renamed away:\n%s", table)
	if err := os.Rename(db+".away", db); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "workers healthy again", health("ok"))
	after, _ := c.status()
	for i, w := range after.Workers {
		if w.PID != before.Workers[i].PID || w.Restarts != 0 {
			t.Errorf("worker %d: %+v, want pid %d and no restart: health is shown, not acted on", i, w, before.Workers[i].PID)
		}
	}
}

// controlSocket: the socket is mode 0600 and owned by the supervisor's user; a client of
// another user is refused, even when the mode is loosened (SO_PEERCRED); garbage gets an
// error answer and changes nothing.
func controlSocket(t *testing.T, bins binaries) {
	modeFile := filepath.Join(t.TempDir(), "mode")
	os.WriteFile(modeFile, []byte("ok"), 0o600)
	c := startRun(t, fmt.Sprintf("instances: 2\nenv: {GORACE: atexit_sleep_ms=0, %s: worker, FAKE_MODE_FILE: %q}\n", roleEnv, modeFile),
		"--", os.Args[0])
	before, _ := c.status()
	fi, err := os.Stat(c.socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
		t.Errorf("control socket mode %v owner %d, want 0600 owned by %d", fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Uid, os.Geteuid())
	}

	t.Run("another user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("runs a client as uid 65534: needs root")
		}
		// Only the socket's own mode may stand in the way: open up its directories.
		for _, d := range []string{filepath.Dir(filepath.Dir(c.socket)), filepath.Dir(c.socket)} {
			os.Chmod(d, 0o755)
		}
		asNobody := func() (string, error) {
			cmd := exec.Command(bins.supervisor, "status", "-socket", c.socket)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		if out, err := asNobody(); err == nil || !strings.Contains(out, "permission denied") {
			t.Errorf("status as nobody with the socket 0600 = %v %s, want permission denied", err, out)
		}
		// Loosened by mistake: the kernel's credentials still keep nobody out.
		if err := os.Chmod(c.socket, 0o666); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(c.socket, 0o600)
		if out, err := asNobody(); err == nil || strings.Contains(out, "serving") {
			t.Errorf("status as nobody with the socket 0666 = %v %s, want a refusal", err, out)
		}
		if !strings.Contains(c.logs.String(), "control socket: refused a connection from another user") {
			t.Error("no log line for the refused connection")
		}
	})

	t.Run("garbage", func(t *testing.T) {
		for _, tt := range []struct{ name, send, want string }{
			{"not HTTP", "\x00\xff\x16\x03\x01 hello\r\n\r\n", "400"},
			{"huge header", "GET /status HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 2<<20) + "\r\n\r\n", "431"},
			{"unknown command", "POST /exec?cmd=rm+-rf+/ HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", "404"},
			{"scale with a command", "POST /scale?n=$(reboot) HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", "400"},
			{"scale out of range", "POST /scale?n=100000 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", "409"},
			{"wrong method", "DELETE /status HTTP/1.1\r\nHost: x\r\n\r\n", "405"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				conn, err := net.Dial("unix", c.socket)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				go io.WriteString(conn, tt.send) // the server may answer before reading it all
				line, err := bufio.NewReader(conn).ReadString('\n')
				if !strings.Contains(line, " "+tt.want+" ") {
					t.Errorf("answer %q, %v; want %s", line, err, tt.want)
				}
			})
		}
		after, err := c.status()
		if err != nil {
			t.Fatal(err)
		}
		if len(after.Workers) != len(before.Workers) || !everyOnline(after) {
			t.Errorf("after the garbage: %+v, want the same %d workers online", after.Workers, len(before.Workers))
		}
	})
}
