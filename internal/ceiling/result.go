package ceiling

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Modes of a run: the supervisor's prefork cluster, or one worker process with
// GOMAXPROCS=N on the same cores; or a peer measured beside them at the same N (see
// ServesWorkload): PM2's cluster mode running the Fastify heavy PATCH, or nginx serving
// the static page from disk; and the same two compressing per request, for the workloads
// that ask for a content coding: the Fastify peer with @fastify/compress, nginx with
// `gzip on` (where ModeNginx sends the .gz made ahead, `gzip_static`).
const (
	ModeCluster     = "cluster"
	ModeSingle      = "single"
	ModePM2         = "pm2"
	ModeNginx       = "nginx"
	ModePM2Compress = "pm2-compress"
	ModeNginxGzip   = "nginx-gzip"
	// ModePrefork is bench/scale.sh's N hand-started GOMAXPROCS=1 workers, each pinned to
	// its own core on one SO_REUSEPORT port: the cluster before the supervisor existed
	// (read from its CSV files, never run by the sweep).
	ModePrefork = "prefork"
)

// Purposes of a run.
const (
	PurposeSweep     = "sweep"     // one cell of the scaling sweep
	PurposeImbalance = "imbalance" // few connections, to show SO_REUSEPORT's hash imbalance
	PurposeNIC       = "nic"       // on a shaped loopback (an emulated NIC)
)

// Machine describes the host a sweep ran on.
type Machine struct {
	CPUModel string `json:"cpu_model"` // /proc/cpuinfo "model name"
	Kernel   string `json:"kernel"`    // uname -r
	Cores    int    `json:"cores"`     // logical CPUs online
	Allowed  int    `json:"allowed"`   // CPUs this process may run on (affinity)
	Hostname string `json:"hostname,omitempty"`
}

// Sweep is one result file: the machine, the exact command, and every run so far.
type Sweep struct {
	Command []string  `json:"command"`
	Started time.Time `json:"started"`
	Machine Machine   `json:"machine"`
	// Notes says what applies to every run (shared cores, a missing generator, ...).
	Notes []string `json:"notes,omitempty"`
	Runs  []Run    `json:"runs"`
}

// WorkerShare is one worker's part of a cluster run, from `supervisor status -json`
// (counters the supervisor polls once a second, so the window is shifted by up to 1 s).
type WorkerShare struct {
	ID          int    `json:"id"`
	Requests    uint64 `json:"requests"`    // served during the run
	Connections int64  `json:"connections"` // open at mid-run
}

// HostCPU is the host's CPU time over a run, in percent of all CPUs (as top shows it).
type HostCPU struct {
	User    float64 `json:"user"`
	System  float64 `json:"system"`
	Idle    float64 `json:"idle"`
	IOWait  float64 `json:"iowait"`
	SoftIRQ float64 `json:"softirq"`
	Steal   float64 `json:"steal"`
}

