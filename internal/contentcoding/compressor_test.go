package contentcoding

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// heavyBody is the heavy PATCH's 32 KB answer (its golden file), the body compression
// is for.
func heavyBody(tb testing.TB) []byte {
	tb.Helper()
	b, err := os.ReadFile("../heavy/testdata/patch-123.json")
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestParseCodings(t *testing.T) {
	for _, tc := range []struct {
		name, in, want, err string
	}{
		{"off", "", "off", ""},
		{"off by name", "off", "off", ""},
		{"defaults", "gzip,zstd,br", "gzip:6,zstd:2,br:1", ""},
		{"levels and order", "br:1, gzip:6", "br:1,gzip:6", ""},
		{"the highest allowed", "zstd:2,gzip:6,br:1", "zstd:2,gzip:6,br:1", ""},
		{"brotli 0", "br:0", "", "want 1 to 1"},
		{"unknown", "deflate", "", "want gzip, zstd or br"},
		{"identity", "identity", "", "want gzip, zstd or br"},
		{"level out of range", "gzip:10", "", "want 1 to 6"},
		{"level not a number", "zstd:max", "", "want 1 to 2"},
		// The encoders have them, a request may not pay for them.
		{"brotli 11", "br:11", "", "br level 11 costs more than 6× the CPU of an uncompressed heavy PATCH per request, on the event loop: the highest allowed is 1"},
		{"brotli 4", "gzip,br:4", "", "br level 4 costs more than 6×"},
		{"gzip 7", "gzip:7", "", "the highest allowed is 6"},
		{"zstd 3", "zstd:3", "", "the highest allowed is 2"},
		{"twice", "gzip,gzip:5", "", "named twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseCodings(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil || c.String() != tc.want {
				t.Fatalf("ParseCodings(%q) = %s, %v; want %s", tc.in, c, err, tc.want)
			}
		})
	}
}

// TestCompressorRoundTrip: every coding at its lowest and highest level decodes to the
// body, appended after what dst held, and makes the heavy answer small.
func TestCompressorRoundTrip(t *testing.T) {
	body := heavyBody(t)
	for _, k := range []Coding{Gzip, Zstd, Br} {
		for _, lv := range levelRange[k] {
			t.Run(fmt.Sprintf("%s:%d", k, lv), func(t *testing.T) {
				c, err := NewCompressor(Config{Codings: []Coding{k}, Levels: []int{lv}})
				if err != nil {
					t.Fatal(err)
				}
				prefix := []byte("kept")
				for range 3 { // pooled encoders reset between uses
					out, err := c.Append(bytes.Clone(prefix), k, body)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.HasPrefix(out, prefix) {
						t.Fatal("dst's bytes lost")
					}
					plain, err := Decompress(k, out[len(prefix):], 1<<20)
					if err != nil || !bytes.Equal(plain, body) {
						t.Fatalf("decoded %d bytes, %v; want the body's %d", len(plain), err, len(body))
					}
					// Behaviour, not the target: any level removes the indentation.
					if ratio := float64(len(out)-len(prefix)) / float64(len(body)); ratio > 0.2 {
						t.Errorf("ratio %.3f, want ≤ 0.2 on indented JSON", ratio)
					}
				}
			})
		}
	}
}

func TestChoose(t *testing.T) {
	c, err := NewCompressor(Config{Codings: []Coding{Zstd, Gzip}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		accept string
		size   int
		want   Coding
		ok     bool
	}{
		{"large", "gzip, zstd", 4096, Zstd, true},
		{"small goes plain", "gzip, zstd", 100, Identity, true},
		{"at the threshold", "gzip", DefaultMinSize, Gzip, true},
		{"small but identity refused", "gzip, identity;q=0", 100, Gzip, true},
		{"nothing acceptable", "br, identity;q=0", 4096, Identity, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := c.Choose([]byte(tc.accept), tc.size)
			if got != tc.want || ok != tc.ok {
				t.Errorf("Choose(%q, %d) = %v, %v; want %v, %v", tc.accept, tc.size, got, ok, tc.want, tc.ok)
			}
		})
	}
	if c, err := NewCompressor(Config{}); c != nil || err != nil {
		t.Errorf("zero Config: %v, %v; want nil, nil (off)", c, err)
	}
}

// TestDefaultLevelsAllowed: each coding's default level is one ParseCodings accepts.
func TestDefaultLevelsAllowed(t *testing.T) {
	for _, k := range []Coding{Gzip, Zstd, Br} {
		if lv, hi := defaultLevel[k], MaxDynamicLevel(k); lv < levelRange[k][0] || lv > hi {
			t.Errorf("%s: default level %d outside 1..%d", k, lv, hi)
		}
	}
}

// FuzzParseCodings: never panics; what it accepts it writes back to the same, within the
// allowed levels.
func FuzzParseCodings(f *testing.F) {
	for _, s := range []string{"off", "gzip,zstd,br", "br:11", "gzip:6, zstd:2", "x-gzip:1", "zstd:max", "gzip,gzip", ":", ","} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCodings(s)
		if err != nil {
			return
		}
		for i, k := range c.Codings {
			if lv := c.level(i); lv < 1 || lv > MaxDynamicLevel(k) {
				t.Fatalf("%q: %s level %d accepted", s, k, lv)
			}
		}
		if c2, err := ParseCodings(c.String()); err != nil || c2.String() != c.String() {
			t.Fatalf("%q: written back as %q, which reads as %v, %v", s, c, c2, err)
		}
	})
}

// TestCompressorAllocs: with the encoders pooled and dst large enough, compressing a
// response allocates nothing in steady state.
func TestCompressorAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	body := heavyBody(t)
	for _, k := range []Coding{Gzip, Zstd, Br} {
		c, err := NewCompressor(Config{Codings: []Coding{k}})
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, 0, 64<<10)
		n := testing.AllocsPerRun(50, func() {
			if dst, err = c.Append(dst[:0], k, body); err != nil {
				t.Fatal(err)
			}
		})
		if n > 0 {
			t.Errorf("%s: %.1f allocations per body, want 0", k, n)
		}
	}
}

// BenchmarkCompressSizes measures what each coding and level costs and saves on the heavy
// answer and on its first 512 bytes to 8 KB (DefaultMinSize comes from these figures):
// go test -run XX -bench CompressSizes ./internal/contentcoding/
func BenchmarkCompressSizes(b *testing.B) {
	body := heavyBody(b)
	for _, size := range []int{256, 512, 1024, 2048, 8192, len(body)} {
		for _, k := range []Coding{Gzip, Zstd, Br} {
			r := levelRange[k]
			for _, lv := range []int{r[0], (r[0] + r[1]) / 2, r[1]} {
				b.Run(fmt.Sprintf("%s:%d/%d", k, lv, size), func(b *testing.B) {
					c, err := NewCompressor(Config{Codings: []Coding{k}, Levels: []int{lv}})
					if err != nil {
						b.Fatal(err)
					}
					dst := make([]byte, 0, 64<<10)
					b.SetBytes(int64(size))
					start := time.Now()
					for b.Loop() {
						dst, _ = c.Append(dst[:0], k, body[:size])
					}
					b.ReportMetric(float64(size-len(dst)), "saved-B")
					b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/op")
				})
			}
		}
	}
}
