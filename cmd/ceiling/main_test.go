package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/ceiling"
)

// helperEnv makes the test binary run `ceiling` itself with its arguments (for pin, which
// replaces the process).
const helperEnv = "CEILING_CMD_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "ceiling:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestRunErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "no command given"},
		{"unknown command", []string{"bench"}, `unknown command "bench"`},
		{"model without results", []string{"model", "-results", "/nonexistent/dir"}, "read results"},
		{"model with a bad link", []string{"model", "-nic", "fast"}, `parse link rate "fast"`},
		{"sweep with a bad N", []string{"sweep", "-n", "1,x"}, `"x" is not a positive integer`},
		{"sweep with no rounds", []string{"sweep", "-repeat", "0"}, "-repeat 0: want at least 1"},
		{"sweep single-procs", []string{"sweep", "-single-procs", "0"}, "-single-procs 0: want a multiple of N from 1"},
		{"sweep with a bad load host", []string{"sweep", "-load-hosts", "u@h:x"}, `bad port "x"`},
		{"sweep request without an app", []string{"sweep", "-m", "POST"}, "give the app too"},
		{"sweep app with our workloads", []string{"sweep", "-app", "node a.js", "-workloads", "heavy"}, "with -app the request is"},
		{"sweep app in single mode", []string{"sweep", "-app", "node a.js", "-modes", "cluster,single"}, "say -modes cluster,pm2"},
		{"sweep app with quotes", []string{"sweep", "-app", "node 'my app.js'"}, "quotes are not understood"},
		{"sweep app with a bad header", []string{"sweep", "-app", "node a.js", "-H", "nocolon"}, `want "Name: value"`},
		{"challenge with no load host", []string{"challenge", "-load-hosts", " , "}, "none given"},
		{"nic with a bad rate", []string{"nic", "-rates", "1gbit,zz"}, `parse link rate "zz"`},
		{"nic with a bad priority", []string{"nic", "-fifo", "100"}, "-fifo 100: want 1-99"},
		{"model with a csv that is not one", []string{"model", "-csv", "results.txt"}, `-csv "results.txt": want a .csv file`},
		{"model with no fit points", []string{"model", "-csv", "x.csv", "-fit-max-n", "0"}, "want at least 1"},
		{"model with a missing csv", []string{"model", "-csv", "/nonexistent/x.csv"}, "read results"},
		{"pin without command", []string{"pin", "-cpus", "0"}, "no command given"},
		{"pin with a bad list", []string{"pin", "-cpus", "x", "true"}, "parse cpu list"},
		{"pin with a bad priority", []string{"pin", "-cpus", "0", "-fifo", "100", "true"}, "-fifo 100: want 1-99"},
		{"challenge with a bad priority", []string{"challenge", "-gen-fifo", "-1"}, "-gen-fifo -1: want 1-99"},
		{"challenge with negative other work", []string{"challenge", "-other-cores", "-1"}, "-other-cores -1: want cores of other work"},
		{"fleet replot of a missing file", []string{"fleet", "-replot", "/nonexistent/ceiling.json"}, "replot: open /nonexistent/ceiling.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := run(context.Background(), tc.args, func(string) string { return "" }, &out, &errb)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestPin(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "pin", "-cpus", "0", "--", "/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.Fields(string(out)); len(got) != 2 || got[1] != "0" {
		t.Errorf("got %q, want Cpus_allowed_list: 0", out)
	}
}

// TestPinFIFO: `pin -fifo N` runs the command, and what it starts, under SCHED_FIFO
// (policy 1 in /proc/PID/stat's 41st field; cut's own, inherited from the shell).
func TestPinFIFO(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "pin", "-cpus", "0", "-fifo", "5", "--", "/bin/sh", "-c", "cut -d' ' -f40,41 /proc/self/stat")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "operation not permitted") {
		t.Skipf("no real-time priority here (root or CAP_SYS_NICE, and RT time in this cgroup): %s", out)
	}
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.Fields(string(out)); len(got) != 2 || got[0] != "5" || got[1] != "1" {
		t.Errorf("got %q, want rt_priority 5 and policy 1 (SCHED_FIFO)", out)
	}
}

