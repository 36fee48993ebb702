package journey

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testTokens are n fake tokens: user k is user_k with token tok.k. Fewer tokens than
// users exercises the wrap-around.
func testTokens(n int) []Token {
	toks := make([]Token, n)
	for i := range toks {
		toks[i] = Token{ID: int64(i + 1), Username: fmt.Sprintf("user_%d", i+1), Token: fmt.Sprintf("tok.%d", i+1)}
	}
	return toks
}

// fakeFeed is an in-process stand-in for the feed API with twenty posts, ids 1..20. It
// records what the journey's writes carry.
type fakeFeed struct {
	feedStatus int           // GET /feed answers this (default 200)
	postStatus int           // GET /posts/:id answers this (default 200)
	postDelay  time.Duration // GET /posts/:id waits this long first

	mu      sync.Mutex
	counts  map[string]int
	likes   []fakeRequest
	creates []fakeRequest
	bad     []string // requests the contract would not accept
}

type fakeRequest struct {
	path, auth, contentType, body string
}

// feedBody has a post whose body looks like a post object, to catch a careless id scan.
var feedBody = func() string {
	var b strings.Builder
	b.WriteString(`{"posts":[`)
	for id := 20; id >= 1; id-- {
		if id < 20 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%d,"body":"not {\"id\":999} here","created_at":"2025-01-01T00:00:00.000Z","author":"a","like_count":3}`, id)
	}
	b.WriteString(`]}`)
	return b.String()
}()

func (f *fakeFeed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := fakeRequest{path: r.URL.Path, auth: r.Header.Get("Authorization"),
		contentType: r.Header.Get("Content-Type"), body: string(body)}
	route := "?"
	status := http.StatusOK
	out := `{}`
	switch {
	case r.Method == "GET" && r.URL.Path == "/feed":
		route, out = "feed", feedBody
		if f.feedStatus != 0 {
			status = f.feedStatus
		}
	case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/posts/"):
		route = "post"
		if id, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/posts/")); err != nil || id < 1 || id > 20 {
			f.reject("no such post: " + r.URL.Path)
			status = http.StatusNotFound
		}
		if f.postStatus != 0 {
			status = f.postStatus
		}
		if f.postDelay > 0 {
			select {
			case <-time.After(f.postDelay):
			case <-r.Context().Done():
			}
		}
	case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/like"):
		route, status = "like", http.StatusCreated
		f.mu.Lock()
		f.likes = append(f.likes, req)
		f.mu.Unlock()
	case r.Method == "POST" && r.URL.Path == "/posts":
		route, status = "create", http.StatusCreated
		f.mu.Lock()
		f.creates = append(f.creates, req)
		f.mu.Unlock()
	default:
		f.reject(r.Method + " " + r.URL.Path)
		status = http.StatusNotFound
	}
	f.mu.Lock()
	if f.counts == nil {
		f.counts = make(map[string]int)
	}
	f.counts[route]++
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, out)
}

func (f *fakeFeed) reject(what string) {
	f.mu.Lock()
	f.bad = append(f.bad, what)
	f.mu.Unlock()
}

// forEngines runs test once on each engine, as a subtest named for it.
func forEngines(t *testing.T, test func(t *testing.T, engine string)) {
	for _, e := range []string{EngineLoop, EngineGoroutine} {
		t.Run(e, func(t *testing.T) { test(t, e) })
	}
}

// fastConfig runs users through short stages at 1000× the challenge's pace (an
// iteration takes ~20 ms).
func fastConfig(url string, users int, hold time.Duration, engine string) Config {
	return Config{
		Engine:    engine,
		URL:       url,
		Users:     users,
		Ramp:      100 * time.Millisecond,
		Hold:      hold,
		RampDown:  100 * time.Millisecond,
		Tokens:    testTokens(7),
		TimeScale: 1000,
		Seed:      1,
		Timeout:   10 * time.Second,
	}
}

func TestJourneyMix(t *testing.T) { forEngines(t, testJourneyMix) }

func testJourneyMix(t *testing.T, engine string) {
	const users = 20
	// Long enough for 1,000 post reads: 2 s on an idle machine, more on a busy one (the
	// mix is judged on the count, not on the time it took).
	var fake *fakeFeed
	var res Result
	for _, d := range []time.Duration{2 * time.Second, 6 * time.Second, 15 * time.Second} {
		fake = &fakeFeed{}
		srv := httptest.NewServer(fake)
		var err error
		res, err = Run(context.Background(), fastConfig(srv.URL, users, d, engine))
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if res.Routes[RoutePost].Requests >= 1000 {
			break
		}
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.bad) > 0 {
		t.Errorf("the fake got %d requests outside the journey, first %q", len(fake.bad), fake.bad[0])
	}
	if res.Failures != 0 || res.Errors != nil {
		t.Errorf("failures = %d, errors = %v; want none", res.Failures, res.Errors)
	}
	for _, name := range []string{"feed", "post", "like", "create"} {
		if got, served := res.Routes[name].Requests, int64(fake.counts[name]); got != served {
			t.Errorf("route %s: result counts %d requests, the fake served %d", name, got, served)
		}
	}
	feeds, posts := res.Routes[RouteFeed].Requests, res.Routes[RoutePost].Requests
	likes, creates := res.Routes[RouteLike].Requests, res.Routes[RouteCreate].Requests
	if posts < 1000 {
		t.Fatalf("only %d post reads in the run, too few to judge the mix", posts)
	}
	// Every feed read is followed by a post read, unless the user stopped in between.
	if feeds-posts < 0 || feeds-posts > users {
		t.Errorf("feed reads %d, post reads %d: want equal up to one per user", feeds, posts)
	}
	if r := float64(likes) / float64(posts); r < 0.11 || r > 0.19 {
		t.Errorf("likes per post read = %.3f, want ~0.15", r)
	}
	if r := float64(creates) / float64(posts); r < 0.008 || r > 0.035 {
		t.Errorf("creates per post read = %.4f, want ~0.02", r)
	}
	if res.Iterations < feeds || res.Iterations > feeds+users {
		t.Errorf("iterations = %d, feed reads %d", res.Iterations, feeds)
	}
	if res.UserEquivalents != users*1000 {
		t.Errorf("user-equivalents = %v, want %d", res.UserEquivalents, users*1000)
	}
	var staged int64
	for _, s := range res.Stages {
		staged += s.Requests
	}
	if staged != res.Requests || res.Stages[stageHold].Requests < res.Requests/2 {
		t.Errorf("stages hold %d of %d requests (hold %d), want all, most in the hold",
			staged, res.Requests, res.Stages[stageHold].Requests)
	}
	// The routes' histograms hold the hold's requests, each route's at most its own.
	var routed int64
	for _, name := range routes {
		c := res.Routes[name]
		if c.Hist.Histogram == nil {
			t.Errorf("route %s: no histogram", name)
			continue
		}
		n := c.Hist.TotalCount()
		routed += n
		if n > c.Requests {
			t.Errorf("route %s: %d latencies in the hold of %d requests", name, n, c.Requests)
		}
		if n > 0 && (c.Latency.P50 <= 0 || c.Latency.P99 < c.Latency.P50 || c.Latency.Max < c.Latency.P99) {
			t.Errorf("route %s: latency %+v over %d requests, want 0 < p50 <= p99 <= max", name, c.Latency, n)
		}
	}
	if hold := res.Stages[stageHold].Requests; routed != hold {
		t.Errorf("route histograms hold %d latencies, the hold %d requests; want equal", routed, hold)
	}

	for _, l := range fake.likes {
		if !regexp.MustCompile(`^/posts/([1-9]|1[0-9]|20)/like$`).MatchString(l.path) ||
			!regexp.MustCompile(`^Bearer tok\.[1-7]$`).MatchString(l.auth) ||
			l.contentType != "application/json" || l.body != "" {
			t.Errorf("like request %+v: want /posts/ID/like, Bearer token, JSON content type, empty body", l)
			break
		}
	}
	text := regexp.MustCompile(`^(user_\d+) says hi at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) \(VU (\d+), iter (\d+)\)$`)
	for _, c := range fake.creates {
		var body map[string]string
		if err := json.Unmarshal([]byte(c.body), &body); err != nil || len(body) != 1 {
			t.Errorf("create body %q: want {\"body\":\"…\"}", c.body)
			break
		}
		m := text.FindStringSubmatch(body["body"])
		if m == nil || c.contentType != "application/json" {
			t.Errorf("create request %+v: want the challenge's text and a JSON content type", c)
			break
		}
		vu, _ := strconv.Atoi(m[3])
		k := (vu-1)%7 + 1
		if vu < 1 || vu > users || m[1] != fmt.Sprintf("user_%d", k) || c.auth != fmt.Sprintf("Bearer tok.%d", k) {
			t.Errorf("create by VU %d signed %q as %s, want user_%d with tok.%d", vu, c.auth, m[1], k, k)
		}
		if at, err := time.Parse(time.RFC3339, m[2]); err != nil || time.Since(at) > time.Minute {
			t.Errorf("create time %q: want an ISO time of the run", m[2])
		}
	}
}

func TestJourneyFailures(t *testing.T) { forEngines(t, testJourneyFailures) }

func testJourneyFailures(t *testing.T, engine string) {
	tests := []struct {
		name  string
		fake  *fakeFeed
		check func(t *testing.T, r Result)
	}{
		{"post reads fail", &fakeFeed{postStatus: http.StatusInternalServerError}, func(t *testing.T, r Result) {
			if r.Failures == 0 || r.Failures != r.Routes[RoutePost].Requests || r.Status[500] != r.Failures {
				t.Errorf("failures = %d, post reads %d, 500s %d; want every post read failed",
					r.Failures, r.Routes[RoutePost].Requests, r.Status[500])
			}
		}},
		{"feed fails", &fakeFeed{feedStatus: http.StatusServiceUnavailable}, func(t *testing.T, r Result) {
			if r.Failures == 0 || r.Failures != r.Requests || r.Routes[RoutePost].Requests != 0 ||
				r.FeedRetries != r.Iterations {
				t.Errorf("failures %d of %d, post reads %d, retries %d of %d iterations; want only failed feeds, each retried",
					r.Failures, r.Requests, r.Routes[RoutePost].Requests, r.FeedRetries, r.Iterations)
			}
		}},
		{"nothing listens", nil, func(t *testing.T, r Result) {
			if r.Failures == 0 || r.Failures != r.Requests || r.Errors["connect"] != r.Failures {
				t.Errorf("failures %d of %d, errors %v; want every request a connect failure", r.Failures, r.Requests, r.Errors)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var url string
			if tc.fake != nil {
				srv := httptest.NewServer(tc.fake)
				defer srv.Close()
				url = srv.URL
			} else {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				url = "http://" + ln.Addr().String()
				ln.Close()
			}
			r, err := Run(context.Background(), fastConfig(url, 5, 500*time.Millisecond, engine))
			if err != nil {
				t.Fatal(err)
			}
			if r.Pass || !strings.Contains(strings.Join(r.Reasons, ";"), "failures") {
				t.Errorf("pass = %v, reasons %q; want a failure-rate FAIL", r.Pass, r.Reasons)
			}
			tc.check(t, r)
		})
	}
}

// TestJourneyStall: a server that takes 300 ms for every post read shows it in p99.
func TestJourneyStall(t *testing.T) { forEngines(t, testJourneyStall) }

func testJourneyStall(t *testing.T, engine string) {
	srv := httptest.NewServer(&fakeFeed{postDelay: 300 * time.Millisecond})
	defer srv.Close()
	r, err := Run(context.Background(), fastConfig(srv.URL, 10, time.Second, engine))
	if err != nil {
		t.Fatal(err)
	}
	if r.Latency.P99 < 300*time.Millisecond || r.Routes[RoutePost].Requests == 0 {
		t.Errorf("p99 = %v over %d post reads; want >= 300ms", r.Latency.P99, r.Routes[RoutePost].Requests)
	}
	// Only the post reads stall, so only their route's latency shows it.
	post, feed := r.Routes[RoutePost], r.Routes[RouteFeed]
	if post.Hist.TotalCount() == 0 || feed.Hist.TotalCount() == 0 {
		t.Fatalf("hold latencies: %d post reads, %d feed reads; want some of each",
			post.Hist.TotalCount(), feed.Hist.TotalCount())
	}
	if post.Latency.P50 < 300*time.Millisecond || feed.Latency.P50 >= post.Latency.P50 {
		t.Errorf("hold p50: post reads %v, feed reads %v; want post >= 300ms and feed below it",
			post.Latency.P50, feed.Latency.P50)
	}
}

// TestJourneyLateStart: requests that were due two seconds before the run could send
// them count those two seconds (latency from the scheduled time).
func TestJourneyLateStart(t *testing.T) { forEngines(t, testJourneyLateStart) }

func testJourneyLateStart(t *testing.T, engine string) {
	srv := httptest.NewServer(&fakeFeed{})
	defer srv.Close()
	cfg := fastConfig(srv.URL, 5, 2300*time.Millisecond, engine)
	cfg.Ramp, cfg.RampDown = -1, -1
	cfg.StartAt = time.Now().Add(-2 * time.Second)
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Latency.Max < 1900*time.Millisecond {
		t.Errorf("max latency = %v, want >= 1.9s (the first requests were due 2 s before they were sent)", r.Latency.Max)
	}
	if r.Stages[stageRamp].Requests != 0 || r.Stages[stageHold].Requests != r.Requests {
		t.Errorf("stage requests %d/%d/%d, want all in the hold", r.Stages[0].Requests, r.Stages[1].Requests, r.Stages[2].Requests)
	}
}

// TestJourneyCancel: ending the context ends a run stuck on a stalled server at once,
// and the interrupted requests are not the server's failures.
func TestJourneyCancel(t *testing.T) { forEngines(t, testJourneyCancel) }

func testJourneyCancel(t *testing.T, engine string) {
	srv := httptest.NewServer(&fakeFeed{postDelay: time.Hour})
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := fastConfig(srv.URL, 5, time.Hour, engine)
	cfg.Timeout = time.Hour
	time.AfterFunc(500*time.Millisecond, cancel)
	r, err := Run(ctx, cfg)
	if err != context.Canceled {
		t.Errorf("Run error = %v, want context.Canceled", err)
	}
	if r.Failures != 0 || r.Routes[RouteFeed].Requests == 0 {
		t.Errorf("failures = %d, feed reads %d; want feed reads and no failures", r.Failures, r.Routes[RouteFeed].Requests)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no users", Config{URL: "http://127.0.0.1:1", Tokens: testTokens(1)}, "Users"},
		{"no tokens", Config{URL: "http://127.0.0.1:1", Users: 1}, "Tokens"},
		{"https", Config{URL: "https://127.0.0.1:1", Users: 1, Tokens: testTokens(1)}, "plain HTTP"},
		{"users past total", Config{URL: "http://127.0.0.1:1", Users: 5, FirstUser: 3, TotalUsers: 6, Tokens: testTokens(1)}, "TotalUsers"},
		{"negative scale", Config{URL: "http://127.0.0.1:1", Users: 1, TimeScale: -1, Tokens: testTokens(1)}, "TimeScale"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run error = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func TestJudge(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name               string
		requests, failures int64
		p95, p99           time.Duration
		wantPass           bool
		wantReasons        int
	}{
		{"comfortable", 1000, 0, 20 * ms, 50 * ms, true, 0},
		{"just under", 1000, 9, 499 * ms, 999 * ms, true, 0},
		{"p95 at the limit", 1000, 0, 500 * ms, 600 * ms, false, 1},
		{"p99 at the limit", 1000, 0, 100 * ms, time.Second, false, 1},
		{"one percent failed", 1000, 10, 10 * ms, 10 * ms, false, 1},
		{"everything wrong", 1000, 500, 2 * time.Second, 3 * time.Second, false, 3},
		{"no requests", 0, 0, 0, 0, false, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pass, reasons := Judge(tc.requests, tc.failures, tc.p95, tc.p99)
			if pass != tc.wantPass || len(reasons) != tc.wantReasons {
				t.Errorf("Judge = %v %q, want %v with %d reasons", pass, reasons, tc.wantPass, tc.wantReasons)
			}
		})
	}
}

// TestResultJSONMerge: results survive JSON (histograms included) and add up.
func TestResultJSONMerge(t *testing.T) { forEngines(t, testResultJSONMerge) }

func testResultJSONMerge(t *testing.T, engine string) {
	srv := httptest.NewServer(&fakeFeed{})
	defer srv.Close()
	var parts []Result
	for first := 1; first <= 4; first += 2 { // two processes' worth: users 1-2 and 3-4
		cfg := fastConfig(srv.URL, 2, 300*time.Millisecond, engine)
		cfg.FirstUser, cfg.TotalUsers = first, 4
		r, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back Result
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if got, want := back.Histogram().TotalCount(), r.Requests; got != want {
			t.Fatalf("decoded histogram holds %d values, want %d", got, want)
		}
		parts = append(parts, back)
	}
	m := Merge(parts...)
	if m.Users != 4 || m.Requests != parts[0].Requests+parts[1].Requests ||
		m.Histogram().TotalCount() != m.Requests || m.UserEquivalents != 4000 {
		t.Errorf("merged users %d, requests %d (histogram %d), user-equivalents %v; want 4, %d, the same, 4000",
			m.Users, m.Requests, m.Histogram().TotalCount(), m.UserEquivalents, parts[0].Requests+parts[1].Requests)
	}
	if m.Routes[RouteFeed].Requests != parts[0].Routes[RouteFeed].Requests+parts[1].Routes[RouteFeed].Requests {
		t.Errorf("merged feed reads %d, want the sum", m.Routes[RouteFeed].Requests)
	}
	for _, name := range routes {
		got := m.Routes[name].Hist.TotalCount()
		want := parts[0].Routes[name].Hist.TotalCount() + parts[1].Routes[name].Hist.TotalCount()
		if got != want {
			t.Errorf("route %s: merged histogram holds %d latencies, want the parts' %d", name, got, want)
		}
	}
	if m.Routes[RouteFeed].Hist.TotalCount() == 0 || m.Routes[RouteFeed].Latency.P50 <= 0 {
		t.Errorf("merged feed reads: %d hold latencies, p50 %v; want some, positive",
			m.Routes[RouteFeed].Hist.TotalCount(), m.Routes[RouteFeed].Latency.P50)
	}
	if !m.Pass {
		t.Errorf("merged result fails: %q", m.Reasons)
	}
}

// routeResult is a result with one route whose hold latencies are lats (µs).
func routeResult(route string, lats ...int64) Result {
	h := newHistogram()
	for _, v := range lats {
		h.RecordValue(v)
	}
	r := Result{Users: 1, TimeScale: 1, Routes: map[string]RouteCounts{
		route: {Requests: int64(len(lats)), Hist: Histogram{h}},
	}}
	r.finish()
	return r
}

// TestMergeRoutes: Merge adds up the routes' histograms, and takes a result written
// before route histograms existed (no "histogram" in its routes) as holding none.
func TestMergeRoutes(t *testing.T) {
	var old Result
	if err := json.Unmarshal([]byte(`{"users":1,"routes":{"feed":{"requests":5,"failures":1}}}`), &old); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		parts    []Result
		route    string
		wantReqs int64
		wantHist int64
		wantP50  time.Duration
		wantMax  time.Duration
	}{
		{"one result", []Result{routeResult(RouteFeed, 1000, 2000, 3000)}, RouteFeed, 3, 3, 2 * time.Millisecond, 3 * time.Millisecond},
		{"two results add up", []Result{routeResult(RoutePost, 1000, 1000), routeResult(RoutePost, 5000, 9000)},
			RoutePost, 4, 4, time.Millisecond, 9 * time.Millisecond},
		{"an older result", []Result{old, routeResult(RouteFeed, 4000)}, RouteFeed, 6, 1, 4 * time.Millisecond, 4 * time.Millisecond},
		{"only older results", []Result{old, old}, RouteFeed, 10, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Merge(tc.parts...).Routes[tc.route]
			if c.Requests != tc.wantReqs || c.Hist.TotalCount() != tc.wantHist {
				t.Errorf("merged %s: %d requests, %d latencies; want %d, %d",
					tc.route, c.Requests, c.Hist.TotalCount(), tc.wantReqs, tc.wantHist)
			}
			// Three significant digits: a value comes back within 0.1 %.
			near := func(got, want time.Duration) bool { return got >= want && got <= want+want/1000 }
			if !near(c.Latency.P50, tc.wantP50) || !near(c.Latency.Max, tc.wantMax) {
				t.Errorf("merged %s: p50 %v, max %v; want %v, %v", tc.route, c.Latency.P50, c.Latency.Max, tc.wantP50, tc.wantMax)
			}
		})
	}
	// Merge sums into histograms of its own: an input's is unchanged.
	if n := tests[1].parts[0].Routes[RoutePost].Hist.TotalCount(); n != 2 {
		t.Errorf("after Merge, an input's post histogram holds %d latencies, want its 2", n)
	}
}

func TestReadTokens(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantIDs []int64
		wantErr bool
	}{
		{"sorted by id", `[{"id":2,"username":"b","token":"t2"},{"id":1,"username":"a","token":"t1"}]`, []int64{1, 2}, false},
		{"empty", `[]`, nil, true},
		{"missing token", `[{"id":1,"username":"a"}]`, nil, true},
		{"not json", `id,username,token`, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadTokens(strings.NewReader(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("ReadTokens error = %v, want error %v", err, tc.wantErr)
			}
			var ids []int64
			for _, tok := range got {
				ids = append(ids, tok.ID)
			}
			if fmt.Sprint(ids) != fmt.Sprint(tc.wantIDs) {
				t.Errorf("ids = %v, want %v", ids, tc.wantIDs)
			}
		})
	}
}

func TestAppendPostIDs(t *testing.T) {
	tests := []struct {
		name, body string
		want       []int64
	}{
		{"feed", feedBody, []int64{20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}},
		{"empty feed", `{"posts":[]}`, nil},
		{"error body", `{"error":"not found"}`, nil},
		{"id zero and garbage skipped", `{"posts":[{"id":0},{"id":x},{"id":7}]}`, []int64{7}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := appendPostIDs(nil, []byte(tc.body)); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("appendPostIDs = %v, want %v", got, tc.want)
			}
		})
	}
}

func FuzzAppendPostIDs(f *testing.F) {
	f.Add(feedBody, int64(5))
	f.Add(`{"posts":[{"id":`, int64(1))
	f.Add(`{"id":99999999999999999999999}`, int64(1<<62))
	f.Fuzz(func(t *testing.T, body string, id int64) {
		for _, got := range appendPostIDs(nil, []byte(body)) { // never panics
			if got <= 0 {
				t.Fatalf("appendPostIDs(%q) gave id %d, want positive ids only", body, got)
			}
		}
		if id <= 0 {
			return
		}
		// A post with that id and the fuzzed text as its (JSON-encoded) body gives
		// exactly that id back.
		text, _ := json.Marshal(body)
		feed := fmt.Sprintf(`{"posts":[{"id":%d,"body":%s,"like_count":0}]}`, id, text)
		if got := appendPostIDs(nil, []byte(feed)); len(got) != 1 || got[0] != id {
			t.Fatalf("appendPostIDs(%s) = %v, want [%d]", feed, got, id)
		}
	})
}

// BenchmarkRecord measures the cost of recording one request.
func BenchmarkRecord(b *testing.B) {
	r := &runner{cfg: Config{Hold: time.Hour}, start: time.Now()}
	sh := newShard()
	due := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		r.record(sh, routeFeed, due, due.Add(3*time.Millisecond), 200, "")
	}
}

// TestRequestsAllocateNothing: once a user's buffers have grown, building its requests and
// reading a feed's post ids allocate nothing (both engines build them so).
func TestRequestsAllocateNothing(t *testing.T) {
	r := &runner{cfg: Config{Tokens: testTokens(3)}, tgt: target{addr: "127.0.0.1:80", host: "127.0.0.1:80"}}
	u := &user{r: r, vu: 7, tok: &r.cfg.Tokens[1]}
	feed := []byte(`{"posts":[{"id":12,"body":"x"},{"id":345,"body":"y"}]}`)
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	build := func() {
		u.feedRequest()
		u.postRequest(345)
		u.likeRequest(345)
		u.createRequest(4, now)
		u.ids = appendPostIDs(u.ids[:0], feed)
	}
	build() // the buffers grow once
	if n := testing.AllocsPerRun(100, build); n != 0 {
		t.Errorf("building the requests allocates %.1f times, want 0", n)
	}
	want := "POST /posts HTTP/1.1\r\nHost: 127.0.0.1:80\r\nUser-Agent: onehost-journey\r\nAuthorization: Bearer tok.2\r\n" +
		"Content-Type: application/json\r\nContent-Length: 68\r\n\r\n" +
		`{"body":"user_2 says hi at 2026-12-03T08:00:00.000Z (VU 7, iter 4)"}`
	if got := string(u.createRequest(4, now)); got != want {
		t.Errorf("create request:\n%q\nwant\n%q", got, want)
	}
}
