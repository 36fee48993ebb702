package ceiling

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// The CSV files bench/scale.sh wrote before the sweep existed (docs/results/*.csv): two
// comment lines, then
//
//	# 2026-11-30T01:22:33Z host: 16 cpus, Intel(R) Xeon(R) Processor, kernel 6.18.44
//	# load: wrk -t8 -c256 on cpus 8-15, 1s warm-up, 4s measured; taskset honoured
//	n,mode,route,rps,cpu_us_per_req,server_cores_busy,p50_ms,p99_ms,errors
//	1,cluster,health,112588,8.9,1.00,2.19,5.10,
//
// Fields are never quoted (the errors column has its commas replaced by spaces), so a
// line splits on commas. Columns are found by name; n, mode, route and rps are required.

var (
	csvHost   = regexp.MustCompile(`host: (\d+) cpus, (.*), kernel (\S+)`)
	csvLoad   = regexp.MustCompile(`load: (\S+) -t(\d+) -c(\d+) on cpus (\S+), ([0-9.]+)s warm-up, ([0-9.]+)s measured`)
	csvNums   = regexp.MustCompile(`([a-z]+) (\d+)`)
	csvNon2xx = regexp.MustCompile(`responses: *(\d+)`)
	csvN      = regexp.MustCompile(`-n[0-9][0-9-]*$`)
)

// CSVSource names the result set of a bench/scale.sh CSV file: its base name without
// ".csv" and without the trailing "-nLIST" of worker counts, so the two files of one
// sweep (scale-2026-11-30-16cpu-n1-8.csv and …-n12.csv) are one source.
func CSVSource(path string) string {
	b := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	if s := csvN.ReplaceAllString(b, ""); s != "" {
		return s
	}
	return b
}

// ParseScaleCSV turns a bench/scale.sh CSV into sweep Runs of the given source, and the
// machine its host comment names (nil without one). What the file does not record stays
// zero and is marked: bytes per request (so no link limit applies to models of these
// runs), the generator's CPU, the request count (estimated as rps × the measured seconds
// of the load comment, 1 s without one). The verdict is cpu when the server used at
// least 90 % of its n cores, else unclear: without the generator's CPU a generator-bound
// run cannot be told from one held by a lock.
func ParseScaleCSV(b []byte, source string) ([]Run, *Machine, error) {
	var (
		machine *Machine
		load    Run // generator fields from the load comment
		cols    map[string]int
		ncols   int
		runs    []Run
	)
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "":
			continue
		case strings.HasPrefix(l, "#"):
			if m := csvHost.FindStringSubmatch(l); m != nil {
				cores, err := strconv.Atoi(m[1])
				if err == nil && cores > 0 {
					machine = &Machine{Cores: cores, Allowed: cores, CPUModel: m[2], Kernel: m[3]}
				}
			}
			if m := csvLoad.FindStringSubmatch(l); m != nil {
				load.Generator, load.GenCPUs = m[1], m[4]
				load.GenThreads, _ = strconv.Atoi(m[2])
				load.Connections, _ = strconv.Atoi(m[3])
				if d, err := strconv.ParseFloat(m[6], 64); err == nil && d > 0 && !math.IsInf(d, 0) {
					load.DurationS = d
				}
			}
			continue
		case cols == nil:
			cols = make(map[string]int)
			names := strings.Split(l, ",")
			for i, name := range names {
				cols[strings.TrimSpace(name)] = i
			}
			ncols = len(names)
			for _, need := range []string{"n", "mode", "route", "rps"} {
				if _, ok := cols[need]; !ok {
					return nil, nil, fmt.Errorf("parse csv header (line %d): no %q column", line, need)
				}
			}
			continue
		}
		r, err := csvRun(strings.Split(l, ","), ncols, cols, load, source)
		if err != nil {
			return nil, nil, fmt.Errorf("parse csv line %d: %w", line, err)
		}
		runs = append(runs, r)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("read csv: %w", err)
	}
	if cols == nil {
		return nil, nil, fmt.Errorf("parse csv: no header line")
	}
	return runs, machine, nil
}

