package contentcoding

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// DefaultMinSize is the smallest body a Compressor encodes. Below it the bytes saved do
// not pay for the CPU and the framing (a gzip member alone is 18 bytes): measured with
// BenchmarkCompressSizes, a 512-byte JSON body saves about 300 bytes for 8-15 µs of one
// core, a 32 KB one 30,000 bytes for 60-120 µs.
const DefaultMinSize = 1024

// Config configures a Compressor. The zero value compresses nothing.
type Config struct {
	// Codings the server offers, in its order of preference, each with its level
	// (Levels[i]; 0 or a missing entry: the coding's per-request default, fast).
	Codings []Coding
	Levels  []int
	// MinSize: bodies shorter are sent as they are. 0: DefaultMinSize.
	MinSize int
}

// The per-request defaults are the levels the usual peers use, where the cap below allows
// them, so that a comparison at "the same coding" is one at the same effort: zlib's
// default 6 (nginx's gzip_comp_level is 1, @fastify/compress uses zlib's), zstd's default
// (klauspost's SpeedDefault, about zstd -3); for brotli @fastify/compress's quality 4 is
// past the cap, so brotli's default is its cap, 1.
var defaultLevel = [numCodings]int{Gzip: 6, Zstd: 2, Br: 1}

// levelRange is what each coding's encoder has: gzip 1-9, zstd 1-4 (klauspost's fastest,
// default, better, best), brotli 1-11 (its 0 stores more than it compresses, and 0 in
// Config.Levels means the default).
var levelRange = [numCodings][2]int{Gzip: {1, 9}, Zstd: {1, 4}, Br: {1, 11}}

// EncoderLevels returns the lowest and highest level k's encoder has. NewCompressor takes
// any of them (a benchmark measures them all); ParseCodings, a server's configuration,
// only up to MaxDynamicLevel.
func EncoderLevels(k Coding) (lo, hi int) { return levelRange[k][0], levelRange[k][1] }

// MaxCostFactor is what a level may cost per request at most, in times the CPU of the
// same heavy PATCH answered uncompressed (about, as measured): the compression runs on
// the event loop, so every request behind it on the loop waits that long too.
const MaxCostFactor = 6

// maxDynamicLevel is the highest level of each coding whose heavy PATCH costs at most
// MaxCostFactor × identity, from cmd/worker's BenchmarkHeavyCompressCost (docs/workloads.md
// has the command and the figures; medians of 5, a busy 2-core machine, identity 23-32 µs
// a request): gzip 6 5.6× (7: 8.8×, 9: 35×), zstd 2 4.5× (3: 6.2×, 4: 22×), brotli 1
// 5.4× (2: 10×, 4: 17×, 11: ~1,900×). The static page is compressed once, at each
// coding's best level, and is not bound by this (CompressBest).
var maxDynamicLevel = [numCodings]int{Gzip: 6, Zstd: 2, Br: 1}

// MaxDynamicLevel is the highest level of k a server may use per request.
func MaxDynamicLevel(k Coding) int { return maxDynamicLevel[k] }

// ParseCodings reads a -compress value: codings in the server's order of preference,
// each optionally with a level, "gzip:6,zstd,br:4". "" or "off": none.
func ParseCodings(s string) (Config, error) {
	var c Config
	if s == "" || s == "off" {
		return c, nil
	}
	for _, item := range strings.Split(s, ",") {
		name, lv, hasLevel := strings.Cut(strings.TrimSpace(item), ":")
		k, err := Parse(name)
		if err != nil || k == Identity {
			return Config{}, fmt.Errorf("parse codings %q: %q: want gzip, zstd or br, each with an optional :LEVEL", s, item)
		}
		level := 0
		if hasLevel {
			lo, hi := levelRange[k][0], maxDynamicLevel[k]
			if level, err = strconv.Atoi(lv); err != nil || level < lo || level > levelRange[k][1] {
				return Config{}, fmt.Errorf("parse codings %q: %s level %q: want %d to %d", s, k, lv, lo, hi)
			}
			if level > hi {
				return Config{}, fmt.Errorf("parse codings %q: %s level %d costs more than %d× the CPU of an uncompressed heavy PATCH per request, on the event loop: the highest allowed is %d (docs/workloads.md, Compression)",
					s, k, level, MaxCostFactor, hi)
			}
		}
		for _, seen := range c.Codings {
			if seen == k {
				return Config{}, fmt.Errorf("parse codings %q: %s named twice", s, k)
			}
		}
		c.Codings = append(c.Codings, k)
		c.Levels = append(c.Levels, level)
	}
	return c, nil
}

