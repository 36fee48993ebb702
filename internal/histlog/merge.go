package histlog

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Merged is the sum of several logs, added bucket by bucket: one histogram per tag, one
// of everything, and one interval per tag per second.
type Merged struct {
	Base time.Time // the earliest log's base: second 0
	Tags map[string]*hdrhistogram.Histogram
	All  *hdrhistogram.Histogram // every interval of every tag
	// Seconds summarizes each second from 0 to the last with an interval (all tags).
	Seconds []Second
	// Intervals are the merged intervals, one per tag per second (encoded), in order of
	// second then tag: what `autocannon merge -o` writes.
	Intervals []Interval
	Dropped   int64 // values that fell outside All's range (none when logs come from our generators)
}

// Second is one second of a merged log, all tags together.
type Second struct {
	Start    time.Duration // since Merged.Base
	Requests int64
	P50, P99 int64 // µs
	Max      int64 // µs
}

// Merge adds the logs' intervals bucket by bucket. Logs with different base times are
// aligned on the wall clock: the earliest base is second 0, and an interval goes to the
// second its start (base + StartTimestamp) is nearest, so that hosts which started
// together, their clocks and base times apart by under half a second, add into the same
// seconds. Only one second's histograms are decoded at a time.
func Merge(logs ...Log) (Merged, error) {
	m := Merged{Tags: map[string]*hdrhistogram.Histogram{}, All: New()}
	for i, lg := range logs {
		if i == 0 || lg.Base.Before(m.Base) {
			m.Base = lg.Base
		}
	}
	type item struct {
		sec int
		end time.Duration // the interval's end, since m.Base
		iv  Interval
	}
	var items []item
	for _, lg := range logs {
		off := lg.Base.Sub(m.Base)
		for _, iv := range lg.Intervals {
			sec := int(((off + iv.Start) + time.Second/2) / time.Second)
			items = append(items, item{sec, off + iv.Start + iv.Length, iv})
		}
	}
	slices.SortStableFunc(items, func(a, b item) int { return cmp.Compare(a.sec, b.sec) })

	perTag := map[string]*hdrhistogram.Histogram{} // this second's, reset for the next
	// Each merged interval is as long as the longest it holds, or reaches as far as the
	// latest end among them (sub-second intervals from several logs).
	length := map[string]time.Duration{}
	second := New()
	for i := 0; i < len(items); {
		sec := items[i].sec
		for len(m.Seconds) < sec {
			m.Seconds = append(m.Seconds, Second{Start: time.Duration(len(m.Seconds)) * time.Second})
		}
		clear(length)
		second.Reset()
		for ; i < len(items) && items[i].sec == sec; i++ {
			iv := items[i].iv
			h, err := iv.Histogram()
			if err != nil {
				return m, fmt.Errorf("merge interval %q at %v: %w", iv.Tag, iv.Start, err)
			}
			t := perTag[iv.Tag]
			if t == nil {
				t = New()
				perTag[iv.Tag] = t
				m.Tags[iv.Tag] = New()
			}
			if _, ok := length[iv.Tag]; !ok {
				t.Reset()
			}
			length[iv.Tag] = max(length[iv.Tag], iv.Length, items[i].end-time.Duration(sec)*time.Second)
			m.Dropped += t.Merge(h)
			m.Tags[iv.Tag].Merge(h)
			m.All.Merge(h)
			second.Merge(h)
		}
		start := time.Duration(sec) * time.Second
		for _, tag := range slices.Sorted(maps.Keys(length)) {
			iv, err := Encode(tag, start, length[tag], perTag[tag])
			if err != nil {
				return m, err
			}
			m.Intervals = append(m.Intervals, iv)
		}
		m.Seconds = append(m.Seconds, Second{Start: start, Requests: second.TotalCount(),
			P50: second.ValueAtPercentile(50), P99: second.ValueAtPercentile(99), Max: second.Max()})
	}
	return m, nil
}

