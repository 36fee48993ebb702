package ceiling

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestParseAutocannon(t *testing.T) {
	b, err := os.ReadFile("testdata/autocannon-heavy.json")
	if err != nil {
		t.Fatal(err)
	}
	want := Outcome{Requests: 27040, Bytes: 891400000, DurationS: 3.01, P50Ms: 1, P99Ms: 4, MaxMs: 31,
		Bound: true, MaxThread: 0.93, GenThreads: 1}
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"json alone", b},
		{"after a warning line", append([]byte("warning: generator-bound: busiest worker at 93% of a core\n"), b...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, got, err := ParseAutocannon(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
	// The clone's verdict on its own generator: saturated makes the run the generator's.
	sat := `{"requests":{"total":100},"duration":1,"generator":{"workers":1,"verdict":{"saturated":true,"signal":"hiccup p99","value":40,"at_s":2,"windows":3}}}`
	if _, got, err := ParseAutocannon([]byte(sat)); err != nil || !got.Saturated || got.Saturation != "hiccup p99 40.0 ms at 2 s" {
		t.Errorf("saturated report: got %+v, %v; want Saturated by hiccup p99 40.0 ms at 2 s", got, err)
	}
	for _, tc := range []struct{ name, in string }{
		{"empty", ""},
		{"not json", "Running 3s test"},
		{"truncated", `{"requests":{"total":`},
		{"negative", `{"requests":{"total":-5},"duration":1}`},
	} {
		t.Run("error/"+tc.name, func(t *testing.T) {
			if _, _, err := ParseAutocannon([]byte(tc.in)); err == nil {
				t.Errorf("got no error for %q", tc.in)
			}
		})
	}
	t.Run("2xx when no total", func(t *testing.T) {
		_, o, err := ParseAutocannon([]byte(`{"2xx":90,"non2xx":10,"duration":1}`))
		if err != nil || o.Requests != 100 || o.Non2xx != 10 {
			t.Errorf("got %+v %v, want 100 requests, 10 non-2xx", o, err)
		}
	})
}

func TestParseWrk(t *testing.T) {
	out := "Running 2s test @ http://127.0.0.1:1/feed\n  1 threads and 16 connections\n" +
		WrkDoneMarker + `{"requests":13912,"bytes":72509344,"duration_us":2006000,"connect":1,"read":2,"write":3,"status":7,"timeout":4,"p50_us":1925,"p99_us":43508,"max_us":57449}` + "\n"
	got, err := ParseWrk([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := Outcome{Requests: 13912, Errors: 6, Connect: 1, Timeouts: 4, Non2xx: 7, Bytes: 72509344, DurationS: 2.006,
		P50Ms: 1.925, P99Ms: 43.508, MaxMs: 57.449}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, in := range []string{"", "Requests/sec: 5\n", WrkDoneMarker + "{", WrkDoneMarker + `{"requests":-1}`} {
		if _, err := ParseWrk([]byte(in)); err == nil {
			t.Errorf("ParseWrk(%q): got no error", in)
		}
	}
}

func TestWrkScript(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		method, body, include string
		headers               []string
		wantIn, wantNotIn     []string
	}{
		{name: "patch with body", method: "PATCH", body: `{"foo1":"bar"}`, headers: []string{"Content-Type: application/json"},
			wantIn: []string{`wrk.method = "PATCH"`, `wrk.body = "{\"foo1\":\"bar\"}"`, `wrk.headers["Content-Type"] = "application/json"`, "function done("}},
		{name: "mix includes its script", include: "/x/bench/mix.lua",
			wantIn: []string{`dofile("/x/bench/mix.lua")`, "function done("}, wantNotIn: []string{"wrk.method"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := WrkScript(tc.method, tc.headers, tc.body, tc.include)
			for _, w := range tc.wantIn {
				if !strings.Contains(s, w) {
					t.Errorf("script lacks %q:\n%s", w, s)
				}
			}
			for _, w := range tc.wantNotIn {
				if strings.Contains(s, w) {
					t.Errorf("script has %q:\n%s", w, s)
				}
			}
		})
	}
}

func TestCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		out  string
	}{
		{"0", []int{0}, "0"},
		{"0-3", []int{0, 1, 2, 3}, "0-3"},
		{"12-15", []int{12, 13, 14, 15}, "12-15"},
		{"0-2,5,7-8", []int{0, 1, 2, 5, 7, 8}, "0-2,5,7-8"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseCPUList(tc.in)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v %v, want %v", got, err, tc.want)
			}
			if s := FormatCPUList(got); s != tc.out {
				t.Errorf("format: got %q, want %q", s, tc.out)
			}
		})
	}
	for _, bad := range []string{"", "a", "3-1", "-1", "0-99999"} {
		if _, err := ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q): got no error", bad)
		}
	}
}

func TestParseBits(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
	}{
		{"100mbit", 100e6}, {"1gbit", 1e9}, {"10g", 10e9}, {"25G", 25e9}, {"2.5gbit", 2.5e9}, {"1e9", 1e9}, {"800kbit", 800e3},
	} {
		got, err := ParseBits(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseBits(%q): got %v %v, want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "g", "10x", "-1g", "0", "inf"} {
		if _, err := ParseBits(bad); err == nil {
			t.Errorf("ParseBits(%q): got no error", bad)
		}
	}
	for _, tc := range []struct {
		in   float64
		want string
	}{{100e6, "100mbit"}, {1e9, "1gbit"}, {2.5e9, "2.5gbit"}, {500, "500bit"}} {
		if got := FormatBits(tc.in); got != tc.want {
			t.Errorf("FormatBits(%v): got %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzParseAutocannon(f *testing.F) {
	b, _ := os.ReadFile("testdata/autocannon-heavy.json")
	f.Add(b)
	f.Add([]byte(`{"2xx":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, o, err := ParseAutocannon(b)
		if err == nil && (o.Requests < 0 || o.Bytes < 0) {
			t.Errorf("accepted negative counts: %+v", o)
		}
	})
}

func FuzzParseWrk(f *testing.F) {
	f.Add([]byte(WrkDoneMarker + `{"requests":1,"bytes":2,"duration_us":3}`))
	f.Add([]byte("Running\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := ParseWrk(b)
		if err == nil && (o.Requests < 0 || o.Bytes < 0) {
			t.Errorf("accepted negative counts: %+v", o)
		}
	})
}

func FuzzParseCPUList(f *testing.F) {
	f.Add("0-3,8")
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := ParseCPUList(s)
		if err != nil {
			return
		}
		again, err := ParseCPUList(FormatCPUList(cpus))
		if err != nil || len(again) != len(cpus) {
			t.Errorf("%q: format and parse again gave %v %v, want %v", s, again, err, cpus)
		}
	})
}

func FuzzParseBits(f *testing.F) {
	f.Add("10gbit")
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := ParseBits(s); err == nil && !(v > 0) {
			t.Errorf("%q: accepted %v", s, v)
		}
	})
}

func FuzzParseResults(f *testing.F) {
	f.Add([]byte(`{"runs":[{"workload":"heavy","n":1}]}`))
	f.Add([]byte(`{"workload":"heavy","n":1}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) { ParseResults(b) })
}