// csvRun is one data line as a Run.
func csvRun(f []string, ncols int, cols map[string]int, load Run, source string) (Run, error) {
	if len(f) != ncols {
		return Run{}, fmt.Errorf("%d fields, want %d", len(f), ncols)
	}
	get := func(name string) string {
		if i, ok := cols[name]; ok {
			return strings.TrimSpace(f[i])
		}
		return ""
	}
	num := func(name string) (float64, error) {
		s := get(name)
		if s == "" {
			return 0, nil
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, fmt.Errorf("%s %q: want a number ≥ 0", name, s)
		}
		return v, nil
	}
	r := Run{Workload: get("route"), Mode: get("mode"), Purpose: PurposeSweep, Source: source,
		Generator: load.Generator, GenThreads: load.GenThreads, Connections: load.Connections, GenCPUs: load.GenCPUs,
		DurationS: load.DurationS}
	if r.Generator == "" {
		r.Generator = "wrk"
	}
	if r.Workload == "" || r.Mode == "" {
		return Run{}, fmt.Errorf("empty mode or route")
	}
	n, err := strconv.Atoi(get("n"))
	if err != nil || n < 1 {
		return Run{}, fmt.Errorf("n %q: want a positive integer", get("n"))
	}
	r.N, r.ServerCores = n, n
	r.Writes = r.Workload == "mix"
	for _, v := range []struct {
		name string
		dst  *float64
	}{
		{"rps", &r.RPS}, {"cpu_us_per_req", &r.ServerCPUUsPerReq}, {"server_cores_busy", &r.ServerBusyCores},
		{"p50_ms", &r.P50Ms}, {"p99_ms", &r.P99Ms},
	} {
		if *v.dst, err = num(v.name); err != nil {
			return Run{}, err
		}
	}
	dur := r.DurationS
	if dur <= 0 {
		dur = 1
	}
	r.Requests = int64(math.Round(math.Min(r.RPS*dur, math.MaxInt64/2)))
	if r.RPS <= 0 || r.Requests <= 0 {
		r.Skipped = "no requests recorded"
		return r, nil
	}
	parseCSVErrors(get("errors"), &r)
	busy := Thresholds{}.withDefaults().CPUBusy
	if r.ServerBusyCores >= busy*float64(n) {
		r.Verdict, r.Evidence = VerdictCPU, fmt.Sprintf("server CPU %.0f%% of %d%%", r.ServerBusyCores*100, n*100)
	} else {
		r.Verdict = VerdictUnclear
		r.Evidence = fmt.Sprintf("server busy %.2f of %d cores; the CSV records neither the generator's CPU nor bytes, so a generator-bound run cannot be told from one a lock held",
			r.ServerBusyCores, n)
	}
	return r, nil
}

// parseCSVErrors reads the errors column: empty, a count, or wrk's lines with commas
// replaced ("Non-2xx or 3xx responses: 12;Socket errors: connect 0  read 1  write 0
// timeout 3;"). Text it cannot read is kept in ErrorText.
func parseCSVErrors(s string, r *Run) {
	if s == "" {
		return
	}
	r.ErrorText = s
	if v, err := strconv.ParseInt(s, 10, 64); err == nil && v >= 0 {
		r.Errors = v
		return
	}
	if m := csvNon2xx.FindStringSubmatch(s); m != nil {
		if v, err := strconv.ParseInt(m[1], 10, 64); err == nil {
			r.Non2xx = v
		}
	}
	if i := strings.Index(s, "Socket errors:"); i >= 0 {
		for _, m := range csvNums.FindAllStringSubmatch(s[i:], -1) {
			v, err := strconv.ParseInt(m[2], 10, 64)
			if err != nil {
				continue
			}
			switch m[1] {
			case "connect":
				r.ConnectErrors = v
				r.Errors += v
			case "read", "write":
				r.Errors += v
			case "timeout":
				r.Timeouts = v
			}
		}
	}
}
