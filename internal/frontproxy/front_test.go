package frontproxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/token"
)

// startProxy renders configs/nginx/NAME.conf against p and runs it until the test ends.
// The descriptor limit stays under any hard limit (a container's often is 20,000), so a
// clean run leaves no alert in the error log.
func startProxy(t *testing.T, name string, p Params) *Proxy {
	t.Helper()
	needNginx(t)
	if p.WorkerProcesses == 0 {
		p.WorkerProcesses = 1
	}
	if p.RlimitNofile == 0 {
		p.RlimitNofile = 4096
	}
	if p.WorkerConnections == 0 {
		p.WorkerConnections = 1024
	}
	px, err := Start(context.Background(), readTemplate(t, name), Options{Prefix: t.TempDir(), Params: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := px.Stop(); err != nil {
			t.Errorf("stop nginx: %v", err)
		}
		if t.Failed() {
			t.Logf("nginx error log:\n%s", px.ErrorLog())
		}
	})
	return px
}

// reply is what the comparisons look at: what a client of the API depends on.
type reply struct {
	Status      int
	ContentType string
	Allow       string
	Body        string
	header      http.Header
}

func (r reply) String() string {
	return fmt.Sprintf("%d %s %q", r.Status, r.ContentType, r.Body)
}

func do(t testing.TB, c *http.Client, method, url, body string, hdr ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return reply{resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Allow"), string(b), resp.Header}
}

var client = &http.Client{Timeout: 10 * time.Second}

// noAlerts fails the test if nginx logged anything worse than an error: a clean run
// through these configs has no [alert], [crit] or [emerg] line.
func noAlerts(t *testing.T, px *Proxy) {
	t.Helper()
	for _, line := range strings.Split(px.ErrorLog(), "\n") {
		for _, lvl := range []string{"[alert]", "[crit]", "[emerg]"} {
			if strings.Contains(line, lvl) {
				t.Errorf("nginx error log: %s", line)
			}
		}
	}
}

// TestFeedThroughFront: the feed API answers through front.conf byte for byte as it does
// directly, reads and writes, and nginx reuses its upstream connections.
func TestFeedThroughFront(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a worker on a seed copy and nginx")
	}
	needNginx(t)
	w := startWorker(t)
	px := startProxy(t, "front", Params{Upstream: w.Addr})
	direct, front := "http://"+w.Addr, px.URL()

	t.Run("reads are byte-identical", func(t *testing.T) {
		for _, c := range []struct{ method, path string }{
			{"GET", "/feed"}, {"GET", "/feed?x=1"}, {"GET", "/posts/1"}, {"GET", "/posts/250000"},
			{"GET", "/posts/000500000"}, {"GET", "/posts/abc"}, {"GET", "/posts/999999999"},
			{"GET", "/nope"}, {"DELETE", "/feed"}, {"POST", "/posts"},
			// The $6-server routes (internal/shop), identical too.
			{"GET", "/api/hello"}, {"GET", "/api/products?page=2"}, {"GET", "/products?page=3"},
			{"GET", "/static/catalog.html"},
		} {
			got := do(t, client, c.method, front+c.path, "")
			want := do(t, client, c.method, direct+c.path, "")
			if got.Status != want.Status || got.ContentType != want.ContentType || got.Body != want.Body || got.Allow != want.Allow {
				t.Errorf("%s %s via nginx = %v (Allow %q), direct %v (Allow %q)", c.method, c.path, got, got.Allow, want, want.Allow)
			}
		}
	})

	t.Run("heavy PATCH is byte-identical", func(t *testing.T) {
		for _, c := range []struct {
			name, path, body, ctype string
			status                  int
		}{
			{"200, ~31 KB", "/api/resource/123?page=2&verbose=1", `{"foo1":"bar","n":[1,2,{"x":null}]}`, "application/json", 200},
			{"415", "/api/resource/123", `{"foo1":"bar"}`, "text/plain", 415},
			{"400 bad id", "/api/resource/0", `{"foo1":"bar"}`, "application/json", 400},
			{"400 bad query", "/api/resource/1?size=1000", `{"foo1":"bar"}`, "application/json", 400},
			{"400 not an object", "/api/resource/1", `[1]`, "application/json", 400},
		} {
			got := do(t, client, "PATCH", front+c.path, c.body, "Content-Type", c.ctype)
			want := do(t, client, "PATCH", direct+c.path, c.body, "Content-Type", c.ctype)
			if want.Status != c.status || (c.status == 200 && len(want.Body) < 30000) {
				t.Errorf("%s: PATCH %s direct = %d with %d bytes, want %d", c.name, c.path, want.Status, len(want.Body), c.status)
			}
			if got.Status != want.Status || got.ContentType != want.ContentType || got.Body != want.Body {
				t.Errorf("%s: PATCH %s via nginx = %d %q (%d bytes), direct %d %q (%d bytes)", c.name, c.path,
					got.Status, got.ContentType, len(got.Body), want.Status, want.ContentType, len(want.Body))
			}
		}
	})

	t.Run("writes", func(t *testing.T) {
		now := time.Now()
		auth := "Bearer " + token.Sign([]byte(testSecret), 1, "golden_ember_1", now, now.Add(time.Hour))
		created := do(t, client, "POST", front+"/posts", `{"body":"  through nginx ✓ "}`,
			"Authorization", auth, "Content-Type", "application/json")
		m := regexp.MustCompile(`^\{"post":\{"id":(\d+),"body":"through nginx ✓","created_at":"[0-9T:.-]+Z","author":"golden_ember_1","like_count":0\}\}$`).
			FindStringSubmatch(created.Body)
		if created.Status != 201 || m == nil {
			t.Fatalf("POST /posts via nginx = %v, want 201 and the created post", created)
		}
		id := m[1]
		for _, want := range []int{201, 200} {
			got := do(t, client, "POST", front+"/posts/"+id+"/like", "", "Authorization", auth, "Content-Type", "application/json")
			if got.Status != want {
				t.Errorf("like %s via nginx = %v, want %d", id, got, want)
			}
		}
		got, want := do(t, client, "GET", front+"/posts/"+id, ""), do(t, client, "GET", direct+"/posts/"+id, "")
		if got.Body != want.Body || !strings.Contains(got.Body, `"like_count":1`) {
			t.Errorf("GET /posts/%s via nginx = %v, direct %v, want like_count 1 in both", id, got, want)
		}
		if got := do(t, client, "POST", front+"/posts", `{"body":"x"}`); got.Body != `{"error":"missing bearer token"}` || got.Status != 401 {
			t.Errorf("POST /posts without a token via nginx = %v, want 401 missing bearer token", got)
		}
	})

	t.Run("upstream keep-alive", func(t *testing.T) {
		// Every client request on a new connection, so only nginx's pool can explain
		// a small number of connections on the worker's side.
		fresh := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		before := w.stats(t)
		const n = 200
		for i := range n {
			if got := do(t, fresh, "GET", front+"/posts/"+fmt.Sprint(1+i), ""); got.Status != 200 {
				t.Fatalf("GET /posts/%d via nginx = %v", 1+i, got)
			}
		}
		after := w.stats(t)
		accepted, served := after.Accepted-before.Accepted, after.Requests-before.Requests
		t.Logf("%d requests via nginx: the worker served %d and accepted %d connections", n, served, accepted)
		if served < n {
			t.Errorf("worker served %d requests, want at least %d", served, n)
		}
		if accepted > 3 {
			t.Errorf("worker accepted %d connections for %d sequential requests, want at most 3 (keepalive 64 reuses them)", accepted, n)
		}

		// The control: the same template without the upstream pool costs the worker a
		// connection per request, so the count above does measure reuse.
		tmpl := strings.Replace(string(readTemplate(t, "front")), "keepalive 64;", "", 1)
		bare, err := Start(context.Background(), []byte(tmpl), Options{Prefix: t.TempDir(),
			Params: Params{Upstream: w.Addr, WorkerProcesses: 1, RlimitNofile: 4096, WorkerConnections: 1024}})
		if err != nil {
			t.Fatal(err)
		}
		defer bare.Stop()
		before = w.stats(t)
		for i := range 20 {
			do(t, fresh, "GET", bare.URL()+"/posts/"+fmt.Sprint(1+i), "")
		}
		if accepted := w.stats(t).Accepted - before.Accepted; accepted < 20 {
			t.Errorf("without keepalive the worker accepted %d connections for 20 requests, want 20", accepted)
		}
	})
	noAlerts(t, px)
}

