// Package histlog writes and reads latency histograms in HdrHistogram's interval-log
// format (the form wrk2, jHiccup and the HdrHistogram tools read) and merges them bucket
// by bucket, so that runs from several generator processes or hosts add up to exactly
// the histogram one process would have recorded: percentiles are never averaged.
//
// A log is
//
//	#[Histogram log format version 1.3]
//	#[StartTime: 1796212345.000 (seconds since epoch), 2026-12-02T11:32:25Z]
//	#[BaseTime: 1796212345.000 (seconds since epoch)]
//	"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"
//	Tag=feed,0.000,1.000,12.345,HISTFAAA...
//
// one line per (tag, interval): start seconds since BaseTime, length in seconds, the
// interval's maximum in milliseconds and the histogram in HdrHistogram's V2 compressed
// base64 encoding. Values are recorded in microseconds, as internal/loadgen and
// internal/journey record them, one interval per tag per second (an Accumulator adds
// their recorders' interval histograms up).
//
// histlog.go reads and writes the format; merge.go holds Merge (logs added up, seconds
// aligned on the wall clock) and Accumulator.
package histlog

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Interval is one histogram of one tag (a route, or "all") over one time window.
//
// The histogram is held decoded (Hist) or encoded (Encoded and Max): a generator's
// intervals and a log read back are kept encoded, a few hundred bytes to a few KB each,
// because a decoded histogram of our range is ~140–180 KB and a log has one per tag per
// second. Histogram returns it decoded either way.
type Interval struct {
	Tag    string        `json:"tag"`
	Start  time.Duration `json:"start_ns"` // since the log's base time
	Length time.Duration `json:"length_ns"`
	// Hist is the histogram, values in microseconds; nil when only Encoded is set.
	Hist *hdrhistogram.Histogram `json:"-"`
	// Encoded is the histogram in HdrHistogram's V2 compressed base64 form (the log's own
	// column), and Max its largest value (µs); used when Hist is nil.
	Encoded string `json:"histogram"`
	Max     int64  `json:"max_us"`
}

// Histogram returns iv's histogram, decoding it if it is held encoded.
func (iv Interval) Histogram() (*hdrhistogram.Histogram, error) {
	if iv.Hist != nil {
		return iv.Hist, nil
	}
	return decode(iv.Encoded)
}

// Count is the number of values in iv (decoding it if it is held encoded; 0 if it does
// not decode).
func (iv Interval) Count() int64 {
	h, err := iv.Histogram()
	if err != nil {
		return 0
	}
	return h.TotalCount()
}

// Encodable is what Encode takes: a dense *hdrhistogram.Histogram or a sparse
// *hdrhistogram.PackedHistogram, which encode to the same V2 format.
type Encodable interface {
	EncodeV2() ([]byte, error)
	Max() int64
}

// Encode returns an interval of h held encoded, so that h can be reused.
func Encode(tag string, start, length time.Duration, h Encodable) (Interval, error) {
	enc, err := h.EncodeV2()
	if err != nil {
		return Interval{}, fmt.Errorf("encode histogram %q: %w", tag, err)
	}
	return Interval{Tag: tag, Start: start, Length: length, Encoded: string(enc), Max: h.Max()}, nil
}

// Log is a parsed interval log.
type Log struct {
	Base      time.Time // the wall-clock time interval starts count from
	Intervals []Interval
	// Generator is the verdict on the generator that recorded the log (package genhealth's
	// one-line form), kept in a "#[Generator: …]" comment that other tools skip; "" none.
	Generator string
}

// Write writes lg in the interval-log format.
func Write(w io.Writer, lg Log) error {
	bw := bufio.NewWriter(w)
	base := float64(lg.Base.UnixMilli()) / 1000
	fmt.Fprintf(bw, "#[Histogram log format version %s]\n", hdrhistogram.HISTOGRAM_LOG_FORMAT_VERSION)
	fmt.Fprintf(bw, "#[StartTime: %.3f (seconds since epoch), %s]\n", base, lg.Base.UTC().Format(time.RFC3339))
	fmt.Fprintf(bw, "#[BaseTime: %.3f (seconds since epoch)]\n", base)
	if lg.Generator != "" {
		if strings.ContainsAny(lg.Generator, "]\r\n") {
			return fmt.Errorf("write interval log: generator verdict %q has a ] or a line break", lg.Generator)
		}
		fmt.Fprintf(bw, "#[Generator: %s]\n", lg.Generator)
	}
	bw.WriteString(`"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"` + "\n")
	for _, iv := range lg.Intervals {
		if strings.ContainsAny(iv.Tag, ", \r\n") {
			return fmt.Errorf("write interval: tag %q has a comma, space or line break", iv.Tag)
		}
		if iv.Hist != nil {
			e, err := Encode(iv.Tag, iv.Start, iv.Length, iv.Hist)
			if err != nil {
				return err
			}
			iv = e
		}
		if iv.Tag != "" {
			bw.WriteString("Tag=" + iv.Tag + ",")
		}
		fmt.Fprintf(bw, "%.3f,%.3f,%.3f,", iv.Start.Seconds(), iv.Length.Seconds(), float64(iv.Max)/1000)
		bw.WriteString(iv.Encoded)
		bw.WriteByte('\n')
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write interval log: %w", err)
	}
	return nil
}

