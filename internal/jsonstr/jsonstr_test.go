package jsonstr

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/onehost/onehost/internal/sqlitec"
)

// jsonQuoter asks SQLite's json_quote, the reference for Append.
type jsonQuoter struct {
	c  *sqlitec.Conn
	st sqlitec.Stmt
}

func newJSONQuoter(t testing.TB) *jsonQuoter {
	t.Helper()
	c, err := sqlitec.Open(":memory:", sqlite3.SQLITE_OPEN_READWRITE|sqlite3.SQLITE_OPEN_CREATE|sqlite3.SQLITE_OPEN_MEMORY)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	st, err := c.Prepare(`SELECT json_quote(CAST(?1 AS TEXT))`)
	if err != nil {
		t.Fatal(err)
	}
	return &jsonQuoter{c, st}
}

func (q *jsonQuoter) quote(t testing.TB, s string) string {
	t.Helper()
	q.c.BindText(q.st, 1, s)
	defer q.c.Reset(q.st)
	if rc := q.c.Step(q.st); rc != sqlite3.SQLITE_ROW {
		t.Fatalf("json_quote(%q): %v", s, q.c.ErrorFor(rc))
	}
	return string(q.c.ColumnText(q.st, 0))
}

// htmlReplacer turns Append's output into AppendHTMLSafe's: <, > and & are the only
// bytes the latter escapes too, and Append copies them as they are.
var htmlReplacer = strings.NewReplacer("<", `\u003c`, ">", `\u003e`, "&", `\u0026`)

// testStrings are the named cases of the table tests: every kind of byte the escapers
// treat apart, and every ASCII byte between two letters.
func testStrings() []struct{ name, in string } {
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"plain", "hello world"},
		{"html", `<b>&amp;</b> 'single' /slash/`},
		{"html in a long run", "0123456789abcdef<0123456789abcdef>0123456789abcdef&"},
		{"quote and backslash", `say "hi" \ \\ \"`},
		{"short escapes", "\b\t\n\f\r"},
		{"other controls", "\x00\x01\x0b\x0e\x1b\x1f"},
		{"DEL", "\x7f"},
		{"non-ASCII", "café ✓ \U0001F600 ünïcødé"},
		{"line separators", "\u2028\u2029\u0085"},
		{"invalid UTF-8", "\xff\xfe a \xc3 \xed\xa0\x80"},
		{"escape at both ends", "\n middle \""},
		{"escapes in every block", strings.Repeat("ab\"<c>&\n", 5)},
		{"escape at a block's last and next's first byte", "0123456\"\"9abcdef0123456\\"},
	}
	for b := range 0x80 {
		tests = append(tests, struct{ name, in string }{"byte " + string(rune('0'+b/16)) + string(rune('0'+b%16)), "x" + string(rune(b)) + "y"})
	}
	return tests
}

func TestAppendMatchesSQLite(t *testing.T) {
	q := newJSONQuoter(t)
	for _, tt := range testStrings() {
		got := string(Append([]byte("pre"), tt.in))
		want := "pre" + q.quote(t, tt.in)
		if got != want {
			t.Errorf("%s: Append(%q) = %q; want %q (SQLite)", tt.name, tt.in, got, want)
		}
		if got2 := string(Append([]byte("pre"), []byte(tt.in))); got2 != got {
			t.Errorf("%s: []byte form %q differs from string form %q", tt.name, got2, got)
		}
	}
}

