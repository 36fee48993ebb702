package main

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/onehost/onehost/internal/genhealth"
	"github.com/onehost/onehost/internal/loadgen"
	"github.com/onehost/onehost/internal/srcaddr"
)

// options are the command line's settings, named and defaulted as autocannon's.
type options struct {
	url            string
	connections    int
	pipelining     int
	duration       time.Duration
	amount         int64
	workers        int
	workersSet     bool // -w given: the banner names the workers, as autocannon's does
	method         string
	body           []byte
	headers        []loadgen.Header
	overallRate    float64 // -R
	connectionRate float64 // -r
	localAddrs     []netip.Addr
	connectRate    float64 // --connect-rate: 0 the default, negative unbounded
	timeout        time.Duration
	sampleInt      time.Duration
	title          string
	json           bool
	latencyTable   bool
	noProgress     bool
	statusCodes    bool
	serverPID      int
	histLog        string               // --hist-log: write the latencies as an HdrHistogram interval log
	saturation     genhealth.Thresholds // --saturation: the generator verdict's thresholds
	checkDecode    bool                 // --check-decode: decode every body per its Content-Encoding
	help           bool
}

// flagKind says how a flag takes its value.
type flagKind int

const (
	valueFlag flagKind = iota
	boolFlag
)

type flagDef struct {
	names []string // the first is the canonical name, used in messages
	kind  flagKind
	set   func(o *options, v string) error
}

// flagDefs are autocannon's flags (its names and aliases) that this generator supports,
// plus --server-pid.
var flagDefs = []flagDef{
	{[]string{"connections", "c"}, valueFlag, func(o *options, v string) error { return positiveInt(v, &o.connections) }},
	{[]string{"pipelining", "p"}, valueFlag, func(o *options, v string) error { return positiveInt(v, &o.pipelining) }},
	{[]string{"duration", "d"}, valueFlag, func(o *options, v string) (err error) { o.duration, err = parseSeconds(v); return err }},
	{[]string{"amount", "a"}, valueFlag, func(o *options, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return errors.New("want a whole number of requests, at least 1")
		}
		o.amount = n
		return nil
	}},
	{[]string{"workers", "w"}, valueFlag, func(o *options, v string) error {
		o.workersSet = true
		return positiveInt(v, &o.workers)
	}},
	{[]string{"method", "m"}, valueFlag, func(o *options, v string) error {
		if v == "" || strings.ContainsAny(v, " \t\r\n") {
			return errors.New("want a method name such as GET or PATCH")
		}
		o.method = strings.ToUpper(v)
		return nil
	}},
	{[]string{"body", "b"}, valueFlag, func(o *options, v string) error { o.body = []byte(v); return nil }},
	{[]string{"input", "i"}, valueFlag, func(o *options, v string) (err error) {
		o.body, err = os.ReadFile(v)
		return err
	}},
	{[]string{"headers", "H", "header"}, valueFlag, func(o *options, v string) error {
		h, err := parseHeader(v)
		o.headers = append(o.headers, h)
		return err
	}},
	{[]string{"overallRate", "R"}, valueFlag, func(o *options, v string) error { return rate(v, &o.overallRate) }},
	{[]string{"connectionRate", "r"}, valueFlag, func(o *options, v string) error { return rate(v, &o.connectionRate) }},
	{[]string{"local-addrs"}, valueFlag, func(o *options, v string) (err error) {
		o.localAddrs, err = srcaddr.ParseList(v)
		return err
	}},
	{[]string{"connect-rate"}, valueFlag, func(o *options, v string) error {
		r, err := strconv.ParseFloat(v, 64)
		switch {
		case err != nil || r < 0 || math.IsInf(r, 0) || math.IsNaN(r):
			return errors.New("want connects per second, or 0 for all at once")
		case r == 0:
			o.connectRate = -1
		default:
			o.connectRate = r
		}
		return nil
	}},
	{[]string{"timeout", "t"}, valueFlag, func(o *options, v string) (err error) {
		o.timeout, err = parseSeconds(v)
		if err == nil && o.timeout <= 0 {
			err = errors.New("want a number of seconds above 0")
		}
		return err
	}},
	{[]string{"sampleInt", "L"}, valueFlag, func(o *options, v string) error {
		ms, err := strconv.ParseFloat(v, 64)
		if err != nil || ms < 1 {
			return errors.New("want milliseconds, at least 1")
		}
		o.sampleInt = time.Duration(ms * float64(time.Millisecond))
		return nil
	}},
	{[]string{"title", "T"}, valueFlag, func(o *options, v string) error { o.title = v; return nil }},
	{[]string{"server-pid"}, valueFlag, func(o *options, v string) error { return positiveInt(v, &o.serverPID) }},
	{[]string{"hist-log"}, valueFlag, func(o *options, v string) error { o.histLog = v; return nil }},
	{[]string{"saturation"}, valueFlag, func(o *options, v string) (err error) { o.saturation, err = genhealth.ParseThresholds(v); return err }},
	{[]string{"json", "j"}, boolFlag, func(o *options, _ string) error { o.json = true; return nil }},
	{[]string{"latency", "l", "renderLatencyTable"}, boolFlag, func(o *options, _ string) error { o.latencyTable = true; return nil }},
	{[]string{"no-progress", "n"}, boolFlag, func(o *options, _ string) error { o.noProgress = true; return nil }},
	{[]string{"check-decode"}, boolFlag, func(o *options, _ string) error { o.checkDecode = true; return nil }},
	{[]string{"renderStatusCodes", "statusCodes"}, boolFlag, func(o *options, _ string) error { o.statusCodes = true; return nil }},
	{[]string{"help", "h"}, boolFlag, func(o *options, _ string) error { o.help = true; return nil }},
}

