package writelog_test

// The fleet as processes: each host a log node (cmd/lognode) and a worker (cmd/worker) on
// its own copy of one small database, the hosts on loopback ports (this file) or in
// network namespaces behind HAProxy under the real supervisor (fleetns_test.go). The
// client helpers speak the feed's API.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/fleetspec"
	"github.com/onehost/onehost/internal/proctest"
	"github.com/onehost/onehost/internal/seedtest"
	"github.com/onehost/onehost/internal/sqlitec"
	"github.com/onehost/onehost/internal/token"

	sqlite3 "modernc.org/sqlite/lib"
)

const testSecret = "fleet-test-secret-0123456789abcdef0123456789"

// bins builds the programs once per test binary.
var bins struct {
	once sync.Once
	dir  string
	err  error
}

func binary(t testing.TB, name string) string {
	t.Helper()
	bins.once.Do(func() {
		bins.dir, bins.err = os.MkdirTemp("", "writelog-bin-")
		if bins.err != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", bins.dir+"/",
			"github.com/onehost/onehost/cmd/worker", "github.com/onehost/onehost/cmd/lognode",
			"github.com/onehost/onehost/cmd/supervisor").CombinedOutput()
		if err != nil {
			bins.err = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return filepath.Join(bins.dir, name)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	os.Exit(code)
}

// freeBase returns a client port P with P and P+2000 free on addr.
func freeBase(t testing.TB, addr string) int {
	t.Helper()
	for range 100 {
		p := 20000 + rand.IntN(20000)
		ok := true
		for _, q := range []int{p, p + 2000} {
			ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(q)))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			return p
		}
	}
	t.Fatal("no free port pair")
	return 0
}

