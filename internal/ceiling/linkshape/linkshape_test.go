package linkshape

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// helperEnv marks the test binary re-executed inside a private network namespace.
const helperEnv = "LINKSHAPE_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helper())
	}
	os.Exit(m.Run())
}

// helper shapes the namespace's loopback and prints what the kernel (and tc, when the host
// has it) reports.
func helper() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 1 }
	if err := LoopbackUp(); err != nil {
		return fail(err)
	}
	var report struct {
		Qdiscs [][]Qdisc
		TC     []string
	}
	for _, bits := range []float64{100e6, 10e9, 100e9} {
		if err := Replace("lo", TBF{BitsPerS: bits}); err != nil {
			return fail(err)
		}
		qs, err := Show("lo")
		if err != nil {
			return fail(err)
		}
		report.Qdiscs = append(report.Qdiscs, qs)
		if out, err := exec.Command("tc", "qdisc", "show", "dev", "lo").CombinedOutput(); err == nil {
			report.TC = append(report.TC, strings.TrimSpace(string(out)))
		}
	}
	json.NewEncoder(os.Stdout).Encode(report)
	return 0
}

// TestShapeInNamespace shapes lo inside a fresh network namespace (root only) and reads
// the qdisc back, through netlink and, where installed, through tc.
func TestShapeInNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("helper failed: %v: %s", err, ee.Stderr)
	}
	if err != nil {
		t.Skipf("cannot start a process in a new network namespace here: %v", err)
	}
	var report struct {
		Qdiscs [][]Qdisc
		TC     []string
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("decode helper output %q: %v", out, err)
	}
	want := []uint64{12_500_000, 1_250_000_000, 12_500_000_000}
	if len(report.Qdiscs) != len(want) {
		t.Fatalf("got %d reports, want %d", len(report.Qdiscs), len(want))
	}
	for i, qs := range report.Qdiscs {
		if len(qs) != 1 || qs[0].Kind != "tbf" || qs[0].Parent != tcHRoot {
			t.Fatalf("rate %d: got qdiscs %+v, want one root tbf", i, qs)
		}
		if qs[0].RateBytesPerS != want[i] {
			t.Errorf("rate %d: got %d B/s, want %d", i, qs[0].RateBytesPerS, want[i])
		}
	}
	for i, s := range report.TC {
		w := []string{"rate 100Mbit", "rate 10Gbit", "rate 100Gbit"}[i]
		if !strings.Contains(s, "tbf") || !strings.Contains(s, w) {
			t.Errorf("tc shows %q, want tbf with %q", s, w)
		}
	}
}

func TestEncodeParseRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bits  float64
		bytes uint64
	}{
		{"100mbit", 100e6, 12_500_000},
		{"10gbit fits u32", 10e9, 1_250_000_000},
		{"100gbit needs rate64", 100e9, 12_500_000_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := TBF{BitsPerS: tc.bits}.withDefaults()
			q, err := ParseQdisc(encodeTBF(7, tb))
			if err != nil {
				t.Fatal(err)
			}
			if q.Ifindex != 7 || q.Kind != "tbf" || q.Parent != tcHRoot || q.Handle != 1<<16 {
				t.Errorf("got %+v, want tbf 1: on ifindex 7 at root", q)
			}
			if q.RateBytesPerS != tc.bytes {
				t.Errorf("got rate %d B/s, want %d", q.RateBytesPerS, tc.bytes)
			}
			if int(q.Limit) != tb.Limit() {
				t.Errorf("got limit %d, want %d", q.Limit, tb.Limit())
			}
		})
	}
}

func TestTBFDefaults(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tbf       TBF
		wantBurst int
		wantLimit int
	}{
		{"100mbit: 256 KiB floor", TBF{BitsPerS: 100e6}, 256 << 10, 625_000 + 256<<10},
		{"10gbit: 4 ms of rate", TBF{BitsPerS: 10e9}, 5_000_000, 62_500_000 + 5_000_000},
		{"explicit", TBF{BitsPerS: 1e9, Burst: 100_000, Latency: 1e6}, 100_000, 125_000 + 100_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.tbf.withDefaults()
			if d.Burst != tc.wantBurst || d.Limit() != tc.wantLimit {
				t.Errorf("got burst %d limit %d, want %d %d", d.Burst, d.Limit(), tc.wantBurst, tc.wantLimit)
			}
		})
	}
	if got := (TBF{BitsPerS: 1e9}).TC("lo"); got != "tc qdisc replace dev lo root tbf rate 1000000000bit burst 500000 limit 6750000" {
		t.Errorf("got %q", got)
	}
}

func FuzzParseQdisc(f *testing.F) {
	f.Add(encodeTBF(1, TBF{BitsPerS: 1e9}.withDefaults()))
	f.Add(encodeTBF(1, TBF{BitsPerS: 1e11}.withDefaults()))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseQdisc(b) // must not panic
	})
}
