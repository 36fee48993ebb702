package main

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/genhealth"
	"github.com/onehost/onehost/internal/loadgen"
)

func TestParseArgs(t *testing.T) {
	jsonHeader := []loadgen.Header{{Name: "Content-Type", Value: "application/json"}}
	defaults := func(url string) options {
		return options{
			url: url, connections: 10, pipelining: 1, duration: 10 * time.Second, workers: 1,
			method: "GET", timeout: 10 * time.Second, sampleInt: time.Second,
		}
	}
	with := func(o options, f func(*options)) options { f(&o); return o }
	heavy := func(conns, workers int) options {
		return with(defaults("http://127.0.0.1:3000/api/resource/123"), func(o *options) {
			o.connections, o.pipelining, o.duration, o.workers, o.workersSet = conns, 2, 20*time.Second, workers, true
			o.method, o.headers, o.body = "PATCH", jsonHeader, []byte(`{"foo1":"bar"}`)
		})
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want options
	}{
		// The four runs of load-profile.md, verbatim.
		{
			name: "seed: hello, one process",
			args: []string{"-c", "5", "-p", "2", "-d", "20", "-w", "1", "http://127.0.0.1:3000/"},
			want: with(defaults("http://127.0.0.1:3000/"), func(o *options) {
				o.connections, o.pipelining, o.duration, o.workersSet = 5, 2, 20*time.Second, true
			}),
		},
		{
			name: "seed: heavy, one process",
			args: []string{"-c", "5", "-p", "2", "-d", "20", "-w", "1", "-m", "PATCH", "-H", "Content-Type: application/json",
				"-b", `{"foo1":"bar"}`, "http://127.0.0.1:3000/api/resource/123"},
			want: heavy(5, 1),
		},
		{
			name: "seed: heavy, cluster, low load",
			args: []string{"-c", "5", "-p", "2", "-d", "20", "-w", "1", "-m", "PATCH", "-H", "Content-Type: application/json",
				"-b", `{"foo1":"bar"}`, "http://127.0.0.1:3000/api/resource/123"},
			want: heavy(5, 1),
		},
		{
			name: "seed: heavy, cluster, max load",
			args: []string{"-c", "20", "-p", "2", "-d", "20", "-w", "6", "-m", "PATCH", "-H", "Content-Type: application/json",
				"-b", `{"foo1":"bar"}`, "http://127.0.0.1:3000/api/resource/123"},
			want: heavy(20, 6),
		},
		{
			name: "long names and =",
			args: []string{"--connections", "5", "--pipelining=2", "--duration", "20", "--workers", "1", "--method", "PATCH",
				"--headers", "Content-Type=application/json", "--body", `{"foo1":"bar"}`, "http://127.0.0.1:3000/api/resource/123"},
			want: heavy(5, 1),
		},
		{
			name: "attached short values and --header",
			args: []string{"-c5", "-p2", "-d20", "-w1", "-mpatch", "--header", "Content-Type:application/json",
				"-b", `{"foo1":"bar"}`, "http://127.0.0.1:3000/api/resource/123"},
			want: heavy(5, 1),
		},
		{
			name: "flags after the URL, booleans grouped",
			args: []string{"127.0.0.1:3000/x", "-jl", "-n", "--renderStatusCodes", "-a", "1000", "-t", "2.5", "-T", "t"},
			want: with(defaults("http://127.0.0.1:3000/x"), func(o *options) {
				o.json, o.latencyTable, o.noProgress, o.statusCodes = true, true, true, true
				o.amount, o.timeout, o.title = 1000, 2500*time.Millisecond, "t"
			}),
		},
		{
			name: "rates, duration with a unit, sample interval, server pid",
			args: []string{"-R", "5000", "-d", "1m", "-L", "500", "--server-pid", "42", "--no-progress", "http://h/"},
			want: with(defaults("http://h/"), func(o *options) {
				o.overallRate, o.duration, o.sampleInt, o.serverPID, o.noProgress = 5000, time.Minute, 500*time.Millisecond, 42, true
			}),
		},
		{
			name: "connection rate wins over overall rate",
			args: []string{"--overallRate", "100", "--connectionRate", "7", "http://h/"},
			want: with(defaults("http://h/"), func(o *options) { o.connectionRate = 7 }),
		},
		{
			name: "source addresses and connect rate",
			args: []string{"-c", "20000", "--local-addrs", "127.0.0.2-127.0.0.4", "--connect-rate", "2500", "http://h/"},
			want: with(defaults("http://h/"), func(o *options) {
				o.connections, o.connectRate = 20000, 2500
				o.localAddrs = []netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("127.0.0.4")}
			}),
		},
		{
			name: "connect rate 0: all at once",
			args: []string{"--connect-rate=0", "--local-addrs", "10.0.0.1,10.0.0.9", "http://h/"},
			want: with(defaults("http://h/"), func(o *options) {
				o.connectRate = -1
				o.localAddrs = []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.9")}
			}),
		},
		{
			name: "the generator verdict's thresholds",
			args: []string{"--saturation", "hiccup=30ms,cpu=0.9", "http://h/"},
			want: with(defaults("http://h/"), func(o *options) {
				o.saturation = genhealth.Thresholds{HiccupP99: 30 * time.Millisecond, CPUShare: 0.9}
			}),
		},
		{
			name: "a path uses PORT",
			args: []string{"/posts/1"},
			env:  map[string]string{"PORT": "3801"},
			want: defaults("http://localhost:3801/posts/1"),
		},
		{
			name: "repeated headers keep their order",
			args: []string{"-H", "A: 1", "-H", "b=2", "--headers", "C:3:4", "http://h/"},
			want: with(defaults("http://h/"), func(o *options) {
				o.headers = []loadgen.Header{{Name: "A", Value: "1"}, {Name: "b", Value: "2"}, {Name: "C", Value: "3:4"}}
			}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseArgs(tt.args, func(k string) string { return tt.env[k] })
			if err != nil {
				t.Fatalf("parseArgs: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseArgs(%q)\n got %+v\nwant %+v", tt.args, got, tt.want)
			}
		})
	}
}

func TestParseArgsErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "no URL", args: []string{"-c", "5"}, want: "no URL"},
		{name: "two URLs", args: []string{"http://a/", "http://b/"}, want: "one URL expected"},
		{name: "unknown flag", args: []string{"--bogus", "http://h/"}, want: "unknown flag --bogus"},
		{name: "unknown short flag", args: []string{"-q", "http://h/"}, want: "unknown flag -q"},
		{name: "unsupported autocannon flag", args: []string{"--forever", "http://h/"}, want: "does not support"},
		{name: "missing value", args: []string{"http://h/", "-c"}, want: "-c needs a value"},
		{name: "bad number", args: []string{"-c", "five", "http://h/"}, want: `-c "five"`},
		{name: "zero connections", args: []string{"-c", "0", "http://h/"}, want: "at least 1"},
		{name: "bad duration", args: []string{"-d", "soon", "http://h/"}, want: "-d"},
		{name: "bad header", args: []string{"-H", "nocolon", "http://h/"}, want: "Name: value"},
		{name: "value for a boolean", args: []string{"--json=yes", "http://h/"}, want: "takes no value"},
		{name: "value flag in a group", args: []string{"-jc", "http://h/"}, want: "cannot be grouped"},
		{name: "https", args: []string{"https://h/"}, want: "only http"},
		{name: "path without PORT", args: []string{"/x"}, want: "set PORT"},
		{name: "bad source address", args: []string{"--local-addrs", "127.0.0.9-127.0.0.2", "http://h/"}, want: "--local-addrs"},
		{name: "negative connect rate", args: []string{"--connect-rate", "-5", "http://h/"}, want: "or 0 for all at once"},
		{name: "bad threshold", args: []string{"--saturation", "lag=1ms", "http://h/"}, want: "unknown key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseArgs(tt.args, func(string) string { return "" })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("parseArgs(%q) error %v, want one containing %q", tt.args, err, tt.want)
			}
		})
	}
}
