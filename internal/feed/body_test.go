package feed

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseCreateBody(t *testing.T) {
	long := strings.Repeat("a", 500)
	tests := []struct {
		name, in string
		want     string
		err      error
	}{
		{"plain", `{"body":"hello"}`, "hello", nil},
		{"trimmed", `{"body":"  test: <b>&amp;</b> \"quoted\" / café ✓ \n"}`, `test: <b>&amp;</b> "quoted" / café ✓`, nil},
		{"500 chars padded", `{"body":"   ` + strings.Repeat("b", 500) + `   "}`, strings.Repeat("b", 500), nil},
		{"500 code points of 2 bytes", `{"body":"` + strings.Repeat("é", 500) + `"}`, strings.Repeat("é", 500), nil},
		{"500 astral code points", `{"body":"` + strings.Repeat(`\ud83d\ude00`, 500) + `"}`, strings.Repeat("\U0001F600", 500), nil},
		{"other members", `{"x":[1,{"body":2}],"body":"ok","y":{"z":"}"}}`, "ok", nil},
		{"escaped key", `{"b\u006fdy":"ok"}`, "ok", nil},
		{"key with escaped quote", `{"bo\"dy":"no","body":"yes"}`, "yes", nil},
		{"duplicate keys, last wins", `{"body":"first","body":"second"}`, "second", nil},
		{"duplicate keys, last not a string", `{"body":"first","body":1}`, "", ErrBodyRequired},
		{"duplicate keys, last a string", `{"body":1,"body":"second"}`, "second", nil},
		{"white space everywhere", " \t\r\n{ \"body\" : \"x\" , \"a\" : null } \n", "x", nil},
		{"escapes", `{"body":"a\"b\\c\/d\b\f\n\r\te\u00e9\u2713"}`, "a\"b\\c/d\b\f\n\r\teé✓", nil},
		{"inner white space kept", `{"body":" a \u00a0 b "}`, "a \u00a0 b", nil},
		{"JS trim set", `{"body":"\u0009\u000a\u000b\u000c\u000d\u0020\u00a0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000\ufeffx\ufeff"}`, "x", nil},
		{"not in the JS trim set", `{"body":"\u0085\u180e\u200bx\u200b"}`, "\u0085\u180e\u200bx\u200b", nil},
		{"lone high surrogate", `{"body":"a\ud800b"}`, "a\ufffdb", nil},
		{"lone low surrogate", `{"body":"\udc00"}`, "\ufffd", nil},
		{"high then non-low", `{"body":"\ud800\u0041"}`, "\ufffdA", nil},
		{"high high low", `{"body":"\ud800\ud83d\ude00"}`, "\ufffd\U0001F600", nil},
		{"invalid UTF-8", "{\"body\":\"a\xffb\xc3\"}", "a\ufffdb\ufffd", nil},
		{"NUL", `{"body":"a\u0000b"}`, "a\x00b", nil},

		{"empty request", ``, "", ErrMalformedJSON},
		{"only space", "  \n", "", ErrMalformedJSON},
		{"bad json", `{bad json`, "", ErrMalformedJSON},
		{"trailing bytes", `{"body":"x"} x`, "", ErrMalformedJSON},
		{"two objects", `{"body":"x"}{}`, "", ErrMalformedJSON},
		{"trailing comma", `{"body":"x",}`, "", ErrMalformedJSON},
		{"single quotes", `{'body':'x'}`, "", ErrMalformedJSON},
		{"raw control char", "{\"body\":\"a\tb\"}", "", ErrMalformedJSON},
		{"bad escape", `{"body":"\x"}`, "", ErrMalformedJSON},
		{"BOM", "\ufeff{\"body\":\"x\"}", "", ErrMalformedJSON},
		{"top-level string", `"hello"`, "", ErrBodyRequired},
		{"top-level empty string", `""`, "", ErrBodyRequired},
		{"top-level number", `123`, "", ErrBodyRequired},
		{"top-level array", `[{"body":"x"}]`, "", ErrBodyRequired},
		{"top-level null", `null`, "", ErrBodyRequired},
		{"top-level number beyond float64", `1E1000`, "", ErrBodyRequired},
		{"number beyond float64 elsewhere", `{"n":-1e999,"body":"x"}`, "x", nil},

		{"empty object", `{}`, "", ErrBodyRequired},
		{"empty body", `{"body":""}`, "", ErrBodyRequired},
		{"blank body", `{"body":"   "}`, "", ErrBodyRequired},
		{"JS-blank body", `{"body":"\u3000\ufeff\n"}`, "", ErrBodyRequired},
		{"number body", `{"body":123}`, "", ErrBodyRequired},
		{"null body", `{"body":null}`, "", ErrBodyRequired},
		{"object body", `{"body":{"body":"x"}}`, "", ErrBodyRequired},
		{"array body", `{"body":["x"]}`, "", ErrBodyRequired},
		{"other key", `{"Body":"x"}`, "", ErrBodyRequired},

		{"501 chars", `{"body":"` + long + `a"}`, "", ErrBodyTooLong},
		{"501 code points", `{"body":"` + strings.Repeat("é", 501) + `"}`, "", ErrBodyTooLong},
		{"501 after trim of inner", `{"body":" ` + long + ` a "}`, "", ErrBodyTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCreateBody([]byte(tt.in))
			if got != tt.want || !errors.Is(err, tt.err) {
				t.Errorf("ParseCreateBody(%q) = %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.err)
			}
		})
	}
}