func TestModelCommand(t *testing.T) {
	dir := t.TempDir()
	sw := ceiling.Sweep{Machine: ceiling.Machine{CPUModel: "Test", Cores: 16, Allowed: 16}}
	for _, n := range []int{1, 2, 4} {
		rps := float64(n) * 10000 / (1 + 0.05*float64(n-1))
		sw.Runs = append(sw.Runs, ceiling.Run{Workload: "heavy", Mode: ceiling.ModeCluster, Purpose: ceiling.PurposeSweep,
			N: n, Requests: int64(rps * 3), RPS: rps, ServerCPUUsPerReq: 100, BytesPerReq: 32900, Verdict: ceiling.VerdictCPU})
	}
	if err := os.MkdirAll(filepath.Join(dir, "sweep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := sw.WriteJSON(filepath.Join(dir, "sweep", ceiling.ResultFile)); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"model", "-results", dir, "-cores", "12", "-nic", "10g"}, os.Getenv, &out, &errb); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	// 100 µs/req, alpha 0.05: 5 cores (41,667) pass 10 GbE's 35,900 responses of 32,900 B.
	for _, want := range []string{"## Prediction: 12 cores behind 10 GbE", "workload=heavy nic_ceiling_at_cores: 1 GbE=1 10 GbE=5"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, f := range []string{"model.md", "model.json", "plots/throughput-heavy.svg", "plots/cpu-per-request.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("model wrote no %s: %v", f, err)
		}
	}
}

// scaleCSV is a bench/scale.sh file whose points a loss of 0.1 per core makes exactly,
// except at n = 8, where the server ran 10 % slower than the curve.
func scaleCSV() string {
	s := "# 2026-11-30T00:51:15Z host: 16 cpus, Test CPU, kernel 6.1\n# load: wrk -t8 -c256 on cpus 8-15, 1s warm-up, 4s measured; taskset honoured\n" +
		"n,mode,route,rps,cpu_us_per_req,server_cores_busy,p50_ms,p99_ms,errors\n"
	for _, n := range []int{1, 2, 4, 8} {
		rps := float64(n) * 1e6 / 10 / (1 + 0.1*float64(n-1))
		if n == 8 {
			rps *= 0.9
		}
		s += fmt.Sprintf("%d,cluster,post,%.3f,%.3f,%d.00,1,2,\n", n, rps, 10*(1+0.1*float64(n-1)), n)
	}
	return s
}

func TestModelCommandCSV(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "scale-test-n1-8.csv")
	if err := os.WriteFile(csv, []byte(scaleCSV()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		args      []string
		want      []string
		wantFiles []string
	}{
		{"-csv alone reads no default results", []string{"model", "-csv", csv},
			[]string{"Measured on: Test CPU, 16 cores",
				"model_check in_sample_mae=",
				"validates=true",
				"model_extrapolation fit_max_n=2 points=2 mae=5.6% cpu_bound_points=2 cpu_bound_mae=5.6%",
				"model_extrapolation workload=scale-test:post mode=cluster n4=+0.0% n8=+11.1% mae=5.6%",
				"workload=scale-test:post nic_ceiling_at_cores: 1 GbE=unknown"}, nil},
		{"-fit-max-n 4", []string{"model", "-csv", csv, "-fit-max-n", "4"},
			[]string{"model_extrapolation workload=scale-test:post mode=cluster n8=+11.1% mae=11.1%"}, nil},
		{"a directory's csv files are found", []string{"model", "-results", dir, "-plots", "-"},
			[]string{"model_extrapolation fit_max_n=2 points=2"}, []string{"model.md", "model.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if err := run(context.Background(), tc.args, os.Getenv, &out, &errb); err != nil {
				t.Fatalf("%v: %s", err, errb.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, f := range tc.wantFiles {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("model wrote no %s: %v", f, err)
				}
			}
		})
	}
}

func TestParseChallenge(t *testing.T) {
	dir := t.TempDir()
	seed, tokens := dir+"/seed.db", dir+"/tokens.json"
	os.WriteFile(seed, []byte("x"), 0o644)
	os.WriteFile(tokens, []byte("[]"), 0o644)
	files := []string{"-seed", seed, "-tokens", tokens}
	getenv := func(string) string { return "" }
	tests := []struct {
		name string
		args []string
		want string // "" means no error
	}{
		{"defaults", nil, ""},
		{"cluster", []string{"-instances", "2", "-cpu", "0.2"}, ""},
		{"negative instances", []string{"-instances", "-1"}, "-instances -1"},
		{"negative cpu", []string{"-cpu", "-0.5"}, "-cpu -0.5"},
		{"time scale below 1", []string{"-time-scale", "0.5"}, "-time-scale 0.5"},
		{"stray argument", []string{"now"}, `unexpected argument "now"`},
		{"missing seed", []string{"-seed", dir + "/none.db"}, "make seed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseChallenge(append(append([]string{}, files...), tt.args...), getenv, io.Discard)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("parseChallenge: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("parseChallenge: %v, want an error with %q", err, tt.want)
			case tt.want == "" && (c.search.Run.TimeScale != c.timeScale || c.search.Run.Hold != time.Minute):
				t.Errorf("config %+v: want the time scale and hold carried into the search", c.search.Run)
			}
		})
	}
}

