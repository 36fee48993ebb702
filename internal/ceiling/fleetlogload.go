package ceiling

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	_ "modernc.org/sqlite" // the "sqlite" driver, for the seed's size

	"github.com/onehost/onehost/internal/token"
)

// seedSize reads the seed's largest user and post ids.
func seedSize(path string) (users, posts int64, err error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	if err := db.QueryRow(`SELECT (SELECT max(id) FROM users), (SELECT max(id) FROM posts)`).Scan(&users, &posts); err != nil {
		return 0, 0, fmt.Errorf("read the seed's size: %w", err)
	}
	return users, posts, nil
}

// tokens signs one token per user, lazily.
type tokens struct {
	secret []byte
	users  int64
	mu     sync.Mutex
	m      map[int64]string
}

func newTokens(secret string, users int64) *tokens {
	return &tokens{secret: []byte(secret), users: users, m: map[int64]string{}}
}

func (t *tokens) of(user int64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.m[user]
	if !ok {
		now := time.Now()
		s = "Bearer " + token.Sign(t.secret, user, "user_"+strconv.FormatInt(user, 10), now, now.Add(24*time.Hour))
		t.m[user] = s
	}
	return s
}

// loadClient is a keep-alive HTTP client with no stickiness.
type loadClient struct{ hc *http.Client }

func newLoadClient(conns int) *loadClient {
	return &loadClient{hc: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}}
}

func (c *loadClient) do(ctx context.Context, method, url, auth, body string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
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

// tally is a phase's latencies (microseconds), whose counts are the requests answered,
// and its errors. Its histograms are read once the load's goroutines are done.
type tally struct {
	mu            sync.Mutex
	reads, writes *hdrhistogram.Histogram
	errs          atomic.Int64
}

func newTally() *tally {
	return &tally{reads: hdrhistogram.New(1, 60_000_000, 3), writes: hdrhistogram.New(1, 60_000_000, 3)}
}

func (t *tally) record(write bool, d time.Duration) {
	t.mu.Lock()
	if write {
		t.writes.RecordValue(max(d.Microseconds(), 1))
	} else {
		t.reads.RecordValue(max(d.Microseconds(), 1))
	}
	t.mu.Unlock()
}

// request is one request of a phase: method, path, whether it writes, its user.
type request struct {
	method, path string
	write        bool
	user         int64
	body         string
}

// mixRequest draws the challenge's mix (bench/mix.lua): per iteration 1 feed, 1 post read,
// 0.15 like, 0.02 new post.
func (f *FleetLog) mixRequest(r *rand.Rand) request {
	x := r.Float64() * 2.17
	switch {
	case x < 1:
		return request{method: "GET", path: "/feed"}
	case x < 2:
		return request{method: "GET", path: "/posts/" + strconv.FormatInt(1+r.Int64N(f.posts), 10)}
	case x < 2.15:
		return f.likeRequest(r)
	}
	return request{method: "POST", path: "/posts", write: true, user: 1 + r.Int64N(f.users), body: `{"body":"load test says hi"}`}
}

func (f *FleetLog) likeRequest(r *rand.Rand) request {
	return request{method: "POST", path: "/posts/" + strconv.FormatInt(1+r.Int64N(f.posts), 10) + "/like", write: true, user: 1 + r.Int64N(f.users)}
}

// closedLoop runs conns clients, each sending its next request when the last is answered,
// for d after warmup, against url; it returns the tally of the measured part.
func (f *FleetLog) closedLoop(ctx context.Context, url string, conns int, tok *tokens, next func(*rand.Rand) request, warmup, d time.Duration, w *cpuWindow) (*tally, time.Duration) {
	c := newLoadClient(conns)
	t := newTally()
	var measuring atomic.Bool
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			for ctx.Err() == nil {
				q := next(r)
				auth := ""
				if q.method == "POST" {
					auth = tok.of(q.user)
				}
				began := time.Now()
				st, _, err := c.do(ctx, q.method, url+q.path, auth, q.body)
				if !measuring.Load() || ctx.Err() != nil {
					continue
				}
				if err != nil || st >= 500 || (st >= 400 && st != 404) {
					t.errs.Add(1)
					continue
				}
				t.record(q.write, time.Since(began))
			}
		})
	}
	sleepCtx(ctx, warmup)
	w.begin() // before the measured time: the reading of /proc is not the load's
	began := time.Now()
	measuring.Store(true)
	sleepCtx(ctx, d)
	measuring.Store(false)
	took := time.Since(began)
	w.end()
	cancel()
	wg.Wait()
	return t, took
}

