package main

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/onehost/onehost/internal/genhealth"
	"github.com/onehost/onehost/internal/loadgen"
	"github.com/onehost/onehost/internal/procstat"
	"github.com/onehost/onehost/internal/srcaddr"
)

// percentiles are autocannon's, in its order; JSON keys are "p" + the number with "_"
// for the point.
var percentiles = []float64{0.001, 0.01, 0.1, 1, 2.5, 10, 25, 50, 75, 90, 97.5, 99, 99.9, 99.99, 99.999}

// Indexes into dist.P of the percentiles the tables show.
const (
	p1, p2_5, p50, p97_5, p99 = 3, 4, 7, 10, 11
)

// report is autocannon's JSON result, field for field, plus this generator's extensions
// (mode, rate, per_second, generator, server).
type report struct {
	Title           string               `json:"title,omitempty"`
	URL             string               `json:"url"`
	Connections     int                  `json:"connections"`
	SampleInt       int64                `json:"sampleInt"`
	Pipelining      int                  `json:"pipelining"`
	Workers         int                  `json:"workers"`
	Duration        float64              `json:"duration"`
	Samples         int                  `json:"samples"`
	Start           string               `json:"start"`
	Finish          string               `json:"finish"`
	Errors          int64                `json:"errors"`
	Timeouts        int64                `json:"timeouts"`
	Mismatches      int64                `json:"mismatches"`
	Non2xx          int64                `json:"non2xx"`
	Resets          int64                `json:"resets"`
	C1xx            int64                `json:"1xx"`
	C2xx            int64                `json:"2xx"`
	C3xx            int64                `json:"3xx"`
	C4xx            int64                `json:"4xx"`
	C5xx            int64                `json:"5xx"`
	StatusCodeStats map[string]codeCount `json:"statusCodeStats"`
	Latency         dist                 `json:"latency"`
	Requests        dist                 `json:"requests"`
	Throughput      dist                 `json:"throughput"`

	Mode string  `json:"mode"` // "closed" or "rate"
	Rate float64 `json:"rate"` // the open-loop target, req/s; 0 in closed loop
	// How the connections were spread over source addresses, the pace of their first
	// connects (per second; 0: all at once), and the connects after a connection's first.
	Spread      srcaddr.Report   `json:"spread"`
	ConnectRate float64          `json:"connect_rate"`
	Reconnects  int64            `json:"reconnects"`
	PerSecond   []loadgen.Sample `json:"per_second"`
	// WireBytesPerReq is the response bytes read per response, heads and bodies as they
	// came (compressed, where the server compressed): what a link carries per request.
	WireBytesPerReq float64 `json:"wire_bytes_per_req"`
	// CheckDecode: --check-decode was given, and BadBodies are the bodies that did not
	// decode as their Content-Encoding said (also counted in Errors).
	CheckDecode bool            `json:"check_decode"`
	BadBodies   int64           `json:"bad_bodies"`
	Generator   generatorReport `json:"generator"`
	Server      *serverReport   `json:"server,omitempty"`

	amount int64 // for the banner only
}

type codeCount struct {
	Count int64 `json:"count"`
}

// generatorReport is the load generator's own CPU use.
type generatorReport struct {
	loadgen.GeneratorCPU
	// CPUPerReq is the generator's CPU (user + system) per response, in microseconds.
	CPUPerReq float64 `json:"cpu_us_per_req"`
	// AvgWorkerCPU is the process's average CPU over the run, divided by Workers.
	AvgWorkerCPU float64 `json:"avg_worker_cpu"`
	// Verdict says whether the generator kept up in every second (package genhealth).
	Verdict genhealth.Verdict `json:"verdict"`
}

// serverReport is what --server-pid sampled: the server's process tree and the host.
type serverReport struct {
	PID int `json:"pid"`
	// CPU per response, in microseconds.
	UserPerReq  float64 `json:"cpu_user_us_per_req"`
	SysPerReq   float64 `json:"cpu_sys_us_per_req"`
	TotalPerReq float64 `json:"cpu_us_per_req"`
	UserSec     float64 `json:"cpu_user_s"`
	SysSec      float64 `json:"cpu_sys_s"`
	PeakRSS     int64   `json:"peak_rss_bytes"`
	PeakConns   int     `json:"peak_connections"`
	// BytesPerReq is the bytes the client read per response, heads included.
	BytesPerReq float64           `json:"bytes_per_req"`
	NetRx       int64             `json:"net_rx_bytes"`
	NetTx       int64             `json:"net_tx_bytes"`
	Host        procstat.HostCPU  `json:"host"`
	Samples     []procstat.Sample `json:"samples"`
}

