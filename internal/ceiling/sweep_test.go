package ceiling

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/configs"
	"github.com/onehost/onehost/internal/loadhosts"
)

// fakeEnv makes the test binary play one of the sweep's programs.
const fakeEnv = "CEILING_FAKE"

func TestMain(m *testing.M) {
	switch os.Getenv(fakeEnv) {
	case "":
		os.Exit(m.Run())
	case "worker":
		os.Exit(fakeServer(os.Getenv("SQLITE_PATH"), "", func(addr string) {
			fmt.Fprintf(os.Stderr, `{"level":"info","msg":"serving","addr":%q}`+"\n", addr)
		}))
	case "supervisor":
		os.Exit(fakeSupervisor(os.Args[1:]))
	case "wrk":
		os.Exit(fakeWrk(os.Args[1:]))
	case "pm2":
		os.Exit(fakePM2(os.Args[1:]))
	case "pm2-worker", "sleeper":
		os.Exit(sleepUntilTerm())
	case "pm2-broken":
		fmt.Fprintln(os.Stderr, "Error: Cannot find module 'fastify'")
		os.Exit(1)
	}
	os.Exit(2)
}

// fakeServer answers 200 to everything but /api/missing until SIGTERM.
func fakeServer(db, socket string, ready func(addr string)) int {
	if _, err := os.Stat(db); err != nil {
		fmt.Fprintln(os.Stderr, "no database:", err)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 1
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/missing" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, strings.Repeat("x", 1000))
	})
	go http.Serve(ln, mux)
	ready(ln.Addr().String())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	ln.Close()
	return 0
}

// fakeSupervisor: `run ... -socket S` serves, and answers GET /status on the control
// socket S as the supervisor does, with every worker online.
func fakeSupervisor(args []string) int {
	socket, instances := "", 1
	for i, a := range args {
		if a == "-socket" && i+1 < len(args) {
			socket = args[i+1]
		}
		if a == "-instances" && i+1 < len(args) {
			fmt.Sscan(args[i+1], &instances)
		}
	}
	if args[0] != "run" {
		return 2
	}
	return fakeServer(os.Getenv("SQLITE_PATH"), socket, func(addr string) {
		ln, err := net.Listen("unix", socket)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		var calls atomic.Int64
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Worker 0 gains 100 requests per status call, the others none: a skewed share.
			n := calls.Add(1) - 1
			rows := []string{fmt.Sprintf(`{"id":0,"pid":11,"status":"online","requests":%d,"connections":3}`, 100*n)}
			for i := 1; i < instances; i++ {
				rows = append(rows, fmt.Sprintf(`{"id":%d,"pid":%d,"status":"online","requests":5,"connections":0}`, i, 11+i))
			}
			fmt.Fprintf(w, `{"addr":%q,"workers":[%s]}`+"\n", addr, strings.Join(rows, ","))
		}))
	})
}

// fakeWrk sends a few requests to the URL (its last argument) and prints the summary line.
func fakeWrk(args []string) int {
	url := args[len(args)-1]
	var n, bytes int64
	for i := 0; i < 20; i++ {
		resp, err := http.Get(url)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		n++
		bytes += int64(len(b)) + 100
	}
	fmt.Printf("%s{\"requests\":%d,\"bytes\":%d,\"duration_us\":1000000,\"connect\":0,\"read\":0,\"write\":0,\"status\":0,\"timeout\":0,\"p50_us\":500,\"p99_us\":2000,\"max_us\":3000}\n",
		WrkDoneMarker, n, bytes)
	return 0
}