// openLoop sends rate requests per second (spread evenly, each on its own goroutine, so a
// slow answer does not delay the next: latency includes any queueing at the server).
func (f *FleetLog) openLoop(ctx context.Context, url string, rate int, tok *tokens, next func(*rand.Rand) request, warmup, d time.Duration, w *cpuWindow) (*tally, time.Duration) {
	c := newLoadClient(512)
	t := newTally()
	r := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	interval := time.Second / time.Duration(rate)
	var wg sync.WaitGroup
	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+d)
	// The window's first reading of /proc runs beside the sends, not in their loop: a
	// send held up by it would count the wait in its latency (measured from when it was due).
	begun := make(chan struct{})
	time.AfterFunc(warmup, func() { w.begin(); close(begun) })
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if at.After(end) || ctx.Err() != nil {
			break
		}
		// The request and its token are made before it is due, for the same reason.
		q := next(r)
		auth := tok.of(q.user)
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		}
		measured := at.After(measureFrom)
		wg.Go(func() {
			st, _, err := c.do(ctx, q.method, url+q.path, auth, q.body)
			if !measured {
				return
			}
			if err != nil || st >= 500 || (st >= 400 && st != 404) {
				t.errs.Add(1)
				return
			}
			t.record(q.write, time.Since(at)) // from when it was due: open loop
		})
	}
	<-begun
	w.end() // before the last answers: a window a little short, not one with idle time in it
	wg.Wait()
	return t, d
}

// cpuWindow reads the CPU time of every host's processes (their log nodes included) at the
// start and the end of a measured window: the fleet's CPU per request.
type cpuWindow struct {
	hosts      []*logHost
	start, cpu time.Duration
}

// total is the CPU time of every host's whole tree (hostCPU's all), the log nodes in it,
// read in one pass over /proc.
func (w *cpuWindow) total() time.Duration {
	var pids []int
	for _, h := range w.hosts {
		if pid := h.pid(); pid != 0 {
			pids = append(pids, pid)
		}
	}
	return treeCPU(pids...)
}

func (w *cpuWindow) begin() {
	if w != nil {
		w.start = w.total()
	}
}

func (w *cpuWindow) end() {
	if w != nil {
		w.cpu = w.total() - w.start
	}
}

// phase runs one of mix, likes, rate, reads into r.
func (f *FleetLog) phase(ctx context.Context, fl *logFleet, tok *tokens, r *FleetLogRun) error {
	ms := func(us int64) float64 { return float64(us) / 1000 }
	fill := func(t *tally, took time.Duration) {
		s := took.Seconds()
		nr, nw := t.reads.TotalCount(), t.writes.TotalCount()
		r.Requests, r.Errors = nr+nw, t.errs.Load()
		r.RPS = float64(r.Requests) / s
		if nr > 0 {
			r.ReadP50, r.ReadP99 = ms(t.reads.ValueAtQuantile(50)), ms(t.reads.ValueAtQuantile(99))
		}
		if nw > 0 {
			r.Writes, r.WritesPS = nw, float64(nw)/s
			r.WriteP50, r.WriteP99, r.WriteMax = ms(t.writes.ValueAtQuantile(50)), ms(t.writes.ValueAtQuantile(99)), ms(t.writes.Max())
		}
	}
	w := &cpuWindow{hosts: fl.hosts}
	fleetCPU := func() {
		if r.Requests > 0 {
			r.FleetCPUPerReq = float64(w.cpu) / 1e3 / float64(r.Requests)
		}
	}
	switch r.Phase {
	case "mix", "likes":
		next := f.mixRequest
		if r.Phase == "likes" {
			next = f.likeRequest
		}
		t, took := f.closedLoop(ctx, fl.lb, f.cfg.Conns, tok, next, f.cfg.Warmup, f.cfg.Duration, w)
		fill(t, took)
		fleetCPU()
	case "rate":
		var lag *lagMeter
		if fl.log {
			var err error
			if lag, err = startLag(ctx, fl); err != nil {
				return err
			}
		}
		t, took := f.openLoop(ctx, fl.lb, f.cfg.Rate, tok, f.likeRequest, f.cfg.Warmup, f.cfg.Duration, w)
		fill(t, took)
		fleetCPU()
		r.Note = fmt.Sprintf("open loop at %d likes/s", f.cfg.Rate)
		if lag != nil {
			r.LagP50, r.LagP99 = lag.stop()
		}
	case "pairs":
		return f.pairs(ctx, fl, tok, r)
	case "reads":
		// One host's CPU per read, served directly (no balancer), its log node apart.
		h := fl.hosts[0]
		all0, node0 := hostCPU(h)
		read := func(rr *rand.Rand) request {
			return request{method: "GET", path: "/posts/" + strconv.FormatInt(1+rr.Int64N(f.posts), 10)}
		}
		t, took := f.closedLoop(ctx, h.url(), f.cfg.Conns, tok, read, 0, f.cfg.Duration, nil)
		all1, node1 := hostCPU(h)
		fill(t, took)
		if n := float64(t.reads.TotalCount()); n > 0 {
			r.CPUPerReq = float64((all1-all0)-(node1-node0)) / 1e3 / n
			r.NodeCPU = float64(node1-node0) / 1e3 / n
		}
		r.Note = "GET /posts/:id on " + h.name + " directly"
	}
	return nil
}