// dist is one of autocannon's distributions (latency in ms, requests and bytes per
// sample). Total, Sent and TotalCount appear only where autocannon has them.
type dist struct {
	Average, Mean, Stddev, Min, Max float64
	Total                           *int64
	P                               [15]float64 // at percentiles
	Sent                            *int64
	TotalCount                      *int64
}

// MarshalJSON writes the fields in autocannon's order.
func (d dist) MarshalJSON() ([]byte, error) {
	b := []byte(`{"average":`)
	b = appendNum(b, d.Average)
	b = append(b, `,"mean":`...)
	b = appendNum(b, d.Mean)
	b = append(b, `,"stddev":`...)
	b = appendNum(b, d.Stddev)
	b = append(b, `,"min":`...)
	b = appendNum(b, d.Min)
	b = append(b, `,"max":`...)
	b = appendNum(b, d.Max)
	if d.Total != nil {
		b = append(b, `,"total":`...)
		b = strconv.AppendInt(b, *d.Total, 10)
	}
	for i, p := range percentiles {
		b = append(b, `,"`...)
		b = append(b, percentileKey(p)...)
		b = append(b, `":`...)
		b = appendNum(b, d.P[i])
	}
	if d.Sent != nil {
		b = append(b, `,"sent":`...)
		b = strconv.AppendInt(b, *d.Sent, 10)
	}
	if d.TotalCount != nil {
		b = append(b, `,"totalCount":`...)
		b = strconv.AppendInt(b, *d.TotalCount, 10)
	}
	return append(b, '}'), nil
}

func percentileKey(p float64) string {
	s := []byte("p" + strconv.FormatFloat(p, 'f', -1, 64))
	for i, c := range s {
		if c == '.' {
			s[i] = '_'
		}
	}
	return string(s)
}