func TestSweepWithFakes(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	seed := filepath.Join(dir, "seed.db")
	os.WriteFile(seed, []byte("not really sqlite"), 0o644)
	// The fakes are this binary under a name per program, told which by the environment.
	var runs []Run
	cfg := SweepConfig{
		Supervisor: exe, Worker: exe, Wrk: exe, Autocannon: filepath.Join(dir, "absent"),
		SeedDB: seed, WorkDir: dir, Ns: []int{1, 2}, Duration: time.Second, Warmup: -1, NoPin: true,
		Workloads: []Workload{
			{Name: "missing", Path: "/api/missing"},
			{Name: "heavy", Method: "PATCH", Path: "/api/resource/123", Headers: []string{"Content-Type: application/json"}, Body: `{"foo1":"bar"}`},
		},
		ImbalanceN: 2, ImbalanceWorkload: "heavy",
		// The fakes' figures, not this machine's other work, are what the test judges.
		Thresholds: Thresholds{OtherCores: 1e9},
		Report:     func(r Run) { runs = append(runs, r) },
	}
	s, err := NewSweeper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Supervisor, worker and wrk are all this binary, told which to play by CEILING_FAKE in
	// the environment the sweep hands its children (wrk through a wrapper script that sets
	// its own), so each mode runs as its own sweep.
	roleEnv := func(role string) []string { return append(os.Environ(), fakeEnv+"="+role) }
	ctx := context.Background()
	for _, mode := range []string{ModeCluster, ModeSingle} {
		s.cfg.Modes = []string{mode}
		role := "supervisor"
		if mode == ModeSingle {
			role = "worker"
		}
		s.cfg.Environ = roleEnv(role)
		s.cfg.Wrk = wrapWrk(t, dir, exe)
		if err := s.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(runs) != 2*2*2+1 {
		for _, r := range runs {
			t.Log(r.Line())
		}
		t.Fatalf("got %d runs, want 9 (2 N x 2 modes x 2 workloads + 1 imbalance)", len(runs))
	}
	for _, r := range runs {
		line := r.Line()
		switch {
		case r.Workload == "missing":
			if !strings.Contains(r.Skipped, "404") || !strings.Contains(line, "skipped=") {
				t.Errorf("missing route: got %q, want skipped with 404", line)
			}
		default:
			if r.Skipped != "" || r.Requests != 20 || r.RPS != 20 || r.Verdict == "" || r.Generator != "wrk" {
				t.Errorf("got %q (skipped %q), want 20 requests at 20 req/s on wrk with a verdict", line, r.Skipped)
			}
			if !strings.HasPrefix(line, fmt.Sprintf("workload=%s n=%d mode=%s rps=20 ", r.Workload, r.N, r.Mode)) {
				t.Errorf("got line %q", line)
			}
			if r.BytesPerReq != 1100 || r.P99Ms != 2 || r.DurationS != 1 {
				t.Errorf("got %.0f B/req, p99 %.1f ms, %.1f s; want 1100, 2, 1", r.BytesPerReq, r.P99Ms, r.DurationS)
			}
		}
		if r.Mode == ModeCluster && r.Skipped == "" {
			if len(r.Workers) != r.N || r.Workers[0].Requests == 0 || r.Workers[r.N-1].Requests != 0 && r.N > 1 {
				t.Errorf("cluster shares: got %+v, want %d workers, worker 0 with requests and the others none", r.Workers, r.N)
			}
		}
		if r.Mode == ModeSingle && !strings.Contains(strings.Join(r.ServerCommand, " "), fmt.Sprintf("GOMAXPROCS=%d", r.N)) {
			t.Errorf("single server command %q lacks GOMAXPROCS=%d", r.ServerCommand, r.N)
		}
	}
	var imb Run
	for _, r := range runs {
		if r.Purpose == PurposeImbalance {
			imb = r
		}
	}
	if imb.Purpose != PurposeImbalance || imb.N != 2 || imb.Connections != 2 || imb.Workload != "heavy" {
		t.Errorf("got imbalance run %+v, want heavy on 2 workers with 2 connections", imb)
	}
	if !strings.Contains(imb.Line(), "conns=2 w0=") {
		t.Errorf("imbalance line %q lacks per-worker shares", imb.Line())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "wrk-heavy.lua")); err != nil || !strings.Contains(string(b), `wrk.method = "PATCH"`) {
		t.Errorf("wrk script: got %q %v, want the PATCH", b, err)
	}
	// SingleProcs multiplies the single worker's GOMAXPROCS, not its cores.
	runs = nil
	s.cfg.Modes, s.cfg.Environ, s.cfg.SingleProcs, s.cfg.ImbalanceN = []string{ModeSingle}, roleEnv("worker"), 2, 0
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if r.Skipped == "" && !strings.Contains(strings.Join(r.ServerCommand, " "), fmt.Sprintf("GOMAXPROCS=%d", 2*r.N)) {
			t.Errorf("single with SingleProcs 2: server command %q, want GOMAXPROCS=%d", r.ServerCommand, 2*r.N)
		}
	}
	if notes := s.Notes(); len(notes) != 1 || !strings.Contains(notes[0], "autocannon") {
		t.Errorf("got notes %q, want one saying autocannon was absent", notes)
	}
	// The database copies are gone with their servers.
	if m, _ := filepath.Glob(filepath.Join(dir, "server-*", "feed.db")); len(m) != 0 {
		t.Errorf("database copies left behind: %v", m)
	}
}

