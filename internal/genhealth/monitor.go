package genhealth

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onehost/onehost/internal/cpuquota"
)

// Config is a Monitor's. The zero value measures once a second with a 1 ms probe and the
// default thresholds.
type Config struct {
	// Interval is a window's length. Default 1 s.
	Interval time.Duration
	// Probe is the hiccup probe's period. Default 1 ms (jHiccup's).
	Probe time.Duration
	// Thresholds judge the windows (zero fields: the defaults).
	Thresholds Thresholds
	// JudgeConnect: the connect times recorded are the connect() call itself, the
	// generator's own work, and may trip the verdict; otherwise they are reported only.
	JudgeConnect bool
	// CPUs is what the process's CPU share is taken of. Default AvailableCPUs().
	CPUs float64
}

// Monitor measures one run's generator: it owns one goroutine, the hiccup probe, which also
// closes a window every Interval. Recorders it hands out take the send lags and connect
// times of the generator's own goroutines.
type Monitor struct {
	cfg   Config
	start time.Time

	mu       sync.Mutex // guards lags and connects (appended by SendLag and Connect)
	lags     []*Recorder
	connects []*Recorder
	hiccup   Recorder

	windows []Window // written by the probe goroutine; read after done
	stop    chan struct{}
	done    chan struct{}
}