// String writes the configuration back as ParseCodings reads it, levels resolved.
func (c Config) String() string {
	var parts []string
	for i, k := range c.Codings {
		parts = append(parts, fmt.Sprintf("%s:%d", k, c.level(i)))
	}
	if len(parts) == 0 {
		return "off"
	}
	return strings.Join(parts, ",")
}

func (c Config) level(i int) int {
	if i < len(c.Levels) && c.Levels[i] != 0 {
		return c.Levels[i]
	}
	return defaultLevel[c.Codings[i]]
}

// Compressor encodes response bodies with pooled encoders: a request reuses an encoder
// another finished with, reset, so the per-request cost is the compression alone. It is
// safe for concurrent use.
type Compressor struct {
	offered []Coding
	minSize int
	gzip    sync.Pool // *gzipState at the configured level
	br      sync.Pool // *brState
	zstd    *zstd.Encoder
	gzipLv  int
	brLv    int
}

// NewCompressor returns a Compressor for cfg; nil when cfg offers no coding.
func NewCompressor(cfg Config) (*Compressor, error) {
	if len(cfg.Codings) == 0 {
		return nil, nil
	}
	c := &Compressor{offered: cfg.Codings, minSize: cfg.MinSize}
	if c.minSize <= 0 {
		c.minSize = DefaultMinSize
	}
	for i, k := range cfg.Codings {
		lv := cfg.level(i)
		switch k {
		case Gzip:
			c.gzipLv = lv
			if _, err := gzip.NewWriterLevel(nil, lv); err != nil {
				return nil, fmt.Errorf("new compressor: gzip level %d: %w", lv, err)
			}
		case Br:
			c.brLv = lv
		case Zstd:
			// EncodeAll is safe for concurrent use; the concurrency bounds how many
			// encoder states it keeps, one per core that may compress at once.
			enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.EncoderLevel(lv)),
				zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)), zstd.WithZeroFrames(true))
			if err != nil {
				return nil, fmt.Errorf("new compressor: zstd level %d: %w", lv, err)
			}
			c.zstd = enc
		default:
			return nil, fmt.Errorf("new compressor: cannot encode %v", k)
		}
	}
	return c, nil
}

// Choose negotiates the coding for a body of size bytes: identity when the body is
// small. ok false: the request accepts nothing offered, identity included (406).
func (c *Compressor) Choose(acceptEncoding []byte, size int) (Coding, bool) {
	if size < c.minSize {
		// Small bodies go as they are when identity is acceptable (nothing offered: the
		// answer is identity or nothing); a client that refused identity still gets its
		// coding.
		if _, ok := Negotiate(acceptEncoding, nil); ok {
			return Identity, true
		}
	}
	return Negotiate(acceptEncoding, c.offered)
}

// appendWriter is an io.Writer appending to a slice the caller keeps.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// gzipState and brState are pooled together with the writer their encoder writes to, so
// that a request allocates neither.
type gzipState struct {
	out appendWriter
	enc *gzip.Writer
}

type brState struct {
	out appendWriter
	enc *brotli.Writer
}

// Append appends body encoded with k to dst and returns the extended slice.
func (c *Compressor) Append(dst []byte, k Coding, body []byte) ([]byte, error) {
	var err error
	switch k {
	case Identity:
		return append(dst, body...), nil
	case Zstd:
		if c.zstd != nil {
			return c.zstd.EncodeAll(body, dst), nil
		}
	case Gzip:
		st, _ := c.gzip.Get().(*gzipState)
		if st == nil {
			st = &gzipState{}
			st.enc, _ = gzip.NewWriterLevel(&st.out, c.gzipLv) // the level was checked in NewCompressor
		}
		st.out.b = dst
		st.enc.Reset(&st.out)
		if _, err = st.enc.Write(body); err == nil {
			err = st.enc.Close()
		}
		dst, st.out.b = st.out.b, nil // the pool keeps no reference to the caller's slice
		c.gzip.Put(st)
		if err != nil {
			return dst, fmt.Errorf("compress gzip: %w", err)
		}
		return dst, nil
	case Br:
		st, _ := c.br.Get().(*brState)
		if st == nil {
			st = &brState{}
			st.enc = brotli.NewWriterLevel(&st.out, c.brLv)
		}
		st.out.b = dst
		st.enc.Reset(&st.out)
		if _, err = st.enc.Write(body); err == nil {
			err = st.enc.Close()
		}
		dst, st.out.b = st.out.b, nil
		c.br.Put(st)
		if err != nil {
			return dst, fmt.Errorf("compress br: %w", err)
		}
		return dst, nil
	}
	return dst, fmt.Errorf("compress: %v not configured", k)
}