// tinyDB writes a small feed database (seedtest.Tiny) once and returns copies of it.
func tinyDBs(t testing.TB, n int) []string {
	t.Helper()
	base := seedtest.Tiny(t, t.TempDir(), true)
	b, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for i := range n {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("h%d", i))
		os.MkdirAll(dir, 0o755)
		p := filepath.Join(dir, "feed.db")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// loopHost is a host on loopback: its log node and its worker.
type loopHost struct {
	name, db, logDir string
	spec             fleetspec.Spec
	node, worker     *proctest.Proc
	url              string // the worker's http://ADDR:PORT
}

// loopFleet starts n hosts on 127.0.0.1 (log nodes first, then the workers).
func loopFleet(t *testing.T, n int, extraEnv ...string) []*loopHost {
	t.Helper()
	dbs := tinyDBs(t, n)
	var hosts []fleetspec.Host
	for i := range n {
		p := freeBase(t, "127.0.0.1")
		hosts = append(hosts, fleetspec.Host{Name: fmt.Sprintf("h%d", i+1), Addr: "127.0.0.1", ClientPort: p, RoutePort: p + 2000})
	}
	var fl []*loopHost
	for i, h := range hosts {
		lh := &loopHost{name: h.Name, db: dbs[i], logDir: filepath.Join(filepath.Dir(dbs[i]), "log"),
			spec: fleetspec.Spec{Hosts: hosts, Self: h.Name}}
		lh.spec.Dir = lh.logDir
		fl = append(fl, lh)
	}
	for _, lh := range fl {
		lh.startNode(t)
	}
	for _, lh := range fl {
		lh.startWorker(t, extraEnv...)
	}
	// A host takes traffic once its /health says it serves (its applier caught up and
	// announced), as behind a balancer: a write sent before that waits on an applier
	// still starting, and on a loaded machine ran past the write timeout (503 undecided).
	c := newClient()
	for _, lh := range fl {
		if st, b, ok := waitHealthy(c, lh.url, time.Minute); !ok {
			t.Fatalf("host %s not serving after a minute: %d %s", lh.name, st, b)
		}
	}
	return fl
}

func (lh *loopHost) startNode(t *testing.T) {
	t.Helper()
	cmd := exec.Command(binary(t, "lognode"))
	cmd.Env = append(lh.spec.Env(), "PATH="+os.Getenv("PATH"))
	lh.node = proctest.Start(t, cmd)
}

func (lh *loopHost) startWorker(t *testing.T, extraEnv ...string) {
	t.Helper()
	port := "0"
	if lh.url != "" { // started again: the same port
		_, port, _ = net.SplitHostPort(strings.TrimPrefix(lh.url, "http://"))
	}
	cmd := exec.Command(binary(t, "worker"), "-drain-timeout=2s")
	cmd.Env = append(append(lh.spec.Env(), "SQLITE_PATH="+lh.db, "JWT_SECRET="+testSecret, "HOST=127.0.0.1", "PORT="+port,
		"PRODUCTS_PATH="+filepath.Join(filepath.Dir(lh.db), "products.db"), "WORKER_ID=0", "PATH="+os.Getenv("PATH")), extraEnv...)
	lh.worker = proctest.Start(t, cmd)
	lh.url = "http://" + lh.worker.Addr
}

// client is a feed client that carries nothing: no cookie, no stickiness.
type client struct {
	hc *http.Client
}

func newClient() *client {
	return &client{hc: &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
}

func bearer(user int64) string {
	now := time.Now()
	return "Bearer " + token.Sign([]byte(testSecret), user, "user_"+strconv.FormatInt(user, 10), now, now.Add(time.Hour))
}

func (c *client) do(method, url string, user int64, body string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	if user > 0 {
		req.Header.Set("Authorization", bearer(user))
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// post creates a post and returns its id.
func (c *client) post(base string, user int64, text string) (int64, int, error) {
	st, b, err := c.do("POST", base+"/posts", user, `{"body":`+strconv.Quote(text)+`}`)
	if err != nil || st != 201 {
		return 0, st, fmt.Errorf("POST /posts: %d %s %v", st, b, err)
	}
	var r struct{ Post struct{ ID int64 } }
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, st, err
	}
	return r.Post.ID, st, nil
}

// like likes a post and returns the status (201 new, 200 already).
func (c *client) like(base string, user, post int64) (int, []byte, error) {
	return c.do("POST", base+"/posts/"+strconv.FormatInt(post, 10)+"/like", user, "")
}

// dbDigest is a digest of the rows of the feed's tables, and the applied sequence.
func dbDigest(t testing.TB, path string) (digest string, seq uint64) {
	t.Helper()
	c, err := sqlitec.Open(path, sqlite3.SQLITE_OPEN_READONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := sha256.New()
	for _, q := range []string{
		`SELECT group_concat(id||'|'||user_id||'|'||body||'|'||created_at, char(10)) FROM (SELECT * FROM posts ORDER BY id)`,
		`SELECT group_concat(user_id||'|'||post_id||'|'||created_at, char(10)) FROM (SELECT * FROM likes ORDER BY user_id, post_id)`,
		`SELECT (SELECT count(*) FROM posts)||' posts, '||(SELECT count(*) FROM likes)||' likes'`,
	} {
		v, err := c.QueryText(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		h.Write([]byte(v))
		h.Write([]byte{0})
	}
	lo, _ := c.QueryText("PRAGMA user_version")
	hi, _ := c.QueryText("PRAGMA application_id")
	l, _ := strconv.ParseInt(lo, 10, 64)
	hh, _ := strconv.ParseInt(hi, 10, 64)
	return hex.EncodeToString(h.Sum(nil))[:16], uint64(uint32(l)) | uint64(uint32(hh))<<32
}

// sameFiles waits (up to 20 s) until every file holds the same rows at the same sequence.
func sameFiles(t testing.TB, paths ...string) (string, uint64) {
	t.Helper()
	var last []string
	for deadline := time.Now().Add(20 * time.Second); ; {
		last = last[:0]
		set := map[string]bool{}
		var seq uint64
		for _, p := range paths {
			d, s := dbDigest(t, p)
			last = append(last, fmt.Sprintf("%s@%d", d, s))
			set[fmt.Sprintf("%s@%d", d, s)] = true
			seq = s
		}
		if len(set) == 1 {
			return last[0], seq
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hosts' files differ after 20 s: %v", last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pairs runs n POST→GET pairs, each POST on the next host and its GET on the one after
// (round robin with no stickiness), and returns the stale reads and the ids.
func pairs(t testing.TB, c *client, urls []string, n int, user0 int64) (stale int, ids []int64) {
	t.Helper()
	k := 0
	for i := range n {
		user := user0 + int64(i%20)
		id, _, err := c.post(urls[k%len(urls)], user, fmt.Sprintf("pair %d of %d", i, user0))
		k++
		if err != nil {
			t.Fatalf("pair %d: %v", i, err)
		}
		st, b, err := c.do("GET", urls[k%len(urls)]+"/posts/"+strconv.FormatInt(id, 10), user, "")
		k++
		if err != nil {
			t.Fatalf("pair %d: GET: %v", i, err)
		}
		if st != 200 {
			stale++
			t.Logf("stale: post %d written on %s read on %s: %d %s", id, urls[(k-2)%len(urls)], urls[(k-1)%len(urls)], st, b)
		}
		ids = append(ids, id)
	}
	return stale, ids
}

func distinct(ids []int64) int {
	s := append([]int64(nil), ids...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	n := 0
	for i := range s {
		if i == 0 || s[i] != s[i-1] {
			n++
		}
	}
	return n
}

func urlsOf(hosts []*loopHost) []string {
	var u []string
	for _, h := range hosts {
		u = append(u, h.url)
	}
	return u
}

func dbsOf(hosts []*loopHost) []string {
	var d []string
	for _, h := range hosts {
		d = append(d, h.db)
	}
	return d
}

// TestLoopbackFleet: three hosts on loopback, every write through the log: 0 stale reads
// of POST→GET pairs across hosts, ids never reused, a like counted once, identical files.
func TestLoopbackFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three log nodes and three workers")
	}
	fl := loopFleet(t, 3)
	c := newClient()
	urls := urlsOf(fl)
	stale, ids := pairs(t, c, urls, 150, 1)
	if stale != 0 {
		t.Errorf("%d stale reads of 150 POST→GET pairs across hosts, want 0", stale)
	}
	if d := distinct(ids); d != len(ids) {
		t.Errorf("%d posts got %d distinct ids: ids reused", len(ids), d)
	}
	// One user likes one post three times, once on each host: one 201, then 200s.
	var got []int
	for i := range 3 {
		st, b, err := c.like(urls[i], 7, ids[0])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, st)
		if i > 0 && !bytes.Contains(b, []byte(`"already_liked":true`)) {
			t.Errorf("like %d on host %d: %s, want already_liked", i+1, i+1, b)
		}
	}
	if got[0] != 201 || got[1] != 200 || got[2] != 200 {
		t.Errorf("three likes of one user: %v, want [201 200 200]", got)
	}
	sameFiles(t, dbsOf(fl)...)
}
