package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/contentcoding"
	"github.com/onehost/onehost/internal/heavy"
	"github.com/onehost/onehost/internal/http1"
	"github.com/onehost/onehost/internal/proctest"
	"github.com/onehost/onehost/internal/seedtest"
	"golang.org/x/sys/unix"
)

// BenchmarkHeavyCompressCost measures what compressing the heavy PATCH's answer costs per
// request, in the unit COMPRESS's level cap is stated in: times the CPU of the same
// request answered uncompressed (x-identity). Each case runs two servers side by side, one
// compressing and one not, and sends them PATCH /api/resource/123 over a keep-alive
// loopback connection each, in turns of 20 ms, so that both see the same machine (on a
// shared one the load changes from minute to minute); a figure is a server process's CPU
// (its process CPU clock, all threads) per request, the whole request: read, parse,
// handler, compression, write.
//
//   - server/CODING:LEVEL, every level each encoder has: this test binary run as a server
//     of the heavy route alone (serveHeavy: the worker's router, http1's loop transport,
//     GOMAXPROCS=1). Levels COMPRESS refuses can only be measured so.
//   - worker/CODING:LEVEL, each coding at the highest level COMPRESS accepts: the real
//     worker (the test binary as the worker, GOMAXPROCS=1) beside one with COMPRESS=off,
//     to check the figures above against the product's.
//
// contentcoding's MaxDynamicLevel is, for each coding, the highest level whose server/
// x-identity median stays within about contentcoding.MaxCostFactor; docs/workloads.md
// has the figures of
//
//	go test -run XX -bench HeavyCompressCost -benchtime 2s -count 5 ./cmd/worker/
func BenchmarkHeavyCompressCost(b *testing.B) {
	codings := []contentcoding.Coding{contentcoding.Gzip, contentcoding.Zstd, contentcoding.Br}
	for _, k := range codings {
		lo, hi := contentcoding.EncoderLevels(k)
		for lv := lo; lv <= hi; lv++ {
			b.Run(fmt.Sprintf("server/%s:%d", k, lv), func(b *testing.B) {
				reportPaired(b, startHeavyServer(b, contentcoding.Identity, 0), startHeavyServer(b, k, lv), k.String())
			})
		}
	}
	db := seedtest.Path(b)
	for _, k := range codings {
		setting := k.String() + ":" + strconv.Itoa(contentcoding.MaxDynamicLevel(k))
		b.Run("worker/"+setting, func(b *testing.B) {
			start := func(compress string) *proctest.Proc {
				return startWorker(b, "SQLITE_PATH="+db, "PRODUCTS_PATH="+b.TempDir()+"/products.db", "GOMAXPROCS=1",
					"COMPRESS="+compress, "COMPRESS_ROUTES=heavy")
			}
			reportPaired(b, start("off"), start(setting), k.String())
		})
	}
}

// startHeavyServer runs this test binary as a heavy-route server compressing with k at
// level (identity: not at all; see serveHeavy).
func startHeavyServer(b *testing.B, k contentcoding.Coding, level int) *proctest.Proc {
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{envBenchHeavy + "=" + k.String() + ":" + strconv.Itoa(level), "GOMAXPROCS=1"}
	return proctest.Start(b, cmd)
}

// reportPaired sends heavy PATCHes to plain (asking for identity) and to coded (asking for
// accept) in turn for as long as b.Loop runs, and reports each one's CPU per request and
// their ratio.
func reportPaired(b *testing.B, plain, coded *proctest.Proc, accept string) {
	pc, cc := dialPatch(b, plain.Addr, "identity"), dialPatch(b, coded.Addr, accept)
	for range 200 { // warm the pools, the caches and the GC's pacing; check the codings
		if ce := pc.patch(b); ce != "" {
			b.Fatalf("Content-Encoding %q, want none", ce)
		}
		if ce := cc.patch(b); ce != accept {
			b.Fatalf("Content-Encoding %q, want %s", ce, accept)
		}
	}
	// Blocks of 20 ms each, taking turns: within a block a server answers back to back, as
	// under load (one request now and then would add its wake-up to each), and the turns
	// keep both in the same minute of the machine's load.
	const block = 20 * time.Millisecond
	p0, c0 := processCPU(b, plain.Cmd.Process.Pid), processCPU(b, coded.Cmd.Process.Pid)
	np, nc := 0, 0
	turn := time.Now()
	for b.Loop() {
		cc.patch(b)
		nc++
		if time.Since(turn) >= block {
			for t := time.Now(); time.Since(t) < block; np++ {
				pc.patch(b)
			}
			turn = time.Now()
		}
	}
	for t := time.Now(); np == 0 || time.Since(t) < block; np++ {
		pc.patch(b)
	}
	id := float64(processCPU(b, plain.Cmd.Process.Pid)-p0) / 1e3 / float64(np)
	cpu := float64(processCPU(b, coded.Cmd.Process.Pid)-c0) / 1e3 / float64(nc)
	b.ReportMetric(cpu, "cpu-µs/req")
	b.ReportMetric(id, "identity-µs/req")
	b.ReportMetric(cpu/id, "x-identity")
}

