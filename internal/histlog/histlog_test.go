package histlog

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// values is a deterministic stream of latencies (µs) spread over six decades, so the
// histograms have many buckets at several bucket widths.
func values(n int) []int64 {
	r := rand.New(rand.NewPCG(1, 2))
	v := make([]int64, n)
	for i := range v {
		v[i] = 1 + int64(r.ExpFloat64()*float64(int64(1)<<r.IntN(20)))
	}
	return v
}

func TestMain(m *testing.M) {
	// Helper-process mode: record every odd or even value of the stream into per-second,
	// per-tag histograms and write them as an interval log (one generator process).
	if out := os.Getenv("HISTLOG_HELPER_OUT"); out != "" {
		part, _ := strconv.Atoi(os.Getenv("HISTLOG_HELPER_PART"))
		f, err := os.Create(out)
		if err == nil {
			err = Write(f, record(values(20000), part, 2, time.UnixMilli(1_796_000_000_000)))
			f.Close()
		}
		if err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// record puts the values i with i%parts == part into a log with two tags, request i
// falling into second i/1000.
func record(vs []int64, part, parts int, base time.Time) Log {
	hs := map[[2]int]*hdrhistogram.Histogram{}
	var keys [][2]int
	for i, v := range vs {
		if i%parts != part {
			continue
		}
		k := [2]int{i / 1000, i % 3 % 2}
		if hs[k] == nil {
			hs[k] = New()
			keys = append(keys, k)
		}
		hs[k].RecordValue(v)
	}
	lg := Log{Base: base}
	for _, k := range keys {
		lg.Intervals = append(lg.Intervals, Interval{Tag: []string{"feed", "post"}[k[1]],
			Start: time.Duration(k[0]) * time.Second, Length: time.Second, Hist: hs[k]})
	}
	return lg
}

// hist is iv's histogram, decoded.
func hist(t *testing.T, iv Interval) *hdrhistogram.Histogram {
	t.Helper()
	h, err := iv.Histogram()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func buckets(h *hdrhistogram.Histogram) []hdrhistogram.Bar {
	var out []hdrhistogram.Bar
	for _, b := range h.Distribution() {
		if b.Count != 0 {
			out = append(out, b)
		}
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	in := record(values(5000), 0, 1, time.UnixMilli(1_796_000_000_123))
	// The generator's verdict rides in a comment that HdrHistogram's own reader skips.
	in.Generator = "generator: SATURATED (hiccup p99 87.0 ms at 3.0 s): the run is invalid"
	var buf bytes.Buffer
	if err := Write(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !out.Base.Equal(in.Base) {
		t.Errorf("base: got %v, want %v", out.Base, in.Base)
	}
	if out.Generator != in.Generator {
		t.Errorf("generator: got %q, want %q", out.Generator, in.Generator)
	}
	if len(out.Intervals) != len(in.Intervals) {
		t.Fatalf("intervals: got %d, want %d", len(out.Intervals), len(in.Intervals))
	}
	for i, w := range in.Intervals {
		g := out.Intervals[i]
		if g.Tag != w.Tag || g.Start != w.Start || g.Length != w.Length {
			t.Errorf("interval %d: got %s %v+%v, want %s %v+%v", i, g.Tag, g.Start, g.Length, w.Tag, w.Start, w.Length)
		}
		if !reflect.DeepEqual(buckets(hist(t, g)), buckets(w.Hist)) {
			t.Errorf("interval %d: bucket counts differ", i)
		}
	}

	// HdrHistogram's own reader reads the same file: same tags, same bucket counts.
	lr := hdrhistogram.NewHistogramLogReader(bytes.NewReader(buf.Bytes()))
	for i := 0; ; i++ {
		h, err := lr.NextIntervalHistogram()
		if err != nil {
			t.Fatal(err)
		}
		if h == nil {
			if i != len(in.Intervals) {
				t.Errorf("library reader: %d intervals, want %d", i, len(in.Intervals))
			}
			break
		}
		if h.Tag() != in.Intervals[i].Tag || !reflect.DeepEqual(buckets(h), buckets(in.Intervals[i].Hist)) {
			t.Errorf("library reader, interval %d: tag %q or buckets differ", i, h.Tag())
		}
	}
}

// Two generator processes, each recording half of the same requests, merged equal one
// histogram of all of them, bucket by bucket: in total, per tag and per second.
func TestMergeTwoProcessesEqualsOne(t *testing.T) {
	dir := t.TempDir()
	var logs []Log
	for part := range 2 {
		out := filepath.Join(dir, "part"+strconv.Itoa(part)+".hlog")
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "HISTLOG_HELPER_OUT="+out, "HISTLOG_HELPER_PART="+strconv.Itoa(part))
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helper %d: %v: %s", part, err, b)
		}
		f, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		lg, err := Read(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, lg)
	}
	got, err := Merge(logs...)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Merge(record(values(20000), 0, 1, time.UnixMilli(1_796_000_000_000)))
	if err != nil {
		t.Fatal(err)
	}
	if got.All.TotalCount() != 20000 {
		t.Errorf("merged count: got %d, want 20000", got.All.TotalCount())
	}
	if !reflect.DeepEqual(buckets(got.All), buckets(want.All)) {
		t.Errorf("merged buckets differ from one histogram of the same requests")
	}
	if !reflect.DeepEqual(got.TagNames(), want.TagNames()) {
		t.Fatalf("tags: got %v, want %v", got.TagNames(), want.TagNames())
	}
	for _, tag := range want.TagNames() {
		if !reflect.DeepEqual(buckets(got.Tags[tag]), buckets(want.Tags[tag])) {
			t.Errorf("tag %s: buckets differ", tag)
		}
	}
	if !reflect.DeepEqual(got.Seconds, want.Seconds) {
		t.Errorf("seconds: got %+v, want %+v", got.Seconds, want.Seconds)
	}
	if len(got.Intervals) != len(want.Intervals) {
		t.Fatalf("merged intervals: got %d, want %d", len(got.Intervals), len(want.Intervals))
	}
	for i, w := range want.Intervals {
		g := got.Intervals[i]
		if g.Tag != w.Tag || g.Start != w.Start || !reflect.DeepEqual(buckets(hist(t, g)), buckets(hist(t, w))) {
			t.Errorf("interval %d (%s at %v): tag, start or buckets differ", i, w.Tag, w.Start)
		}
	}
	if got.All.ValueAtQuantile(99) != want.All.ValueAtQuantile(99) {
		t.Errorf("p99: got %d, want %d", got.All.ValueAtQuantile(99), want.All.ValueAtQuantile(99))
	}
}

// Logs whose base times differ (hosts that started a second apart) land in the seconds
// of the wall clock.
func TestMergeAlignsBaseTimes(t *testing.T) {
	base := time.UnixMilli(1_796_000_000_000)
	h := New()
	h.RecordValue(100)
	a := Log{Base: base, Intervals: []Interval{{Tag: "x", Length: time.Second, Hist: h}}}
	b := Log{Base: base.Add(2 * time.Second), Intervals: []Interval{{Tag: "x", Length: time.Second, Hist: h}}}
	m, err := Merge(b, a)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Base.Equal(base) || len(m.Seconds) != 3 || m.Seconds[0].Requests != 1 ||
		m.Seconds[1].Requests != 0 || m.Seconds[2].Requests != 1 {
		t.Errorf("got base %v, seconds %+v", m.Base, m.Seconds)
	}
}

func TestReadErrors(t *testing.T) {
	for name, in := range map[string]string{
		"too few fields": "1.0,2.0,HISTFAAA\n",
		"bad time":       "x,1,1,HISTFAAA\n",
		"bad histogram":  "0.000,1.000,0.1,bm90IGEgaGlzdG9ncmFt\n",
		"tag only":       "Tag=feed\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Read(bytes.NewReader([]byte(in))); err == nil {
				t.Errorf("no error for %q", in)
			}
		})
	}
}

func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	if err := Write(&buf, record(values(300), 0, 1, time.UnixMilli(1_796_000_000_000))); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte("#[BaseTime: 12.5 (seconds since epoch)]\nTag=a,0,1,1,HISTFAAAAA==\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		lg, err := Read(bytes.NewReader(b))
		if err != nil {
			return
		}
		// Whatever parses writes back and reads again to the same counts.
		var out bytes.Buffer
		if err := Write(&out, lg); err != nil {
			return // a tag with a space parses but cannot be written: Write refuses it
		}
		lg2, err := Read(&out)
		if err != nil {
			t.Fatalf("re-read: %v", err)
		}
		if len(lg2.Intervals) != len(lg.Intervals) {
			t.Fatalf("re-read %d intervals, want %d", len(lg2.Intervals), len(lg.Intervals))
		}
		for i := range lg.Intervals {
			if lg2.Intervals[i].Count() != lg.Intervals[i].Count() {
				t.Fatalf("interval %d: count changed", i)
			}
		}
	})
}