func TestAppendHTMLSafeMatchesEncodingJSON(t *testing.T) {
	for _, tt := range testStrings() {
		got := string(AppendHTMLSafe([]byte("pre"), []byte(tt.in)))
		if want := "pre" + htmlReplacer.Replace(string(Append(nil, tt.in))); got != want {
			t.Errorf("%s: AppendHTMLSafe(%q) = %q; want %q (Append, <>& escaped)", tt.name, tt.in, got, want)
		}
		if !utf8.ValidString(tt.in) || strings.ContainsAny(tt.in, "\u2028\u2029") {
			continue // encoding/json replaces or escapes these; AppendHTMLSafe copies them
		}
		want, err := json.Marshal(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		// encoding/json writes \u00xx for \b and \f; the rest is the same.
		want = []byte(strings.NewReplacer(`\u0008`, `\b`, `\u000c`, `\f`).Replace(string(want)))
		if got != "pre"+string(want) {
			t.Errorf("%s: AppendHTMLSafe(%q) = %q; want %q (encoding/json)", tt.name, tt.in, got, "pre"+string(want))
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a\"b\\c", "\x00\x1f\x7f", "é✓\xff", strings.Repeat("\n", 10), "<a href='x&y'>"} {
		f.Add(s)
	}
	q := newJSONQuoter(f)
	f.Fuzz(func(t *testing.T, s string) {
		got := string(Append(nil, s))
		if want := q.quote(t, s); got != want {
			t.Fatalf("Append(%q) = %q; want %q (SQLite)", s, got, want)
		}
		html := string(AppendHTMLSafe(nil, s))
		if want := htmlReplacer.Replace(got); html != want {
			t.Fatalf("AppendHTMLSafe(%q) = %q; want %q", s, html, want)
		}
		if !utf8.ValidString(s) {
			return
		}
		for _, out := range []string{got, html} {
			var back string
			if err := json.Unmarshal([]byte(out), &back); err != nil || back != s {
				t.Fatalf("%q encoded as %q decodes to %q, %v", s, out, back, err)
			}
		}
	})
}

func TestAppendEscape(t *testing.T) {
	tests := []struct {
		c    byte
		want string
	}{
		{'"', `\"`}, {'\\', `\\`}, {'\b', `\b`}, {'\t', `\t`}, {'\n', `\n`}, {'\f', `\f`},
		{'\r', `\r`}, {0, `\u0000`}, {0x1f, `\u001f`}, {'<', `\u003c`}, {'&', `\u0026`},
	}
	for _, tt := range tests {
		if got := string(AppendEscape([]byte("x"), tt.c)); got != "x"+tt.want {
			t.Errorf("AppendEscape(%#x) = %q, want %q", tt.c, got, "x"+tt.want)
		}
	}
}

func TestNeedsEscape8(t *testing.T) {
	// Every byte value in every lane, against the byte-by-byte rule.
	for _, html := range []bool{false, true} {
		needs := needsEscape8
		if html {
			needs = needsEscapeHTML8
		}
		for lane := 0; lane < 8; lane++ {
			for b := 0; b < 256; b++ {
				x := uint64(0x6161616161616161) // "aaaaaaaa"
				x = x&^(0xff<<(8*lane)) | uint64(b)<<(8*lane)
				want := b < 0x20 || b == '"' || b == '\\' || html && (b == '<' || b == '>' || b == '&')
				if got := needs(x); got != want {
					t.Fatalf("needsEscape8 (html %v) with byte %#x in lane %d = %v, want %v", html, b, lane, got, want)
				}
			}
		}
	}
}

func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	buf := make([]byte, 0, 256)
	s := []byte("Bob's \"Best\" <Bread> Bin & a tab\t")
	if got := testing.AllocsPerRun(100, func() { buf = AppendHTMLSafe(Append(buf[:0], s), s) }); got != 0 {
		t.Errorf("%v allocations per call with room in dst; want 0", got)
	}
}

// benchBody is a typical post body (no byte to escape).
const benchBody = "TIL So keepalive the an watching lucky measuring usually everywhere droplet waiting... Nowhere building test those here keepalive network someone and of load?"

func BenchmarkAppend(b *testing.B) {
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	for b.Loop() {
		buf = Append(buf[:0], benchBody)
	}
}

func BenchmarkAppendHTMLSafe(b *testing.B) {
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	for b.Loop() {
		buf = AppendHTMLSafe(buf[:0], benchBody)
	}
}