// appendNum writes a number as JavaScript would: no exponent for ordinary values, no
// trailing zeros.
func appendNum(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

// latencyDist summarizes a histogram of microseconds in milliseconds, at the histogram's
// microsecond resolution.
func latencyDist(h *hdrhistogram.Histogram) dist {
	n := h.TotalCount()
	d := dist{TotalCount: &n}
	if n == 0 {
		return d
	}
	d.Mean = roundTo(h.Mean()/1000, 3)
	d.Average = d.Mean
	d.Stddev = roundTo(h.StdDev()/1000, 3)
	d.Min = float64(h.Min()) / 1000
	d.Max = float64(h.Max()) / 1000
	for i, p := range percentiles {
		d.P[i] = float64(h.ValueAtQuantile(p)) / 1000
	}
	return d
}

// countDist summarizes per-sample counts as autocannon does: mean and stddev rounded up
// to two decimals, percentiles by nearest rank (HdrHistogram's rule).
func countDist(values []int64, total int64) dist {
	d := dist{Total: &total}
	if len(values) == 0 {
		return d
	}
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	var sum float64
	for _, v := range sorted {
		sum += float64(v)
	}
	mean := sum / float64(len(sorted))
	var sq float64
	for _, v := range sorted {
		sq += (float64(v) - mean) * (float64(v) - mean)
	}
	d.Mean = math.Ceil(mean*100) / 100
	d.Average = d.Mean
	d.Stddev = math.Ceil(math.Sqrt(sq/float64(len(sorted)))*100) / 100
	d.Min, d.Max = float64(sorted[0]), float64(sorted[len(sorted)-1])
	for i, p := range percentiles {
		rank := int(p/100*float64(len(sorted)) + 0.5)
		rank = min(max(rank, 1), len(sorted))
		d.P[i] = float64(sorted[rank-1])
	}
	return d
}

func roundTo(v float64, decimals int) float64 {
	f := math.Pow(10, float64(decimals))
	return math.Round(v*f) / f
}

// newReport turns a run's result into autocannon's report.
func newReport(o options, res *loadgen.Result, srv *procstat.Summary) *report {
	r := &report{
		Title:       o.title,
		URL:         o.url,
		Connections: o.connections,
		SampleInt:   o.sampleInt.Milliseconds(),
		Pipelining:  o.pipelining,
		Workers:     o.workers,
		Duration:    math.Round(float64(res.Duration().Milliseconds())/10) / 100,
		Samples:     len(res.Samples),
		Start:       res.Start.UTC().Format(jsTime),
		Finish:      res.Finish.UTC().Format(jsTime),
		Errors:      res.Errors,
		Timeouts:    res.Timeouts,
		CheckDecode: o.checkDecode,
		BadBodies:   res.BadBodies,
		Mode:        res.Mode,
		Rate:        o.rate(),
		Spread:      res.Spread.Report(),
		ConnectRate: res.ConnectRate,
		Reconnects:  res.Reconnects,
		PerSecond:   res.Samples,
		Latency:     latencyDist(res.Latency),
		amount:      o.amount,

		StatusCodeStats: map[string]codeCount{},
	}
	if r.PerSecond == nil {
		r.PerSecond = []loadgen.Sample{}
	}
	for code, n := range res.StatusCodes {
		r.StatusCodeStats[strconv.Itoa(code)] = codeCount{n}
		switch code / 100 {
		case 1:
			r.C1xx += n
		case 2:
			r.C2xx += n
		case 3:
			r.C3xx += n
		case 4:
			r.C4xx += n
		case 5:
			r.C5xx += n
		}
	}
	r.Non2xx = r.C1xx + r.C3xx + r.C4xx + r.C5xx
	reqs := make([]int64, len(res.Samples))
	bytes := make([]int64, len(res.Samples))
	for i, s := range res.Samples {
		reqs[i], bytes[i] = s.Requests, s.Bytes
	}
	r.Requests = countDist(reqs, res.Responses)
	sent := res.Sent
	r.Requests.Sent = &sent
	r.Throughput = countDist(bytes, res.Bytes)
	if res.Responses > 0 {
		r.WireBytesPerReq = roundTo(float64(res.Bytes)/float64(res.Responses), 1)
	}

	g := res.Generator
	r.Generator = generatorReport{GeneratorCPU: g, Verdict: res.Health}
	if res.Responses > 0 {
		r.Generator.CPUPerReq = roundTo((g.UserSec+g.SysSec)*1e6/float64(res.Responses), 3)
	}
	if secs := res.Duration().Seconds(); secs > 0 && g.Workers > 0 {
		r.Generator.AvgWorkerCPU = roundTo((g.UserSec+g.SysSec)/secs/float64(g.Workers), 3)
	}
	r.Generator.MaxWorkerCPU = roundTo(g.MaxWorkerCPU, 3)
	r.Generator.UserSec = roundTo(g.UserSec, 3)
	r.Generator.SysSec = roundTo(g.SysSec, 3)

	if srv != nil {
		s := &serverReport{
			PID:       o.serverPID,
			UserSec:   roundTo(srv.UserSec, 3),
			SysSec:    roundTo(srv.SysSec, 3),
			PeakRSS:   srv.PeakRSS,
			PeakConns: srv.PeakConns,
			NetRx:     srv.NetRx,
			NetTx:     srv.NetTx,
			Host:      srv.Host,
			Samples:   srv.Samples,
		}
		if s.Samples == nil {
			s.Samples = []procstat.Sample{}
		}
		if n := float64(res.Responses); n > 0 {
			s.UserPerReq = roundTo(srv.UserSec*1e6/n, 3)
			s.SysPerReq = roundTo(srv.SysSec*1e6/n, 3)
			s.TotalPerReq = roundTo((srv.UserSec+srv.SysSec)*1e6/n, 3)
			s.BytesPerReq = roundTo(float64(res.Bytes)/n, 1)
		}
		r.Server = s
	}
	return r
}

// jsTime is JavaScript's Date.toJSON format.
const jsTime = "2006-01-02T15:04:05.000Z"

// seconds is how autocannon prints a duration: two decimals at most.
func seconds(d time.Duration) string {
	return strconv.FormatFloat(math.Round(float64(d.Milliseconds())/10)/100, 'f', -1, 64)
}