// shopRoute skips the test when the worker does not serve path (the shop routes arrive
// separately); any other failure is a failure.
func shopRoute(t *testing.T, direct, path string) reply {
	t.Helper()
	r := do(t, client, "GET", direct+path, "")
	if r.Status == 404 {
		t.Skipf("the worker answers GET %s with 404: the shop routes are not in cmd/worker yet", path)
	}
	if r.Status != 200 {
		t.Fatalf("GET %s direct = %v, want 200", path, r)
	}
	return r
}

// TestMicroCache: cache.conf caches /products?page=N for ten seconds and nothing else.
func TestMicroCache(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a worker on a seed copy and nginx")
	}
	needNginx(t)
	w := startWorker(t)
	direct := "http://" + w.Addr
	want := shopRoute(t, direct, "/products?page=1")
	px := startProxy(t, "cache", Params{Upstream: w.Addr})

	before := w.stats(t)
	for i, wantStatus := range []string{"MISS", "HIT", "HIT"} {
		got := do(t, client, "GET", px.URL()+"/products?page=1", "")
		if s := got.header.Get("X-Cache-Status"); s != wantStatus {
			t.Errorf("GET /products?page=1 #%d X-Cache-Status = %q, want %q", i+1, s, wantStatus)
		}
		if got.Status != 200 || got.Body != want.Body || got.ContentType != want.ContentType {
			t.Errorf("GET /products?page=1 #%d via the cache = %v, direct %v", i+1, got, want)
		}
	}
	if served := w.stats(t).Requests - before.Requests; served != 1 {
		t.Errorf("the worker served %d of 3 requests for one page within 10 s, want 1", served)
	}
	if s := do(t, client, "GET", px.URL()+"/products?page=2", "").header.Get("X-Cache-Status"); s != "MISS" {
		t.Errorf("GET /products?page=2 X-Cache-Status = %q, want MISS (the query string is part of the key)", s)
	}
	for range 2 {
		got := do(t, client, "GET", px.URL()+"/feed", "")
		if s, ok := got.header["X-Cache-Status"]; ok {
			t.Errorf("GET /feed has X-Cache-Status %q: the feed API must not be cached", s)
		}
	}
	before = w.stats(t)
	do(t, client, "GET", px.URL()+"/feed", "")
	if served := w.stats(t).Requests - before.Requests; served != 1 {
		t.Errorf("GET /feed reached the worker %d times, want 1 (never cached)", served)
	}
	noAlerts(t, px)
}