// Run is one measured cell: one workload against one server configuration.
type Run struct {
	Workload string `json:"workload"`
	Mode     string `json:"mode"` // ModeCluster, ModeSingle, or a peer: ModePM2, ModeNginx, ModePM2Compress, ModeNginxGzip
	Purpose  string `json:"purpose"`
	N        int    `json:"n"` // workers (cluster, pm2 instances, nginx worker processes) or GOMAXPROCS (single)
	// Writes: the workload writes to SQLite (the mix's likes and posts).
	Writes bool `json:"writes,omitempty"`
	// Round is the sweep's round (SweepConfig.Repeat) the run belongs to; 0 with one round.
	Round int `json:"round,omitempty"`
	// Spread is set on a cell's median run (MedianRuns) when it stands for several: how
	// many, and their range. Never written by the sweep itself.
	Spread *Spread `json:"spread,omitempty"`
	// Source names the result set a run came from when runs of different code or hosts
	// are modelled together (a bench/scale.sh CSV's name, see CSVSource); "" for the
	// sweep's own results. Runs of different sources are never fitted together.
	Source string `json:"source,omitempty"`

	Generator  string   `json:"generator"`   // "autocannon" or "wrk"
	GenCommand []string `json:"gen_command"` // with LoadHosts: the first host's
	// LoadHosts: the hosts the generator ran on over ssh (SweepConfig.LoadHosts), the
	// connections split between them; none: here.
	LoadHosts     []string  `json:"load_hosts,omitempty"`
	ServerCommand []string  `json:"server_command"`
	Connections   int       `json:"connections"`
	Pipelining    int       `json:"pipelining"`
	GenThreads    int       `json:"gen_threads"`
	ServerCPUs    string    `json:"server_cpus"`       // cpu list the server was pinned to ("" unpinned)
	GenCPUs       string    `json:"gen_cpus"`          // cpu list the generator was pinned to
	SharedCores   bool      `json:"shared_cores"`      // server and generator share cores
	LinkBitsPerS  float64   `json:"link_bits_per_s"`   // shaped loopback rate; 0 unshaped
	Shaping       string    `json:"shaping,omitempty"` // the equivalent tc command
	Skipped       string    `json:"skipped,omitempty"` // why the run did not happen
	Started       time.Time `json:"started"`
	DurationS     float64   `json:"duration_s"` // measured wall time

	Requests      int64   `json:"requests"`
	Errors        int64   `json:"errors"`                   // transport errors (connect, read, write)
	ConnectErrors int64   `json:"connect_errors,omitempty"` // refused or failed connects
	Timeouts      int64   `json:"timeouts"`
	Non2xx        int64   `json:"non2xx"`
	ErrorText     string  `json:"error_text,omitempty"` // the generator's error messages, abridged
	RPS           float64 `json:"rps"`
	P50Ms         float64 `json:"p50_ms"`
	P99Ms         float64 `json:"p99_ms"`
	MaxMs         float64 `json:"max_ms"`
	// BytesPerS and BytesPerReq count the HTTP bytes the generator read (responses with
	// their headers), the part a real NIC's transmit side carries.
	BytesPerS   float64 `json:"bytes_per_s"`
	BytesPerReq float64 `json:"bytes_per_req"`
	// LoBytesPerS is loopback traffic (both directions, TCP/IP headers included; what a
	// shaped loopback's token bucket counts), from /proc/net/dev.
	LoBytesPerS float64 `json:"lo_bytes_per_s"`

	// Server CPU: the growth of the user and system time of the server's process tree
	// (procstat.Tree, exited children's included) over the measured window.
	ServerUserUsPerReq float64 `json:"server_user_us_per_req"`
	ServerSysUsPerReq  float64 `json:"server_sys_us_per_req"`
	ServerCPUUsPerReq  float64 `json:"server_cpu_us_per_req"`
	ServerBusyCores    float64 `json:"server_busy_cores"` // CPU seconds per second of the measured run
	ServerCores        int     `json:"server_cores"`      // cores the server may use
	ServerPeakRSS      int64   `json:"server_rss_bytes,omitempty"`

	// The generator's own CPU (its process's rusage over the measured run).
	GenBusyCores float64 `json:"gen_busy_cores"`
	GenCores     int     `json:"gen_cores"`                // cores the generator may use
	GenUsPerReq  float64 `json:"gen_us_per_req"`           // generator CPU per request
	GenMaxThread float64 `json:"gen_max_thread,omitempty"` // busiest worker thread, fraction of a core (autocannon)
	GenBoundFlag bool    `json:"gen_bound_flag,omitempty"` // the generator said it was bound
	// GenSaturated: the generator's own verdict (autocannon's, package genhealth) found a
	// second beyond it; the run is invalid and its verdict is generator. GenSaturation
	// names the signal and its value.
	GenSaturated  bool   `json:"gen_saturated,omitempty"`
	GenSaturation string `json:"gen_saturation,omitempty"`

	Host HostCPU `json:"host"`
	// HostCores is how many CPUs Host's shares are of (/proc/stat's cpuN lines); 0 in
	// results recorded before it was.
	HostCores int           `json:"host_cores,omitempty"`
	Workers   []WorkerShare `json:"workers,omitempty"`
	// Steering is how the cluster dealt connections to its workers (`supervisor status`:
	// "bpf-rr" or "hash"); "" for other modes.
	Steering string `json:"steering,omitempty"`
	// WritePath is the cluster's write path over the run, from its workers' counters
	// (writes.go); nil for workers that report none.
	WritePath *WritePath `json:"write_path,omitempty"`

	Verdict  string `json:"verdict,omitempty"`
	Evidence string `json:"evidence,omitempty"`
}

// Line is the one-line summary printed after each run.
func (r Run) Line() string {
	if r.Skipped != "" {
		return fmt.Sprintf("workload=%s n=%d mode=%s skipped=%q", r.Workload, r.N, r.Mode, r.Skipped)
	}
	link := ""
	if r.LinkBitsPerS > 0 {
		link = " link=" + FormatBits(r.LinkBitsPerS)
	}
	workers := ""
	if r.Purpose == PurposeImbalance {
		workers = fmt.Sprintf(" conns=%d", r.Connections)
		for _, w := range r.Workers {
			workers += fmt.Sprintf(" w%d=%dreq/%dconn", w.ID, w.Requests, w.Connections)
		}
		if r.Steering != "" {
			workers += " steering=" + r.Steering
		}
	}
	round := ""
	if r.Round > 0 {
		round = fmt.Sprintf(" round=%d", r.Round)
	}
	spread := ""
	if r.Spread != nil {
		spread = " " + r.Spread.Text()
	}
	return fmt.Sprintf("workload=%s n=%d mode=%s%s%s rps=%.0f%s p99=%.2fms cpu_us=%.1f%s verdict=%s evidence=%q",
		r.Workload, r.N, r.Mode, link, round, r.RPS, spread, r.P99Ms, r.ServerCPUUsPerReq, workers, r.Verdict, r.Evidence)
}