// wrapWrk is a shell script that runs the test binary as the fake wrk (the sweep passes
// its Environ, which names another role, to the generator too).
func wrapWrk(t *testing.T, dir, exe string) string {
	p := filepath.Join(dir, "fake-wrk")
	script := fmt.Sprintf("#!/bin/sh\n%s=wrk exec %q \"$@\"\n", fakeEnv, exe)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNICAnnotatesRuns(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	seed := filepath.Join(dir, "seed.db")
	os.WriteFile(seed, []byte("x"), 0o644)
	var runs []Run
	s, err := NewSweeper(SweepConfig{
		Supervisor: exe, Worker: exe, SeedDB: seed, WorkDir: dir, Duration: time.Second, Warmup: -1, NoPin: true,
		Workloads: []Workload{{Name: "static", Path: "/static/catalog.html"}},
		Environ:   append(os.Environ(), fakeEnv+"=supervisor"),
		Report:    func(r Run) { runs = append(runs, r) },
	})
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.Wrk = wrapWrk(t, dir, exe)
	var shaped []float64
	err = s.NIC(context.Background(), ModeCluster, 1, []float64{100e6, 1e9}, func(bits float64) (string, error) {
		shaped = append(shaped, bits)
		return fmt.Sprintf("tc qdisc replace dev lo root tbf rate %.0fbit", bits), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(shaped) != 2 || len(runs) != 2 {
		t.Fatalf("got %d shapes and %d runs, want 2 and 2", len(shaped), len(runs))
	}
	for i, r := range runs {
		if r.Purpose != PurposeNIC || r.LinkBitsPerS != shaped[i] || !strings.Contains(r.Shaping, "tbf") ||
			!strings.Contains(r.Line(), " link="+FormatBits(shaped[i])+" ") {
			t.Errorf("run %d: got %q (%+v), want a nic run at %v", i, r.Line(), r, shaped[i])
		}
	}
	b, _ := json.Marshal(runs[0])
	if !strings.Contains(string(b), `"link_bits_per_s":100000000`) {
		t.Errorf("JSON lacks the link rate: %s", b)
	}
}

func TestNewSweeperValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  SweepConfig
		want string
	}{
		{"no seed", SweepConfig{WorkDir: "x"}, "SeedDB is empty"},
		{"no work dir", SweepConfig{SeedDB: "x"}, "WorkDir is empty"},
		{"bad mode", SweepConfig{SeedDB: "x", WorkDir: "x", Modes: []string{"fork"}}, `mode "fork"`},
		{"fractional seconds", SweepConfig{SeedDB: "x", WorkDir: "x", Duration: 1500 * time.Millisecond}, "whole seconds"},
		{"more cores than allowed", SweepConfig{SeedDB: "x", WorkDir: "x", Ns: []int{100000}}, "needs cores 0-99999"},
		{"load hosts without autocannon", SweepConfig{SeedDB: "x", WorkDir: "x", Autocannon: "/nonexistent/autocannon",
			LoadHosts: LoadHosts{Hosts: []loadhosts.Host{{Addr: "h"}}}}, "the load hosts run it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewSweeper(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestNewSweeperClusterConfig: without ClusterConfig the supervisor gets the configuration
// this binary carries, written into the scratch directory (so the sweep runs from any
// directory); a given path is used as given.
func TestNewSweeperClusterConfig(t *testing.T) {
	work := filepath.Join(t.TempDir(), "work") // not made yet: NewSweeper makes it
	s, err := NewSweeper(SweepConfig{SeedDB: "x", WorkDir: work, NoPin: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(work, "cluster.yaml"); s.cfg.ClusterConfig != want {
		t.Fatalf("ClusterConfig %q, want %q", s.cfg.ClusterConfig, want)
	}
	if b, err := os.ReadFile(s.cfg.ClusterConfig); err != nil || string(b) != configs.Cluster {
		t.Errorf("written configuration: %v, %d bytes; want configs/cluster.yaml's %d", err, len(b), len(configs.Cluster))
	}
	s, err = NewSweeper(SweepConfig{SeedDB: "x", WorkDir: t.TempDir(), NoPin: true, ClusterConfig: "my.yaml"})
	if err != nil || s.cfg.ClusterConfig != "my.yaml" {
		t.Errorf("given ClusterConfig: %v, %q; want my.yaml", err, s.cfg.ClusterConfig)
	}
}

// TestSweeperLoadHostsSkips: with load hosts, the peers (on loopback) are skipped with a
// note, and the generator has no cores here.
func TestSweeperLoadHostsSkips(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSweeper(SweepConfig{SeedDB: "x", WorkDir: t.TempDir(), Autocannon: self, Modes: []string{ModeCluster, ModeNginx},
		LoadHosts: LoadHosts{Hosts: []loadhosts.Host{{User: "u", Addr: "h1"}, {Addr: "h2"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if s.peers.skip[ModeNginx] == "" {
		t.Error("nginx not skipped with load hosts")
	}
	if notes := strings.Join(s.Notes(), "\n"); !strings.Contains(notes, "ran on 2 load host(s) over ssh ([u@h1 h2])") {
		t.Errorf("notes do not say where the generator ran:\n%s", notes)
	}
	if cpus, shared := s.genCPUs(1); cpus != nil || shared {
		t.Errorf("generator cores %v (shared %v): want none here", cpus, shared)
	}
}

func TestSelectWorkloads(t *testing.T) {
	all := DefaultWorkloads("bench/mix.lua")
	for _, tc := range []struct {
		name  string
		names []string
		want  []string // selected names in order; nil with wantErr
		err   string   // a part of the error
	}{
		{"the defaults' order", []string{"mix", "heavy"}, []string{"heavy", "mix"}, ""},
		{"unknown", []string{"nope"}, nil, "known: hello"},
		{"encoded after plain", []string{"static+br", "hello", "static", "static+gzip"}, []string{"hello", "static", "static+br", "static+gzip"}, ""},
		{"encoded alone", []string{"heavy+zstd"}, []string{"heavy+zstd"}, ""},
		{"named twice", []string{"static+gzip", "static+gzip"}, []string{"static+gzip"}, ""},
		{"unknown coding", []string{"static+deflate"}, nil, "NAME+gzip"},
		{"identity is no coding", []string{"static+identity"}, nil, "NAME+gzip"},
		{"unknown base", []string{"nope+gzip"}, nil, "unknown workload"},
		{"the mix's script", []string{"mix+gzip"}, nil, "wrk script"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SelectWorkloads(all, tc.names)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, w := range got {
				names = append(names, w.Name)
				coding := requestedCoding(w.Name)
				hasHeader := slices.Contains(w.Headers, "Accept-Encoding: "+coding)
				if (coding != "") != hasHeader {
					t.Errorf("%s: headers %q", w.Name, w.Headers)
				}
			}
			if !slices.Equal(names, tc.want) {
				t.Errorf("selected %q, want %q", names, tc.want)
			}
			if tc.name == "the defaults' order" && !got[1].Writes {
				t.Error("the mix does not write")
			}
		})
	}
	// The defaults' headers are not shared with an encoded copy.
	got, _ := SelectWorkloads(all, []string{"heavy", "heavy+gzip"})
	if len(got[0].Headers) != 1 || len(got[1].Headers) != 2 {
		t.Errorf("heavy headers %q, heavy+gzip %q", got[0].Headers, got[1].Headers)
	}
}

func TestServesEncodedWorkload(t *testing.T) {
	for _, tc := range []struct {
		mode, workload string
		want           bool
	}{
		{ModeCluster, "heavy+br", true},
		{ModeNginx, "static", true},
		{ModeNginx, "static+gzip", true}, // gzip_static
		{ModeNginx, "static+br", false},  // no brotli module in Debian's nginx
		{ModeNginx, "heavy+gzip", false},
		{ModePM2, "heavy", true},
		{ModePM2, "heavy+gzip", false}, // the plain peer: pm2-compress stands in
		{ModePM2Compress, "heavy+gzip", true},
		{ModePM2Compress, "heavy+zstd", true},
		{ModePM2Compress, "heavy+br", true},
		{ModePM2Compress, "heavy", false}, // the plain answer is pm2's
		{ModePM2Compress, "static+gzip", false},
		{ModeNginxGzip, "static+gzip", true},
		{ModeNginxGzip, "static", false}, // the plain answer is nginx's
		{ModeNginxGzip, "static+br", false},
		{ModeNginxGzip, "heavy+gzip", false},
	} {
		if got := ServesWorkload(tc.mode, tc.workload); got != tc.want {
			t.Errorf("ServesWorkload(%s, %s) = %v, want %v", tc.mode, tc.workload, got, tc.want)
		}
	}
}

// TestMeasureQuietRepeats: a run the host's other work disturbed is run again, at most
// HostBusyRepeats times, and every run is reported (the disturbed ones stay marked).
func TestMeasureQuietRepeats(t *testing.T) {
	for _, tc := range []struct {
		name     string
		repeats  int
		verdicts []string // what successive runs are judged
		want     int      // runs reported
	}{
		{"quiet at once", 2, []string{VerdictCPU}, 1},
		{"quiet at the second try", 2, []string{VerdictHostBusy, VerdictCPU}, 2},
		{"busy throughout: two repeats", 2, []string{VerdictHostBusy, VerdictHostBusy, VerdictHostBusy, VerdictCPU}, 3},
		{"the default: never repeated, marked", 0, []string{VerdictHostBusy, VerdictCPU}, 1},
		{"five repeats", 5, []string{VerdictHostBusy, VerdictHostBusy, VerdictCPU}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Run
			s := &Sweeper{cfg: SweepConfig{HostBusyRepeats: tc.repeats, Report: func(r Run) { got = append(got, r) }}, log: zap.NewNop()}
			i := 0
			s.measure = func(context.Context, *Server, Workload, MeasureOptions) Run {
				r := Run{Workload: "hello", Verdict: tc.verdicts[i]}
				i++
				return r
			}
			s.measureQuiet(context.Background(), nil, Workload{Name: "hello"}, MeasureOptions{})
			if len(got) != tc.want {
				t.Errorf("%d runs reported, want %d", len(got), tc.want)
			}
		})
	}
}