// unsupported are autocannon flags this generator knows but does not implement; naming
// them makes the error say so instead of "unknown flag".
var unsupported = map[string]bool{
	"S": true, "socketPath": true, "W": true, "warmup": true, "on-port": true, "F": true, "form": true,
	"har": true, "B": true, "bailout": true, "M": true, "maxConnectionRequests": true,
	"O": true, "maxOverallRequests": true, "C": true, "ignoreCoordinatedOmission": true,
	"D": true, "reconnectRate": true, "I": true, "idReplacement": true, "f": true, "forever": true,
	"s": true, "servername": true, "x": true, "excludeErrorStats": true, "E": true, "expectBody": true,
	"cert": true, "key": true, "ca": true, "debug": true, "V": true, "verbose": true,
}

func lookupFlag(name string) (*flagDef, error) {
	for i := range flagDefs {
		for _, n := range flagDefs[i].names {
			if n == name {
				return &flagDefs[i], nil
			}
		}
	}
	if unsupported[name] {
		return nil, fmt.Errorf("flag %s: autocannon has it but this generator does not support it", dashed(name))
	}
	return nil, fmt.Errorf("unknown flag %s (see -h)", dashed(name))
}

func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// parseArgs reads autocannon's command line: "-c 5", "-c5", "--connections 5",
// "--connections=5", grouped booleans ("-jl"), repeated -H, and one URL. A URL without a
// scheme gets "http://"; a bare path is taken relative to http://localhost:$PORT, as
// autocannon does when PORT is set.
func parseArgs(args []string, getenv func(string) string) (options, error) {
	o := options{
		connections: loadgen.DefaultConnections,
		pipelining:  loadgen.DefaultPipelining,
		duration:    loadgen.DefaultDuration,
		workers:     1,
		method:      "GET",
		timeout:     loadgen.DefaultTimeout,
		sampleInt:   loadgen.DefaultSampleInterval,
	}
	var urls []string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			urls = append(urls, args[i+1:]...)
			break
		}
		if len(arg) < 2 || arg[0] != '-' || isNumber(arg) {
			urls = append(urls, arg)
			continue
		}
		var name, value string
		hasValue := false
		if strings.HasPrefix(arg, "--") {
			name = arg[2:]
			if j := strings.IndexByte(name, '='); j >= 0 {
				name, value, hasValue = name[:j], name[j+1:], true
			}
		} else {
			name = arg[1:2]
			if len(arg) > 2 {
				def, err := lookupFlag(name)
				if err != nil {
					return o, err
				}
				if def.kind == boolFlag { // -jln: a group of booleans
					for _, c := range arg[1:] {
						def, err := lookupFlag(string(c))
						if err != nil {
							return o, err
						}
						if def.kind != boolFlag {
							return o, fmt.Errorf("flag -%c needs a value; it cannot be grouped in %s", c, arg)
						}
						def.set(&o, "")
					}
					continue
				}
				value, hasValue = strings.TrimPrefix(arg[2:], "="), true
			}
		}
		def, err := lookupFlag(name)
		if err != nil {
			return o, err
		}
		if def.kind == boolFlag {
			if hasValue && value != "true" {
				return o, fmt.Errorf("flag %s takes no value", dashed(name))
			}
			def.set(&o, "")
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return o, fmt.Errorf("flag %s needs a value", dashed(name))
			}
			i++
			value = args[i]
		}
		if err := def.set(&o, value); err != nil {
			return o, fmt.Errorf("flag %s %q: %w", dashed(name), value, err)
		}
	}
	if o.help {
		return o, nil
	}
	switch len(urls) {
	case 0:
		return o, errors.New("no URL given; usage: autocannon [flags] URL (see -h)")
	case 1:
	default:
		return o, fmt.Errorf("one URL expected, got %d: %s", len(urls), strings.Join(urls, " "))
	}
	o.url = urls[0]
	switch {
	case strings.HasPrefix(o.url, "/"):
		port := getenv("PORT")
		if port == "" {
			return o, fmt.Errorf("URL %q is a path: give a full URL or set PORT", o.url)
		}
		o.url = "http://localhost:" + port + o.url
	case !strings.HasPrefix(o.url, "http"):
		o.url = "http://" + o.url
	}
	if err := loadgen.ParseURL(o.url); err != nil {
		return o, err
	}
	if o.overallRate > 0 && o.connectionRate > 0 {
		// autocannon: "connection rate will take precedence if both are set".
		o.overallRate = 0
	}
	return o, nil
}