// TagNames returns m's tags in order.
func (m Merged) TagNames() []string { return slices.Sorted(maps.Keys(m.Tags)) }

// Accumulator adds histograms into one interval per (tag, interval of Length) for a
// generator: its recorders hand it their interval histograms once per interval, and it
// keeps only the newest two intervals as full histograms, packing older ones into sparse
// ones (a late histogram for a packed interval is still added: the interval is unpacked
// again), and encodes them only in Intervals, after the run. Encoding as it went
// (hdrhistogram-go makes a new zlib writer of ~600 KB per histogram) made ~2.5 MB of
// garbage a second, a garbage collection every few seconds that stopped a one-core
// generator's event loop for tens of milliseconds. Not safe for concurrent use: one
// goroutine owns it, or its caller locks.
type Accumulator struct {
	// Length is the intervals' length. Default 1 s.
	Length time.Duration

	live    map[accKey]*hdrhistogram.Histogram
	sealed  map[accKey]*hdrhistogram.PackedHistogram
	spare   []*hdrhistogram.Histogram
	newest  int
	dropped int64
	err     error
}

type accKey struct {
	tag string
	n   int
}

// Add adds h to interval n (starting at n·Length) of tag. h is only read.
func (a *Accumulator) Add(tag string, n int, h *hdrhistogram.Histogram) {
	if h.TotalCount() == 0 {
		return
	}
	if a.live == nil {
		a.live, a.sealed = map[accKey]*hdrhistogram.Histogram{}, map[accKey]*hdrhistogram.PackedHistogram{}
	}
	k := accKey{tag, n}
	t := a.live[k]
	if t == nil {
		t = a.get()
		if p, ok := a.sealed[k]; ok {
			p.MergeInto(t) // the same geometry: nothing drops
			delete(a.sealed, k)
		}
		a.live[k] = t
	}
	a.dropped += t.Merge(h)
	if n > a.newest {
		a.newest = n
		a.seal(n - 2)
	}
}

func (a *Accumulator) get() *hdrhistogram.Histogram {
	if n := len(a.spare); n > 0 {
		h := a.spare[n-1]
		a.spare = a.spare[:n-1]
		return h
	}
	return New()
}

func (a *Accumulator) length() time.Duration {
	if a.Length <= 0 {
		return time.Second
	}
	return a.Length
}

// seal packs the live intervals up to n.
func (a *Accumulator) seal(n int) {
	for k, h := range a.live {
		if k.n > n {
			continue
		}
		p := hdrhistogram.NewPacked(h.LowestTrackableValue(), h.HighestTrackableValue(), int(h.SignificantFigures()))
		a.dropped += p.MergeFrom(h)
		p.Compact()
		a.sealed[k] = p
		delete(a.live, k)
		h.Reset()
		a.spare = append(a.spare, h)
	}
}

// Intervals encodes what is left and returns every interval, in order of start then tag,
// each Length long except those that end after end (the run's end, since the first
// interval's start), which are cut there.
func (a *Accumulator) Intervals(end time.Duration) ([]Interval, error) {
	if a.live == nil {
		return nil, a.err
	}
	a.seal(a.newest)
	ivs := make([]Interval, 0, len(a.sealed))
	for k, p := range a.sealed {
		iv, err := Encode(k.tag, time.Duration(k.n)*a.length(), a.length(), p)
		if err != nil {
			a.err = cmp.Or(a.err, err)
			continue
		}
		ivs = append(ivs, iv)
	}
	slices.SortFunc(ivs, func(x, y Interval) int {
		return cmp.Or(cmp.Compare(x.Start, y.Start), cmp.Compare(x.Tag, y.Tag))
	})
	for i := range ivs {
		if e := ivs[i].Start + ivs[i].Length; e > end && end > ivs[i].Start {
			ivs[i].Length = end - ivs[i].Start
		}
	}
	return ivs, a.err
}

// Dropped is the number of values that fell outside the intervals' range.
func (a *Accumulator) Dropped() int64 { return a.dropped }