// TestStaticFromDisk: static.conf serves /static/ from the repository's directory without
// the worker, with ETag revalidation; the rest still goes to the worker.
func TestStaticFromDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a worker on a seed copy and nginx")
	}
	needNginx(t)
	root, err := filepath.Abs("../shop/static")
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(filepath.Join(root, "catalog.html"))
	if err != nil {
		t.Skipf("no catalog page to serve yet: %v", err)
	}
	w := startWorker(t)
	px := startProxy(t, "static", Params{Upstream: w.Addr, StaticRoot: root})

	before := w.stats(t)
	got := do(t, client, "GET", px.URL()+"/static/catalog.html", "")
	etag := got.header.Get("ETag")
	if got.Status != 200 || got.Body != string(file) || !strings.HasPrefix(got.ContentType, "text/html") || etag == "" {
		t.Fatalf("GET /static/catalog.html = %d %q ETag %q (%d bytes), want 200 text/html, the file's %d bytes and an ETag",
			got.Status, got.ContentType, etag, len(got.Body), len(file))
	}
	// gzip_static: the precompressed page beside the file, the bytes the worker embeds.
	wantGz, err := os.ReadFile(filepath.Join(root, "catalog.html.gz"))
	if err != nil {
		t.Fatal(err)
	}
	gz := do(t, client, "GET", px.URL()+"/static/catalog.html", "", "Accept-Encoding", "gzip")
	if gz.Status != 200 || gz.Body != string(wantGz) || gz.header.Get("Content-Encoding") != "gzip" || gz.header.Get("Vary") != "Accept-Encoding" {
		t.Errorf("GET /static/catalog.html Accept-Encoding: gzip = %d, %d bytes, Content-Encoding %q, Vary %q; want catalog.html.gz's %d bytes",
			gz.Status, len(gz.Body), gz.header.Get("Content-Encoding"), gz.header.Get("Vary"), len(wantGz))
	}
	again := do(t, client, "GET", px.URL()+"/static/catalog.html", "", "If-None-Match", etag)
	if again.Status != 304 || again.Body != "" {
		t.Errorf("GET /static/catalog.html If-None-Match %s = %d with %d bytes, want 304 and no body", etag, again.Status, len(again.Body))
	}
	if missing := do(t, client, "GET", px.URL()+"/static/nope.html", ""); missing.Status != 404 {
		t.Errorf("GET /static/nope.html = %d, want 404 from nginx", missing.Status)
	}
	if served := w.stats(t).Requests - before.Requests; served != 0 {
		t.Errorf("the worker served %d requests for /static/: nginx should serve them from disk", served)
	}
	feed, direct := do(t, client, "GET", px.URL()+"/feed", ""), do(t, client, "GET", "http://"+w.Addr+"/feed", "")
	if feed.Body != direct.Body || feed.Status != 200 {
		t.Errorf("GET /feed via static.conf = %v, direct %v", feed, direct)
	}
	noAlerts(t, px)
}

// TestWorkerConnectionsRunOut is the article's lesson in miniature: with worker_connections
// 16, the 17th connection is accepted and dropped, and nginx says why in its error log.
func TestWorkerConnectionsRunOut(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nginx")
	}
	// No worker: these connections never send a request, so nothing reaches upstream.
	px := startProxy(t, "front", Params{Upstream: "127.0.0.1:9", WorkerConnections: 16})
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	const n = 40
	for range n {
		c, err := net.DialTimeout("tcp", px.Addr(), 5*time.Second)
		if err != nil {
			t.Fatalf("dial nginx: %v", err) // the kernel accepts into the backlog: dial succeeds
		}
		conns = append(conns, c)
	}
	// Connections nginx had to drop read EOF or a reset; the others wait for a request.
	dropped := 0
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
			dropped++
		}
	}
	var log string
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if log = px.ErrorLog(); strings.Contains(log, "worker_connections are not enough") {
			break
		}
	}
	if !strings.Contains(log, "16 worker_connections are not enough") {
		t.Errorf("no 'worker_connections are not enough' in the error log after %d connections:\n%s", n, log)
	}
	if dropped == 0 {
		t.Errorf("none of %d connections was dropped with worker_connections 16", n)
	}
	t.Logf("%d of %d connections dropped; log: %s", dropped, n, firstLine(log, "worker_connections"))
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func firstLine(log, substr string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, substr) {
			return l
		}
	}
	return ""
}