func TestChallengeCPUs(t *testing.T) {
	srv, gen, err := challengeCPUs("", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(srv) != 1 || len(gen) == 0 {
		t.Fatalf("default cores: server %v, generator %v; want the last core and the others", srv, gen)
	}
	if srv, gen, err = challengeCPUs("0", "1-3"); err != nil || !slices.Equal(srv, []int{0}) || !slices.Equal(gen, []int{1, 2, 3}) {
		t.Errorf("explicit cores: %v %v %v", srv, gen, err)
	}
	if _, _, err := challengeCPUs("x", ""); err == nil {
		t.Error("bad -server-cpus: nil error")
	}
}

// TestNextStep: the sweep's last line points to the model and, where runs were disturbed,
// to the flags that measure again.
func TestNextStep(t *testing.T) {
	run := func(n int, verdict string) ceiling.Run {
		return ceiling.Run{Workload: "heavy", Mode: ceiling.ModeCluster, Purpose: ceiling.PurposeSweep, N: n, RPS: 1, Verdict: verdict}
	}
	for _, tc := range []struct {
		name    string
		runs    []ceiling.Run
		repeat  int
		want    string
		wantNot string
	}{
		{"quiet, one round", []ceiling.Run{run(1, ceiling.VerdictCPU)}, 1, "`ceiling model -results out/sweep`", "host-busy"},
		{"quiet, one round: suggest rounds", []ceiling.Run{run(1, ceiling.VerdictCPU)}, 1, "-repeat 3 gives medians", ""},
		{"quiet, three rounds", []ceiling.Run{run(1, ceiling.VerdictCPU)}, 3, "`ceiling model", "-repeat"},
		{"two cells host-busy", []ceiling.Run{run(1, ceiling.VerdictHostBusy), run(2, ceiling.VerdictHostBusy)}, 1,
			"2 of 2 cells host-busy: measure again with -repeat 3 -host-busy-repeats 2", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := nextStep("out/sweep", tc.runs, tc.repeat, 0)
			if !strings.Contains(got, tc.want) || (tc.wantNot != "" && strings.Contains(got, tc.wantNot)) {
				t.Errorf("got %q, want %q and not %q", got, tc.want, tc.wantNot)
			}
		})
	}
}