// Start starts measuring.
func Start(cfg Config) *Monitor {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Probe <= 0 {
		cfg.Probe = time.Millisecond
	}
	if cfg.CPUs <= 0 {
		cfg.CPUs = AvailableCPUs()
	}
	cfg.Thresholds = cfg.Thresholds.WithDefaults()
	m := &Monitor{cfg: cfg, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go m.probe()
	return m
}

// SendLag returns a new Recorder of send lags (actual minus intended send time); each
// goroutine or thread that sends should have its own.
func (m *Monitor) SendLag() *Recorder {
	r := new(Recorder)
	m.mu.Lock()
	m.lags = append(m.lags, r)
	m.mu.Unlock()
	return r
}

// Connect returns a new Recorder of connect times.
func (m *Monitor) Connect() *Recorder {
	r := new(Recorder)
	m.mu.Lock()
	m.connects = append(m.connects, r)
	m.mu.Unlock()
	return r
}

// Stop ends the measurement and judges it. A last window shorter than half an Interval is
// dropped.
func (m *Monitor) Stop() Verdict {
	close(m.stop)
	<-m.done
	v := Judge(m.windows, m.cfg.Thresholds, m.cfg.JudgeConnect)
	v.CPUs = m.cfg.CPUs
	return v
}

// probe is the hiccup probe: it asks to wake every Probe and records how late it woke.
func (m *Monitor) probe() {
	defer close(m.done)
	t := time.NewTimer(m.cfg.Probe)
	defer t.Stop()
	last, lastCPU := m.start, processCPU()
	next := m.start.Add(m.cfg.Interval)
	for {
		asked := time.Now()
		t.Reset(m.cfg.Probe)
		select {
		case <-m.stop:
			if now := time.Now(); now.Sub(last) >= m.cfg.Interval/2 {
				m.window(now, last, lastCPU)
			}
			return
		case <-t.C:
		}
		now := time.Now()
		m.hiccup.Record(now.Sub(asked) - m.cfg.Probe)
		if !now.Before(next) {
			lastCPU = m.window(now, last, lastCPU)
			last = now
			next = now.Add(m.cfg.Interval)
		}
	}
}

// window closes the window from last to now and returns the process's CPU time at now.
func (m *Monitor) window(now, last time.Time, lastCPU time.Duration) time.Duration {
	cpu := processCPU()
	w := Window{T: round3(now.Sub(m.start).Seconds())}
	if secs := now.Sub(last).Seconds(); secs > 0 && m.cfg.CPUs > 0 {
		w.CPUShare = round3((cpu - lastCPU).Seconds() / secs / m.cfg.CPUs)
	}
	var sum [nBuckets]int64
	w.HiccupMax = msOf(m.hiccup.drain(&sum))
	_, w.HiccupP99 = p99(&sum, w.HiccupMax)

	m.mu.Lock()
	lags, connects := m.lags, m.connects
	m.mu.Unlock()
	t := m.cfg.Thresholds
	w.Sends, w.SendsLate, w.SendLagP99, w.SendLagMax = drainAll(lags, t.SendLagP99)
	w.Connects, w.ConnectsLate, w.ConnectP99, _ = drainAll(connects, t.ConnectP99)
	m.windows = append(m.windows, w)
	return cpu
}

// drainAll adds up and clears recorders: how many values, how many at or past late (to
// a bucket's precision), their p99 and max in ms.
func drainAll(rs []*Recorder, late time.Duration) (n, nLate int64, p99ms, maxMs float64) {
	var sum [nBuckets]int64
	for _, r := range rs {
		maxMs = max(maxMs, msOf(r.drain(&sum)))
	}
	n, p99ms = p99(&sum, maxMs)
	lateUs := int64(late / time.Microsecond)
	for i, c := range sum {
		if bucketTop(i) >= lateUs {
			nLate += c
		}
	}
	return n, nLate, p99ms, maxMs
}

// Recorder collects durations from one owner (an event loop, a shard of users). Its counts
// are atomic, so that the Monitor reads and clears them once a window while the owner
// records without a lock; owners on different threads take different Recorders, so that
// they do not share cache lines. A nil Recorder records nothing.
type Recorder struct {
	counts [nBuckets]atomic.Int64
	maxUs  atomic.Int64
}

// Record adds one duration (negative counts as 0).
func (r *Recorder) Record(d time.Duration) {
	if r == nil {
		return
	}
	us := max(int64(d/time.Microsecond), 0)
	r.counts[bucketOf(us)].Add(1)
	for {
		m := r.maxUs.Load()
		if us <= m || r.maxUs.CompareAndSwap(m, us) {
			return
		}
	}
}

// drain adds the counts to sum, clears them and returns the maximum in µs. A value
// recorded while drain runs lands in this window or the next, never in both.
func (r *Recorder) drain(sum *[nBuckets]int64) int64 {
	for i := range r.counts {
		if r.counts[i].Load() != 0 {
			sum[i] += r.counts[i].Swap(0)
		}
	}
	return r.maxUs.Swap(0)
}

// Buckets: values below 16 µs exactly, then 8 buckets per power of two (each at most
// 12.5 % wide), up to 2^36 µs (19 hours).
const nBuckets = 16 + 33*8

func bucketOf(us int64) int {
	if us < 16 {
		return int(us)
	}
	e := bits.Len64(uint64(us)) - 4 // us>>e is in [8, 16)
	return min(16+(e-1)*8+int(us>>e)-8, nBuckets-1)
}

// bucketTop is the largest value, in µs, that falls in bucket i.
func bucketTop(i int) int64 {
	if i < 16 {
		return int64(i)
	}
	e, m := (i-16)/8+1, int64((i-16)%8+8)
	return (m+1)<<e - 1
}

// p99 returns the count and the 99th percentile in ms (a bucket's top, at most maxMs).
func p99(sum *[nBuckets]int64, maxMs float64) (int64, float64) {
	var n int64
	for _, c := range sum {
		n += c
	}
	if n == 0 {
		return 0, 0
	}
	rank := (n*99 + 99) / 100 // ceil(0.99 n)
	var seen int64
	for i, c := range sum {
		seen += c
		if seen >= rank {
			return n, min(msOf(bucketTop(i)), maxMs)
		}
	}
	return n, maxMs
}

func msOf(us int64) float64 { return roundMs(float64(us) / 1000) }

func roundMs(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

// AvailableCPUs is how many CPUs this process may use: the fewest of its affinity mask,
// GOMAXPROCS and its cgroup's CPU quota.
func AvailableCPUs() float64 {
	n := float64(runtime.GOMAXPROCS(0))
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err == nil && set.Count() > 0 {
		n = min(n, float64(set.Count()))
	}
	if q := cpuquota.Limit(cpuquota.Config{}); q > 0 {
		n = min(n, q)
	}
	return n
}

// processCPU is the process's user and system time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
