package contentcoding

import (
	"testing"
)

func TestNegotiate(t *testing.T) {
	all := []Coding{Zstd, Br, Gzip}
	tests := []struct {
		name    string
		accept  *string // nil: no header
		offered []Coding
		want    Coding
		ok      bool
	}{
		{"no header", nil, all, Identity, true},
		{"empty value", ptr(""), all, Identity, true},
		{"go client", ptr("gzip"), all, Gzip, true},
		{"browser", ptr("gzip, deflate, br, zstd"), all, Zstd, true},
		{"server preference on a tie", ptr("br, gzip"), all, Br, true},
		{"q decides over preference", ptr("zstd;q=0.5, gzip"), all, Gzip, true},
		{"case and spaces", ptr("  GZip ;  Q=1 ,\tBR;q=0.2"), all, Gzip, true},
		{"x-gzip", ptr("x-gzip"), all, Gzip, true},
		{"star", ptr("*"), all, Zstd, true},
		{"star excludes identity only if unnamed", ptr("*;q=0, identity"), all, Identity, true},
		{"star q=0 with nothing offered", ptr("*;q=0"), nil, Identity, false},
		{"identity refused, gzip offered", ptr("identity;q=0, gzip;q=0.1"), all, Gzip, true},
		{"identity refused, nothing acceptable", ptr("identity;q=0, deflate"), all, Identity, false},
		{"gzip refused", ptr("gzip;q=0"), []Coding{Gzip}, Identity, true},
		{"star less than gzip", ptr("gzip;q=0.8, *;q=0.1"), all, Gzip, true},
		{"named zero beats star", ptr("zstd;q=0, *"), all, Br, true},
		{"unknown codings", ptr("compress, deflate, snappy"), all, Identity, true},
		{"not offered", ptr("br"), []Coding{Gzip}, Identity, true},
		{"tiny q still beats implicit identity", ptr("gzip;q=0.001"), all, Gzip, true},
		{"explicit identity ties go to the coding", ptr("identity, gzip"), all, Gzip, true},
		{"explicit identity preferred", ptr("identity, gzip;q=0.5"), all, Identity, true},
		{"bad q ignored", ptr("gzip;q=2, br;q=0.x, zstd;q=1.5"), all, Identity, true},
		{"q with too many decimals ignored", ptr("gzip;q=0.0001"), all, Identity, true},
		{"q 1.000", ptr("gzip;q=1.000"), all, Gzip, true},
		{"other parameters ignored", ptr("gzip;level=9"), all, Gzip, true},
		{"empty items", ptr(",, ,gzip,,"), all, Gzip, true},
		{"duplicate takes the highest", ptr("gzip;q=0, gzip;q=0.5"), all, Gzip, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var accept []byte
			if tt.accept != nil {
				accept = []byte(*tt.accept)
			}
			got, ok := Negotiate(accept, tt.offered)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Negotiate(%q) = %v, %v; want %v, %v", deref(tt.accept), got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Coding
		err  bool
	}{
		{"gzip", Gzip, false}, {"ZSTD", Zstd, false}, {"br", Br, false},
		{"identity", Identity, false}, {"deflate", 0, true}, {"", 0, true},
	} {
		got, err := Parse(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("Parse(%q) = %v, %v", tt.in, got, err)
		}
		if err == nil && got.String() != map[Coding]string{Gzip: "gzip", Zstd: "zstd", Br: "br", Identity: "identity"}[got] {
			t.Errorf("String of %q = %q", tt.in, got)
		}
	}
}

func TestNegotiateAllocs(t *testing.T) {
	accept := []byte("gzip, deflate, br;q=0.9, zstd;q=0.8, *;q=0.1")
	offered := []Coding{Zstd, Br, Gzip}
	if n := testing.AllocsPerRun(100, func() { Negotiate(accept, offered) }); n != 0 {
		t.Errorf("Negotiate: %.1f allocations, want 0", n)
	}
}

// FuzzNegotiate: never panics, answers only what is offered (or identity), and ok=false
// only when the header names identity's refusal.
func FuzzNegotiate(f *testing.F) {
	for _, s := range []string{"gzip", "", "*;q=0", "identity;q=0, br;q=0.5", "gzip;q=1.000, zstd;Q=0.9", ";;,q=", "br;q=0.", "x-gzip;q=1."} {
		f.Add(s)
	}
	offered := []Coding{Zstd, Br, Gzip}
	f.Fuzz(func(t *testing.T, s string) {
		c, ok := Negotiate([]byte(s), offered)
		if c >= numCodings {
			t.Fatalf("coding %d out of range", c)
		}
		if !ok && c != Identity {
			t.Fatalf("not ok but %v", c)
		}
		if c, ok2 := Negotiate([]byte(s), nil); ok2 && c != Identity {
			t.Fatalf("nothing offered but %v", c)
		}
	})
}

func ptr(s string) *string { return &s }

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}
