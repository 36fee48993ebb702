package feed

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	sqlite3 "modernc.org/sqlite/lib"
)

// jsonQuoter asks SQLite's json_quote, the reference for appendJSONString.
type jsonQuoter struct {
	c  *conn
	st uintptr
}

func newJSONQuoter(t testing.TB) *jsonQuoter {
	t.Helper()
	c, err := openConn(":memory:", sqlite3.SQLITE_OPEN_READWRITE|sqlite3.SQLITE_OPEN_CREATE|sqlite3.SQLITE_OPEN_MEMORY)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.close() })
	st, err := c.prepare(`SELECT json_quote(CAST(?1 AS TEXT))`)
	if err != nil {
		t.Fatal(err)
	}
	return &jsonQuoter{c, st}
}

func (q *jsonQuoter) quote(t testing.TB, s string) string {
	t.Helper()
	q.c.bindText(q.st, 1, s)
	defer q.c.reset(q.st)
	if rc := q.c.step(q.st); rc != sqlite3.SQLITE_ROW {
		t.Fatalf("json_quote(%q): %v", s, q.c.errorFor(rc))
	}
	return string(q.c.columnText(q.st, 0))
}

func TestAppendJSONStringMatchesSQLite(t *testing.T) {
	q := newJSONQuoter(t)
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"plain", "hello world"},
		{"html", `<b>&amp;</b> 'single' /slash/`},
		{"quote and backslash", `say "hi" \ \\ \"`},
		{"short escapes", "\b\t\n\f\r"},
		{"other controls", "\x00\x01\x0b\x0e\x1b\x1f"},
		{"DEL", "\x7f"},
		{"non-ASCII", "café ✓ \U0001F600 ünïcødé"},
		{"line separators", "\u2028\u2029\u0085"},
		{"invalid UTF-8", "\xff\xfe a \xc3 \xed\xa0\x80"},
		{"escape at both ends", "\n middle \""},
	}
	for b := range 0x80 {
		tests = append(tests, struct{ name, in string }{"byte " + string(rune('0'+b/16)) + string(rune('0'+b%16)), "x" + string(rune(b)) + "y"})
	}
	for _, tt := range tests {
		got := string(appendJSONString([]byte("pre"), tt.in))
		want := "pre" + q.quote(t, tt.in)
		if got != want {
			t.Errorf("%s: appendJSONString(%q) = %q; want %q (SQLite)", tt.name, tt.in, got, want)
		}
		if got2 := string(appendJSONString([]byte("pre"), []byte(tt.in))); got2 != got {
			t.Errorf("%s: []byte form %q differs from string form %q", tt.name, got2, got)
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a\"b\\c", "\x00\x1f\x7f", "é✓\xff", strings.Repeat("\n", 10)} {
		f.Add(s)
	}
	q := newJSONQuoter(f)
	f.Fuzz(func(t *testing.T, s string) {
		got := string(appendJSONString(nil, s))
		if want := q.quote(t, s); got != want {
			t.Fatalf("appendJSONString(%q) = %q; want %q (SQLite)", s, got, want)
		}
		if !utf8.ValidString(s) {
			return
		}
		var back string
		if err := json.Unmarshal([]byte(got), &back); err != nil || back != s {
			t.Fatalf("appendJSONString(%q) = %q decodes to %q, %v", s, got, back, err)
		}
	})
}

func BenchmarkAppendJSONString(b *testing.B) {
	body := "TIL So keepalive the an watching lucky measuring usually everywhere droplet waiting... Nowhere building test those here keepalive network someone and of load?"
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		buf = appendJSONString(buf[:0], body)
	}
}

func TestNeedsEscape8(t *testing.T) {
	// Every byte value in every lane, against the byte-by-byte rule.
	for lane := 0; lane < 8; lane++ {
		for b := 0; b < 256; b++ {
			x := uint64(0x6161616161616161) // "aaaaaaaa"
			x = x&^(0xff<<(8*lane)) | uint64(b)<<(8*lane)
			want := b < 0x20 || b == '"' || b == '\\'
			if got := needsEscape8(x); got != want {
				t.Fatalf("needsEscape8 with byte %#x in lane %d = %v, want %v", b, lane, got, want)
			}
		}
	}
}