// referenceParse is ParseCreateBody's contract written with encoding/json and a second,
// independent spelling of the JavaScript trim set. Numbers are decoded as json.Number: a
// number beyond float64's range (1e999) is valid JSON, which JavaScript's JSON.parse reads
// as Infinity, so it must not make the body malformed (found by fuzzing: "1E1000").
func referenceParse(body []byte) (string, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", ErrMalformedJSON
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", ErrMalformedJSON // trailing bytes
	}
	m, ok := v.(map[string]any)
	if !ok {
		return "", ErrBodyRequired
	}
	s, ok := m["body"].(string)
	if !ok {
		return "", ErrBodyRequired
	}
	s = strings.TrimFunc(s, func(r rune) bool {
		return strings.ContainsRune("\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff", r)
	})
	switch {
	case s == "":
		return "", ErrBodyRequired
	case utf8.RuneCountInString(s) > 500:
		return "", ErrBodyTooLong
	}
	return s, nil
}

func FuzzParseCreateBody(f *testing.F) {
	for _, s := range []string{
		`{"body":"hello"}`, `{"body":" \u00a0x\u3000 "}`, `{"body":1}`, `{}`, `{bad json`, ``, `"x"`,
		`{"body":"a","body":"b"}`, `{"b\u006fdy":"x"}`, `{"x":{"body":"y"},"body":"z"}`,
		`{"body":"\ud800\udc00\ud800"}`, "{\"body\":\"\xff\"}", `[1,2]`, `{"body":"x"} `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := ParseCreateBody(in)
		want, wantErr := referenceParse(in)
		if got != want || err != wantErr {
			t.Fatalf("ParseCreateBody(%q) = %q, %v; want %q, %v (encoding/json)", in, got, err, want, wantErr)
		}
	})
}

func TestParseCreateBodyAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	for _, in := range []string{
		`{"body":"  Hot take: the cheapest server is the one you measured.  "}`,
		`{"body":"  escaped \"quotes\" and \u2713  "}`,
	} {
		b := []byte(in)
		if n := testing.AllocsPerRun(100, func() { ParseCreateBody(b) }); n > 1 {
			t.Errorf("ParseCreateBody(%s): %v allocations; want at most 1 (the returned string)", in, n)
		}
	}
}

func BenchmarkParseCreateBody(b *testing.B) {
	in := []byte(`{"body":"  Hot take: the cheapest server is the one you measured. Really \u2713  "}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseCreateBody(in); err != nil {
			b.Fatal(err)
		}
	}
}