// processCPU is pid's CPU time (all its threads, user and system) in ns, from its process
// CPU clock (clock_getcpuclockid's, which Linux lets any process read).
func processCPU(b *testing.B, pid int) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(int32((^pid)<<3|2), &ts); err != nil { // CPUCLOCK_SCHED of pid
		b.Fatalf("CPU clock of %d: %v", pid, err)
	}
	return ts.Nano()
}

// envBenchHeavy makes the test binary serveHeavy (TestMain): CODING:LEVEL, identity:0.
const envBenchHeavy = "ONEHOST_BENCH_HEAVY"

// serveHeavy serves the heavy route through the worker's router on http1's loop transport,
// compressed as setting says, at any level the encoder has (COMPRESS refuses the costly
// ones, and the benchmark measures them), on 127.0.0.1 until SIGTERM. It says where on
// stderr, as the worker does ("serving").
func serveHeavy(setting string) error {
	name, lv, _ := strings.Cut(setting, ":")
	k, err := contentcoding.Parse(name)
	if err != nil {
		return err
	}
	rt := &router{heavy: heavy.NewHandler(heavy.Config{}), routes: routeHeavy}
	if k != contentcoding.Identity {
		level, err := strconv.Atoi(lv)
		if err != nil {
			return err
		}
		if rt.comp, err = contentcoding.NewCompressor(contentcoding.Config{Codings: []contentcoding.Coding{k}, Levels: []int{level}}); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http1.Server{Handler: rt, Transport: http1.TransportLoop}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(os.Stderr, "{\"msg\":\"serving\",\"addr\":%q}\n", ln.Addr().String())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case err := <-served:
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	if err := <-served; !errors.Is(err, http1.ErrServerClosed) {
		return err
	}
	return nil
}

// patchClient sends the heavy PATCH and reads its answer on one connection, reusing its
// buffer.
type patchClient struct {
	c   net.Conn
	req []byte
	buf []byte
}

// dialPatch connects to addr for PATCHes asking for accept.
func dialPatch(b *testing.B, addr, accept string) *patchClient {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return &patchClient{c: c, buf: make([]byte, 0, 128<<10),
		req: []byte("PATCH /api/resource/123 HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n" +
			"Accept-Encoding: " + accept + "\r\nContent-Length: 14\r\n\r\n{\"foo1\":\"bar\"}")}
}

// patch makes one request and returns the answer's Content-Encoding ("" for none).
func (p *patchClient) patch(b *testing.B) string {
	if _, err := p.c.Write(p.req); err != nil {
		b.Fatal(err)
	}
	p.buf = p.buf[:0]
	end, length := -1, -1
	for end < 0 || len(p.buf) < end+length {
		if len(p.buf) == cap(p.buf) {
			b.Fatal("answer larger than the client's buffer")
		}
		n, err := p.c.Read(p.buf[len(p.buf):cap(p.buf)])
		if err != nil {
			b.Fatal(err)
		}
		p.buf = p.buf[:len(p.buf)+n]
		if end < 0 {
			if i := bytes.Index(p.buf, []byte("\r\n\r\n")); i >= 0 {
				end = i + 4
				if !bytes.HasPrefix(p.buf, []byte("HTTP/1.1 200 ")) {
					b.Fatalf("answer: %q", p.buf[:end])
				}
				length = headerInt(p.buf[:end], "\r\nContent-Length: ")
			}
		}
	}
	return string(headerValue(p.buf[:end], "\r\nContent-Encoding: "))
}

func headerValue(head []byte, prefix string) []byte {
	i := bytes.Index(head, []byte(prefix))
	if i < 0 {
		return nil
	}
	v := head[i+len(prefix):]
	return v[:bytes.IndexByte(v, '\r')]
}

func headerInt(head []byte, prefix string) int {
	n := 0
	for _, d := range headerValue(head, prefix) {
		n = n*10 + int(d-'0')
	}
	return n
}