// FormatBits prints a link rate as tc writes it: 100mbit, 1gbit, 2.5gbit.
func FormatBits(bps float64) string {
	switch {
	case bps >= 1e9:
		return trimFloat(bps/1e9) + "gbit"
	case bps >= 1e6:
		return trimFloat(bps/1e6) + "mbit"
	case bps >= 1e3:
		return trimFloat(bps/1e3) + "kbit"
	}
	return trimFloat(bps) + "bit"
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// ParseBits reads a link rate: "100mbit", "1gbit", "10g", "25G", "1e9" (bits per second).
func ParseBits(s string) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "bit"), "bps")
	mult := 1.0
	switch {
	case strings.HasSuffix(t, "k"):
		mult, t = 1e3, strings.TrimSuffix(t, "k")
	case strings.HasSuffix(t, "m"):
		mult, t = 1e6, strings.TrimSuffix(t, "m")
	case strings.HasSuffix(t, "g"):
		mult, t = 1e9, strings.TrimSuffix(t, "g")
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("parse link rate %q: want e.g. 100mbit, 1gbit, 10g", s)
	}
	return v * mult, nil
}

// WriteJSON writes the sweep as indented JSON to path, atomically (a temporary file
// renamed), so a sweep cut short leaves the runs finished so far.
func (s *Sweep) WriteJSON(path string) error { return writeJSONFile(path, "sweep", s) }

// writeJSONFile writes v as indented JSON to path atomically: a temporary file in the same
// directory, renamed over path, so a reader (or a sweep cut short) never finds half of it.
// The file is readable by other users (a dashboard run by another), as results are.
func writeJSONFile(path, what string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", what, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", what, err)
	}
	_, werr := f.Write(append(b, '\n'))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(f.Name(), 0o644) // CreateTemp made it private
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", what, werr)
	}
	return nil
}

// AppendJSONLine appends one run (a Run, a FleetRun, a FleetLogRun) as a JSON line.
func AppendJSONLine[R any](w io.Writer, r R) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode run: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ResultFile is the name of the sweep file in a results directory.
const ResultFile = "ceiling.json"

// LoadRuns reads runs from result files: a ceiling.json (a Sweep), a JSON-lines file of
// runs, a bench/scale.sh CSV (a name ending in .csv, see ParseScaleCSV), or a directory
// searched for ceiling.json and .csv files. Machines are returned in the order of the
// files.
func LoadRuns(paths ...string) ([]Run, []Machine, error) {
	var runs []Run
	var machines []Machine
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, nil, fmt.Errorf("read results: %w", err)
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		var found []string
		err = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && (d.Name() == ResultFile || isCSV(path)) {
				found = append(found, path)
			}
			return err
		})
		if err != nil {
			return nil, nil, fmt.Errorf("read results: %w", err)
		}
		if len(found) == 0 {
			return nil, nil, fmt.Errorf("read results: no %s or .csv under %s", ResultFile, p)
		}
		sort.Strings(found)
		files = append(files, found...)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("read results: %w", err)
		}
		var rs []Run
		var m *Machine
		if isCSV(f) {
			rs, m, err = ParseScaleCSV(b, CSVSource(f))
		} else {
			rs, m, err = ParseResults(b)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read results %s: %w", f, err)
		}
		runs = append(runs, rs...)
		if m != nil {
			machines = append(machines, *m)
		}
	}
	return runs, machines, nil
}

func isCSV(path string) bool { return strings.EqualFold(filepath.Ext(path), ".csv") }

// ParseResults decodes a Sweep (one JSON object with "runs") or JSON lines of Runs.
func ParseResults(b []byte) ([]Run, *Machine, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, nil, nil
	}
	var probe struct {
		Runs json.RawMessage `json:"runs"`
	}
	if json.Unmarshal(b, &probe) == nil && probe.Runs != nil {
		var s Sweep
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, nil, fmt.Errorf("decode sweep: %w", err)
		}
		return s.Runs, &s.Machine, nil
	}
	var runs []Run
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		l := bytes.TrimSpace(sc.Bytes())
		if len(l) == 0 {
			continue
		}
		var r Run
		if err := json.Unmarshal(l, &r); err != nil {
			return nil, nil, fmt.Errorf("decode line %d: %w", line, err)
		}
		runs = append(runs, r)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("decode lines: %w", err)
	}
	return runs, nil, nil
}
