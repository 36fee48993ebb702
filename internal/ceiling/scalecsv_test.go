package ceiling

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const scaleHeader = "# 2026-11-30T01:22:33Z host: 16 cpus, Intel(R) Xeon(R) Processor, kernel 6.18.44-fc\n" +
	"# load: wrk -t8 -c256 on cpus 8-15, 1s warm-up, 4s measured; taskset honoured\n" +
	"n,mode,route,rps,cpu_us_per_req,server_cores_busy,p50_ms,p99_ms,errors\n"

func TestParseScaleCSV(t *testing.T) {
	for _, tc := range []struct {
		name        string
		in          string
		wantMachine *Machine
		want        []Run // the fields compared: see below
	}{
		{
			name:        "bench/scale.sh file",
			in:          scaleHeader + "1,cluster,health,112588,8.9,1.00,2.19,5.10,\n4,single,mix,39922,92.1,3.34,6.64,34.82,\n",
			wantMachine: &Machine{CPUModel: "Intel(R) Xeon(R) Processor", Kernel: "6.18.44-fc", Cores: 16, Allowed: 16},
			want: []Run{
				{Workload: "health", Mode: ModeCluster, N: 1, RPS: 112588, ServerCPUUsPerReq: 8.9, ServerBusyCores: 1, P50Ms: 2.19, P99Ms: 5.10,
					Requests: 450352, DurationS: 4, Verdict: VerdictCPU},
				{Workload: "mix", Mode: ModeSingle, N: 4, RPS: 39922, ServerCPUUsPerReq: 92.1, ServerBusyCores: 3.34, P50Ms: 6.64, P99Ms: 34.82,
					Requests: 159688, DurationS: 4, Writes: true, Verdict: VerdictUnclear},
			},
		},
		{
			name: "columns by name, no comments: one second assumed",
			in:   "rps,route,mode,n\n5000,feed,prefork,2\n",
			want: []Run{{Workload: "feed", Mode: ModePrefork, N: 2, RPS: 5000, Requests: 5000, Verdict: VerdictUnclear}},
		},
		{
			name: "wrk's errors with commas replaced",
			in: scaleHeader + "2,cluster,post,1000,20,2.00,1,2,Non-2xx or 3xx responses: 12;Socket errors: connect 1  read 2  write 3  timeout 4;\n" +
				"2,cluster,feed,1000,20,2.00,1,2,7\n",
			wantMachine: &Machine{CPUModel: "Intel(R) Xeon(R) Processor", Kernel: "6.18.44-fc", Cores: 16, Allowed: 16},
			want: []Run{
				{Workload: "post", Mode: ModeCluster, N: 2, RPS: 1000, ServerCPUUsPerReq: 20, ServerBusyCores: 2, P50Ms: 1, P99Ms: 2,
					Requests: 4000, DurationS: 4, Verdict: VerdictCPU, Non2xx: 12, ConnectErrors: 1, Errors: 6, Timeouts: 4},
				{Workload: "feed", Mode: ModeCluster, N: 2, RPS: 1000, ServerCPUUsPerReq: 20, ServerBusyCores: 2, P50Ms: 1, P99Ms: 2,
					Requests: 4000, DurationS: 4, Verdict: VerdictCPU, Errors: 7},
			},
		},
		{
			name: "no requests: skipped",
			in:   "n,mode,route,rps\n1,single,feed,0\n",
			want: []Run{{Workload: "feed", Mode: ModeSingle, N: 1, Skipped: "no requests recorded"}},
		},
		{
			name: "comments and blank lines only before the header",
			in:   "\n# nothing known\n\nn,mode,route,rps\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs, m, err := ParseScaleCSV([]byte(tc.in), "src")
			if err != nil {
				t.Fatal(err)
			}
			if (m == nil) != (tc.wantMachine == nil) || (m != nil && *m != *tc.wantMachine) {
				t.Errorf("got machine %+v, want %+v", m, tc.wantMachine)
			}
			if len(runs) != len(tc.want) {
				t.Fatalf("got %d runs, want %d", len(runs), len(tc.want))
			}
			for i, r := range runs {
				w := tc.want[i]
				if r.Source != "src" || r.Purpose != PurposeSweep || r.Generator != "wrk" || r.ServerCores != r.N || r.BytesPerReq != 0 {
					t.Errorf("run %d: got source %q purpose %q generator %q server cores %d bytes %v; want src, sweep, wrk, n, 0 (unknown)",
						i, r.Source, r.Purpose, r.Generator, r.ServerCores, r.BytesPerReq)
				}
				// Compare what the file says; the evidence and error text are prose.
				r.Source, r.Purpose, r.Generator, r.ServerCores, r.Evidence, r.ErrorText = "", "", "", 0, "", ""
				r.GenThreads, r.Connections, r.GenCPUs = 0, 0, ""
				if !equalRuns(r, w) {
					t.Errorf("run %d: got %+v, want %+v", i, r, w)
				}
			}
		})
	}
	t.Run("load comment", func(t *testing.T) {
		runs, _, err := ParseScaleCSV([]byte(scaleHeader+"1,cluster,health,100,1,1,1,1,\n"), "x")
		if err != nil {
			t.Fatal(err)
		}
		if r := runs[0]; r.GenThreads != 8 || r.Connections != 256 || r.GenCPUs != "8-15" {
			t.Errorf("got %d threads, %d connections on %q; want 8, 256 on 8-15", r.GenThreads, r.Connections, r.GenCPUs)
		}
	})
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "no header line"},
		{"comments only", "# host: 16 cpus, x, kernel y\n", "no header line"},
		{"no rps column", "n,mode,route\n1,cluster,feed\n", `no "rps" column`},
		{"n not a number", "n,mode,route,rps\nx,cluster,feed,10\n", `n "x"`},
		{"n zero", "n,mode,route,rps\n0,cluster,feed,10\n", `n "0"`},
		{"negative rps", "n,mode,route,rps\n1,cluster,feed,-10\n", `rps "-10"`},
		{"NaN cpu", "n,mode,route,rps,cpu_us_per_req\n1,cluster,feed,10,NaN\n", `cpu_us_per_req "NaN"`},
		{"infinite busy", "n,mode,route,rps,server_cores_busy\n1,cluster,feed,10,+Inf\n", `server_cores_busy "+Inf"`},
		{"too few fields", "n,mode,route,rps\n1,cluster,feed\n", "3 fields, want 4"},
		{"empty route", "n,mode,route,rps\n1,cluster,,10\n", "empty mode or route"},
	} {
		t.Run("error/"+tc.name, func(t *testing.T) {
			_, _, err := ParseScaleCSV([]byte(tc.in), "x")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// equalRuns compares runs field by field through their summary of what a CSV can hold.
func equalRuns(a, b Run) bool {
	return a.Workload == b.Workload && a.Mode == b.Mode && a.N == b.N && a.RPS == b.RPS &&
		a.ServerCPUUsPerReq == b.ServerCPUUsPerReq && a.ServerBusyCores == b.ServerBusyCores &&
		a.P50Ms == b.P50Ms && a.P99Ms == b.P99Ms && a.Requests == b.Requests && a.DurationS == b.DurationS &&
		a.Writes == b.Writes && a.Verdict == b.Verdict && a.Skipped == b.Skipped && a.Errors == b.Errors &&
		a.ConnectErrors == b.ConnectErrors && a.Timeouts == b.Timeouts && a.Non2xx == b.Non2xx
}

func TestCSVSource(t *testing.T) {
	for _, tc := range []struct{ name, path, want string }{
		{"n list", "docs/results/scale-2026-11-30-16cpu-n1-8.csv", "scale-2026-11-30-16cpu"},
		{"one n", "/x/cluster-2026-11-30-16cpu-n12.csv", "cluster-2026-11-30-16cpu"},
		{"no n suffix", "runs.csv", "runs"},
		{"only an n list", "n1-8.csv", "n1-8"},
		{"upper-case extension", "a-n4.CSV", "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CSVSource(tc.path); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLoadRunsCSV(t *testing.T) {
	for _, tc := range []struct {
		name      string
		paths     []string
		wantRuns  int
		wantMachs int
		sources   []string
	}{
		{"the directory: all four files", []string{"testdata/scale16"}, 80, 4, []string{"cluster-2026-11-30-16cpu", "scale-2026-11-30-16cpu"}},
		{"one file", []string{"testdata/scale16/scale-2026-11-30-16cpu-n12.csv"}, 8, 1, []string{"scale-2026-11-30-16cpu"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs, ms, err := LoadRuns(tc.paths...)
			if err != nil {
				t.Fatal(err)
			}
			if len(runs) != tc.wantRuns || len(ms) != tc.wantMachs {
				t.Errorf("got %d runs, %d machines; want %d, %d", len(runs), len(ms), tc.wantRuns, tc.wantMachs)
			}
			seen := make(map[string]bool)
			for _, r := range runs {
				seen[r.Source] = true
			}
			for _, s := range tc.sources {
				if !seen[s] {
					t.Errorf("got sources %v, want %q among them", seen, s)
				}
			}
			if len(seen) != len(tc.sources) {
				t.Errorf("got sources %v, want %v", seen, tc.sources)
			}
		})
	}
	t.Run("error names the line", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "bad-n1.csv")
		if err := os.WriteFile(p, []byte("n,mode,route,rps\n1,cluster,feed,x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := LoadRuns(p); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("got %v, want an error naming line 2", err)
		}
	})
}

func FuzzParseScaleCSV(f *testing.F) {
	for _, name := range []string{"scale-2026-11-30-16cpu-n1-8.csv", "cluster-2026-11-30-16cpu-n12.csv"} {
		b, err := os.ReadFile(filepath.Join("testdata/scale16", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(scaleHeader + "2,cluster,post,1000,20,2.00,1,2,Non-2xx or 3xx responses: 12;Socket errors: connect 1  read 2  write 3  timeout 4;\n"))
	f.Add([]byte("rps,n,mode,route\n1e308,1,a,b\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		runs, _, err := ParseScaleCSV(b, "fuzz")
		if err != nil {
			return
		}
		for _, r := range runs {
			if r.N < 1 || r.RPS < 0 || math.IsNaN(r.RPS) || math.IsInf(r.RPS, 0) || r.Requests < 0 || r.Source != "fuzz" {
				t.Fatalf("got run %+v from %q", r, b)
			}
		}
		// Whatever parses, the model and its checks take without panicking.
		_ = Validate(runs, 2)
	})
}