// rate is the open-loop rate over all connections.
func (o *options) rate() float64 {
	if o.connectionRate > 0 {
		return o.connectionRate * float64(o.connections)
	}
	return o.overallRate
}

// parseHeader reads "Name: value" or "Name=value", split at whichever of ':' and '='
// comes first, as autocannon does.
func parseHeader(v string) (loadgen.Header, error) {
	i := strings.IndexAny(v, ":=")
	if i <= 0 {
		return loadgen.Header{}, fmt.Errorf("header %q: want \"Name: value\" or \"Name=value\"", v)
	}
	return loadgen.Header{Name: strings.TrimSpace(v[:i]), Value: strings.TrimSpace(v[i+1:])}, nil
}

// parseSeconds reads a number of seconds ("20", "0.5") or a duration with a unit ("20s",
// "1m", "500ms"), as autocannon accepts.
func parseSeconds(v string) (time.Duration, error) {
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s < 0 {
			return 0, errors.New("want a number of seconds, not negative")
		}
		return time.Duration(s * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, errors.New("want seconds (20) or a duration (20s, 1m)")
	}
	return d, nil
}

func positiveInt(v string, dst *int) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return errors.New("want a whole number, at least 1")
	}
	*dst = n
	return nil
}

func rate(v string, dst *float64) error {
	r, err := strconv.ParseFloat(v, 64)
	if err != nil || r < 1 {
		return errors.New("want requests per second, at least 1")
	}
	*dst = r
	return nil
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

const usage = `Usage: autocannon [flags] URL
       autocannon users [flags] URL   (scripted user journeys, see "autocannon users -h")
       autocannon merge [-j] [-o FILE] LOG...   (add HdrHistogram interval logs, see "autocannon merge -h")
       autocannon version|--version

A Go load generator with autocannon's flags and output. Only http:// URLs.

  -c/--connections NUM     concurrent connections (default 10)
  -p/--pipelining NUM      requests in flight per connection (default 1)
  -d/--duration SEC        seconds to run, or a duration such as 30s (default 10)
  -a/--amount NUM          total requests; ends the run instead of -d
  -w/--workers NUM         OS threads running the load (GOMAXPROCS; default 1)
  -m/--method METHOD       request method (default GET)
  -b/--body BODY           request body
  -i/--input FILE          request body from a file
  -H/--headers K=V         request header, "Name: value" or "Name=value" (repeatable)
  -R/--overallRate NUM     open loop: NUM requests/s over all connections, each due at
                           start + k/NUM; latency counts from when it was due
  -r/--connectionRate NUM  open loop: NUM requests/s per connection (wins over -R)
  -t/--timeout SEC         seconds before a request times out and its connection is
                           reset (default 10)
  -L/--sampleInt MS        sample interval in milliseconds (default 1000)
  -T/--title TITLE         title for the JSON output
  -j/--json                print one JSON object instead of tables
  -l/--latency             print the full latency percentile table
  -n/--no-progress         no progress line on stderr
  --renderStatusCodes      print the count of each status code
  --local-addrs A-B        spread the connections over these source addresses: A-B (a
                           range) or A,B,… (default: on a loopback IPv4 target, as many of
                           127.0.0.2, .3, … as keep each pair at or under 40 % of the port
                           range's even half: 5,646 with Linux's default range)
  --connect-rate NUM       open the connections at NUM per second; 0: all at once
                           (default: all at once up to 1,000 connections, 10,000/s above)
  --hist-log FILE          write the latencies as an HdrHistogram interval log, one interval a second (autocannon merge adds logs)
  --saturation K=V,...     thresholds of the generator's verdict: hiccup=50ms,
                           send-lag=100ms,cpu=0.95,connect=5ms,min-late=5 (docs/bench.md)
  --check-decode           decode every body as its Content-Encoding says (gzip, zstd,
                           br, identity) and count each that fails, or names another
                           coding, as an error ("bad_bodies" in the JSON); costs the
                           generator a copy and a decode of every body
  --server-pid PID         sample the server's process tree (CPU, RSS) and the host
  -h/--help                this text

Bytes per response are what came over the connection, heads and bodies, as sent:
compressed when the server compressed (send -H 'Accept-Encoding: gzip' to ask for it).
Latencies are in milliseconds with microsecond resolution. Exit status 0 after a run
(even with errors or non-2xx responses), 1 on bad flags or when nothing could connect.
`
