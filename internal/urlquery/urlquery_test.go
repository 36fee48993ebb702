package urlquery

import (
	"net/url"
	"testing"
)

func TestUnescape(t *testing.T) {
	tests := []struct {
		name, in   string
		room       int
		want       string
		fits, good bool
	}{
		{"empty", "", 8, "", true, true},
		{"plain", "page", 8, "page", true, true},
		{"plus is a space", "a+b", 8, "a b", true, true},
		{"escapes, either case", "%41%2b%2B%7e", 8, "A++~", true, true},
		{"exactly fits", "abcd", 4, "abcd", true, true},
		{"too long", "abcdef", 4, "abcd", false, true},
		{"bad escape past the room", "abcdef%zz", 4, "abcd", false, false},
		{"bad hex", "%g0", 8, "", true, false},
		{"cut escape", "ab%4", 8, "ab", true, false},
		{"lone percent", "%", 8, "", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, fits, valid := Unescape(make([]byte, 0, tt.room), []byte(tt.in))
			if string(got) != tt.want || fits != tt.fits || valid != tt.good {
				t.Errorf("Unescape(%q) = %q, fits %v, valid %v; want %q, %v, %v",
					tt.in, got, fits, valid, tt.want, tt.fits, tt.good)
			}
		})
	}
}

func FuzzUnescape(f *testing.F) {
	for _, s := range []string{"", "page=2", "a+b%20c", "%zz", "%4", "%%41", "%e2%9c%93"} {
		f.Add(s, 8)
	}
	f.Fuzz(func(t *testing.T, s string, room int) {
		room = max(0, min(room, 1024))
		got, fits, valid := Unescape(make([]byte, 0, room), []byte(s))
		want, err := url.QueryUnescape(s)
		if valid != (err == nil) {
			t.Fatalf("Unescape(%q): valid %v; url.QueryUnescape: %v", s, valid, err)
		}
		if !valid {
			return
		}
		if fits != (len(want) <= room) || (fits && string(got) != want) || (!fits && string(got) != want[:room]) {
			t.Fatalf("Unescape(%q) with room %d = %q, fits %v; want %q", s, room, got, fits, want)
		}
	})
}

func TestUnescapeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	var buf [16]byte
	in := []byte("fields%3Did%2Cname+x")
	if n := testing.AllocsPerRun(100, func() { Unescape(buf[:0], in) }); n != 0 {
		t.Errorf("%v allocations per call; want 0", n)
	}
}
