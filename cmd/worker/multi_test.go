package main

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/seedtest"
	"github.com/onehost/onehost/internal/token"
)

// startPair starts two workers on one port (each binds it with SO_REUSEPORT) and one file,
// on the given transport.
func startPair(t *testing.T, transport string) (a, b *worker) {
	t.Helper()
	db := seedtest.Path(t)
	a = startWorker(t, "SQLITE_PATH="+db, ipc.EnvWorkerID+"=0", "TRANSPORT="+transport)
	_, port, _ := net.SplitHostPort(a.Addr)
	b = startWorker(t, "SQLITE_PATH="+db, "PORT="+port, ipc.EnvWorkerID+"=1", "TRANSPORT="+transport)
	if a.Addr != b.Addr {
		t.Fatalf("workers on %s and %s, want one port", a.Addr, b.Addr)
	}
	return a, b
}

func TestTwoWorkersOneFile(t *testing.T) { forTransports(t, testTwoWorkersOneFile) }

func testTwoWorkersOneFile(t *testing.T, transport string) {
	if testing.Short() {
		t.Skip("starts two workers")
	}
	a, _ := startPair(t, transport)
	base := "http://" + a.Addr
	t.Run("official checks", func(t *testing.T) { officialChecks(t, base) })

	t.Run("16 simultaneous identical likes", func(t *testing.T) {
		auth := "Bearer " + token.Sign([]byte(testSecret), 7, "someone", time.Now(), time.Now().Add(time.Hour))
		codes := make(chan int, 16)
		var start sync.WaitGroup
		start.Add(1)
		for range 16 {
			go func() {
				start.Wait()
				codes <- do(t, "POST", base+"/posts/4242/like", auth, "").status
			}()
		}
		start.Done()
		var got []int
		for range 16 {
			got = append(got, <-codes)
		}
		slices.Sort(got)
		want := append([]int{200}, slices.Repeat([]int{200}, 14)...)
		want = append([]int{201}, want...)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("statuses %v, want one 201 and fifteen 200", got)
		}
	})

	t.Run("write-heavy load", func(t *testing.T) {
		res := writeLoad(t, a.Addr, 8, 2*time.Second)
		t.Logf("writes over two workers: %d ok, latency p50 %v p99 %v max %v", res.ok, res.pct(50), res.pct(99), res.pct(100))
		if res.failed > 0 || res.ok == 0 {
			t.Errorf("%d writes failed (statuses %v), %d ok; want none failed", res.failed, res.bad, res.ok)
		}
	})
}

func TestAcknowledgedWriteSurvivesKill9(t *testing.T) {
	forTransports(t, testAcknowledgedWriteSurvivesKill9)
}

func testAcknowledgedWriteSurvivesKill9(t *testing.T, transport string) {
	db := seedtest.Path(t)
	w := startWorker(t, "TRANSPORT="+transport, "SQLITE_PATH="+db)
	auth := "Bearer " + token.Sign([]byte(testSecret), 3, "survivor", time.Now(), time.Now().Add(time.Hour))
	r := do(t, "POST", "http://"+w.Addr+"/posts", auth, `{"body":"written before the crash"}`)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var id int64
	fmt.Sscanf(r.body, `{"post":{"id":%d`, &id)
	if r := do(t, "POST", fmt.Sprintf("http://%s/posts/%d/like", w.Addr, id), auth, ""); r.status != 201 {
		t.Fatalf("like: %d %s", r.status, r.body)
	}
	w.Stop(t, syscall.SIGKILL)

	w2 := startWorker(t, "TRANSPORT="+transport, "SQLITE_PATH="+db)
	got := do(t, "GET", fmt.Sprintf("http://%s/posts/%d", w2.Addr, id), "", "")
	if got.status != 200 || !strings.Contains(got.body, `"body":"written before the crash"`) ||
		!strings.Contains(got.body, `"like_count":1`) {
		t.Errorf("after kill -9: %d %s; want the post with its like", got.status, got.body)
	}
}

type loadResult struct {
	ok, failed int
	bad        map[string]int
	lat        []time.Duration
}

func (r loadResult) pct(p int) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := min(len(r.lat)*p/100, len(r.lat)-1)
	return r.lat[i]
}

// writeLoad runs conns keep-alive clients that alternate likes of random posts by random
// users and post creations, for d, and returns what they saw.
func writeLoad(tb testing.TB, addr string, conns int, d time.Duration) loadResult {
	var mu sync.Mutex
	res := loadResult{bad: map[string]int{}}
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				tb.Error(err)
				return
			}
			defer nc.Close()
			br := bufio.NewReader(nc)
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			var lat []time.Duration
			ok, failed := 0, 0
			bad := map[string]int{}
			for i := 0; time.Now().Before(deadline); i++ {
				user := 1 + rng.IntN(50000)
				auth := token.Sign([]byte(testSecret), int64(user), "load", time.Now(), time.Now().Add(time.Hour))
				var req string
				if i%4 == 3 {
					body := `{"body":"write load says hi"}`
					req = fmt.Sprintf("POST /posts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", auth, len(body), body)
				} else {
					req = fmt.Sprintf("POST /posts/%d/like HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 0\r\n\r\n", 1+rng.IntN(500000), auth)
				}
				start := time.Now()
				if _, err := io.WriteString(nc, req); err != nil {
					bad["write: "+err.Error()]++
					failed++
					break
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					bad["read: "+err.Error()]++
					failed++
					break
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(start))
				if resp.StatusCode == 200 || resp.StatusCode == 201 {
					ok++
				} else {
					bad[resp.Status]++
					failed++
				}
			}
			mu.Lock()
			res.ok += ok
			res.failed += failed
			for k, v := range bad {
				res.bad[k] += v
			}
			res.lat = append(res.lat, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(res.lat)
	return res
}

// BenchmarkContendedWrites measures write latency with one and with two worker processes
// writing the same file (the numbers in docs/performance.md). Each iteration is a 3-second
// load of 8 keep-alive clients doing likes and creates.
func BenchmarkContendedWrites(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				db := seedtest.Path(b)
				ws := startBenchWorkers(b, db, workers)
				b.StartTimer()
				res := writeLoad(b, ws, 8, 3*time.Second)
				b.ReportMetric(float64(res.ok)/3, "writes/s")
				b.ReportMetric(float64(res.pct(50).Microseconds()), "p50-µs")
				b.ReportMetric(float64(res.pct(99).Microseconds()), "p99-µs")
				b.ReportMetric(float64(res.pct(100).Microseconds()), "max-µs")
				b.ReportMetric(float64(res.failed), "failed")
			}
		})
	}
}

// startBenchWorkers starts n workers on one port and one file and returns the address.
func startBenchWorkers(tb testing.TB, db string, n int) string {
	first := startWorker(tb, "SQLITE_PATH="+db)
	_, port, _ := net.SplitHostPort(first.Addr)
	for i := 1; i < n; i++ {
		startWorker(tb, "SQLITE_PATH="+db, "PORT="+port, fmt.Sprintf(ipc.EnvWorkerID+"=%d", i))
	}
	return first.Addr
}