// Read parses an interval log, keeping its histograms encoded (Interval.Histogram
// decodes one). Comment lines other than StartTime and BaseTime, the
// legend and blank lines are skipped; a malformed interval line is an error naming its
// line number.
func Read(r io.Reader) (Log, error) {
	var lg Log
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var start, base float64
	var haveBase bool
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		switch {
		case line == "", strings.HasPrefix(line, `"StartTimestamp"`):
			continue
		case strings.HasPrefix(line, "#[StartTime: "):
			v, err := leadingFloat(line[len("#[StartTime: "):])
			if err != nil {
				return lg, fmt.Errorf("read line %d: start time: %w", n, err)
			}
			start = v
			continue
		case strings.HasPrefix(line, "#[BaseTime: "):
			v, err := leadingFloat(line[len("#[BaseTime: "):])
			if err != nil {
				return lg, fmt.Errorf("read line %d: base time: %w", n, err)
			}
			base, haveBase = v, true
			continue
		case strings.HasPrefix(line, "#[Generator: ") && strings.HasSuffix(line, "]"):
			lg.Generator = line[len("#[Generator: ") : len(line)-1]
			continue
		case strings.HasPrefix(line, "#"):
			continue
		}
		iv, err := parseInterval(line)
		if err != nil {
			return lg, fmt.Errorf("read line %d: %w", n, err)
		}
		lg.Intervals = append(lg.Intervals, iv)
	}
	if err := sc.Err(); err != nil {
		return lg, fmt.Errorf("read interval log: %w", err)
	}
	if !haveBase {
		base = start // HdrHistogram's tools treat a missing BaseTime as the StartTime
	}
	lg.Base = time.UnixMilli(int64(base * 1000))
	return lg, nil
}

func leadingFloat(s string) (float64, error) {
	end := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if end >= 0 {
		s = s[:end]
	}
	return strconv.ParseFloat(s, 64)
}

func parseInterval(line string) (Interval, error) {
	var iv Interval
	if rest, ok := strings.CutPrefix(line, "Tag="); ok {
		tag, after, found := strings.Cut(rest, ",")
		if !found {
			return iv, fmt.Errorf("parse interval: tag with no fields")
		}
		iv.Tag, line = tag, after
	}
	f := strings.SplitN(line, ",", 4)
	if len(f) != 4 {
		return iv, fmt.Errorf("parse interval: %d fields, want 4", len(f))
	}
	var secs [3]float64
	for i := range secs {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil || v < 0 || v > 1e12 {
			return iv, fmt.Errorf("parse interval: field %d %q is not a time", i+1, f[i])
		}
		secs[i] = v
	}
	iv.Start = time.Duration(secs[0] * float64(time.Second))
	iv.Length = time.Duration(secs[1] * float64(time.Second))
	// Decoded once to check it, then kept encoded (see Interval).
	h, err := decode(f[3])
	if err != nil {
		return iv, err
	}
	iv.Encoded, iv.Max = f[3], h.Max()
	return iv, nil
}

// decode decodes one histogram, turning a panic inside the library on hostile input into
// an error (the fuzz target feeds it arbitrary bytes).
func decode(s string) (h *hdrhistogram.Histogram, err error) {
	defer func() {
		if r := recover(); r != nil {
			h, err = nil, fmt.Errorf("decode histogram: %v", r)
		}
	}()
	h, err = hdrhistogram.Decode([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("decode histogram: %w", err)
	}
	return h, nil
}

// New returns an empty histogram with the range and precision the generators record in:
// 1 µs to one hour, 3 significant digits.
func New() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)
}
