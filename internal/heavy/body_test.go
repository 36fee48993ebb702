package heavy

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseBody(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	many := func(n int) string {
		var sb strings.Builder
		sb.WriteByte('{')
		for i := range n {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`"k` + itoa(i) + `":0`)
		}
		sb.WriteByte('}')
		return sb.String()
	}
	tests := []struct {
		name string
		body string
		err  error
		keys []string // the normalized keys, when accepted
	}{
		{"article body", `{"foo1":"bar"}`, nil, []string{`"foo1"`}},
		{"empty object", `{}`, nil, nil},
		{"white space around", " \t\r\n{ \"a\" : 1 } \n", nil, []string{`"a"`}},
		{"mixed values", mixedBody, nil, []string{`"title"`, `"count"`, `"ratio"`, `"big"`, `"flags"`, `"empty"`, `"none"`, `"nested"`, `"text"`, `"color"`, `"labels"`}},
		{"escaped key normalized", `{"a\u0062\/c":1}`, nil, []string{`"ab/c"`}},
		{"escaped control key", `{"\u000a":1}`, nil, []string{`"\n"`}},
		{"nested depth 32", `{"a":` + deep(31) + `}`, nil, []string{`"a"`}},
		{"128 members", many(128), nil, nil},
		{"same key in two objects", `{"a":{"a":1},"b":{"a":2}}`, nil, []string{`"a"`, `"b"`}},

		{"empty", ``, ErrBodyEmpty, nil},
		{"only white space", " \n ", ErrBodyEmpty, nil},
		{"array", `[1]`, ErrNotObject, nil},
		{"string", `"x"`, ErrNotObject, nil},
		{"null", `null`, ErrNotObject, nil},
		{"number", `12`, ErrNotObject, nil},
		{"bad array", `[1,]`, ErrMalformed, nil},
		{"unclosed", `{"a":1`, ErrMalformed, nil},
		{"trailing comma", `{"a":1,}`, ErrMalformed, nil},
		{"trailing bytes", `{"a":1} x`, ErrMalformed, nil},
		{"two objects", `{}{}`, ErrMalformed, nil},
		{"single quotes", `{'a':1}`, ErrMalformed, nil},
		{"bare key", `{a:1}`, ErrMalformed, nil},
		{"missing colon", `{"a" 1}`, ErrMalformed, nil},
		{"leading zero", `{"a":01}`, ErrMalformed, nil},
		{"plus sign", `{"a":+1}`, ErrMalformed, nil},
		{"bare minus", `{"a":-}`, ErrMalformed, nil},
		{"dot without digits", `{"a":1.}`, ErrMalformed, nil},
		{"exponent without digits", `{"a":1e}`, ErrMalformed, nil},
		{"NaN", `{"a":NaN}`, ErrMalformed, nil},
		{"truncated literal", `{"a":tru}`, ErrMalformed, nil},
		{"raw control character", "{\"a\":\"x\ny\"}", ErrMalformed, nil},
		{"bad escape", `{"a":"\x"}`, ErrMalformed, nil},
		{"short unicode escape", `{"a":"\u12"}`, ErrMalformed, nil},
		{"comment", `{"a":1 /* no */}`, ErrMalformed, nil},
		{"depth 33", `{"a":` + deep(32) + `}`, ErrTooDeep, nil},
		{"129 members", many(129), ErrTooManyMembers, nil},
		{"duplicate key", `{"a":1,"a":2}`, ErrDuplicateKey, nil},
		{"duplicate key by escape", `{"a":1,"\u0061":2}`, ErrDuplicateKey, nil},
		{"nested duplicate key", `{"x":[{"a":1,"a":2}]}`, ErrDuplicateKey, nil},
		{"invalid UTF-8", "{\"a\":\"\xff\"}", ErrEncoding, nil},
		{"UTF-8 surrogate", "{\"a\":\"\xed\xa0\x80\"}", ErrEncoding, nil},
		{"lone high surrogate", `{"a":"\ud800"}`, ErrEncoding, nil},
		{"lone low surrogate", `{"a":"\udc00"}`, ErrEncoding, nil},
		{"high then not low", `{"a":"\ud800\u0041"}`, ErrEncoding, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Body
			err := b.Parse([]byte(tt.body))
			if !errors.Is(err, tt.err) {
				t.Fatalf("Parse = %v, want %v", err, tt.err)
			}
			if err != nil || tt.keys == nil {
				return
			}
			var got []string
			for i := range b.Len() {
				got = append(got, string(b.Key(i)))
			}
			if !reflect.DeepEqual(got, tt.keys) {
				t.Errorf("keys = %q, want %q", got, tt.keys)
			}
		})
	}
}

// TestBodyReuse: a Body parsed twice holds only the second body's members.
func TestBodyReuse(t *testing.T) {
	var b Body
	if err := b.Parse([]byte(mixedBody)); err != nil {
		t.Fatal(err)
	}
	if err := b.Parse([]byte(`{"only":[1]}`)); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 1 || string(b.Key(0)) != `"only"` || string(b.Value(0)) != `[1]` {
		t.Errorf("after reuse: %d members, first %s = %s", b.Len(), b.Key(0), b.Value(0))
	}
	if err := b.Parse([]byte(`{"a":1,"a":2}`)); err == nil {
		t.Fatal("duplicate accepted after reuse")
	}
	if err := b.Parse([]byte(`{"a":1}`)); err != nil {
		t.Fatalf("a failed parse poisoned the next one: %v", err)
	}
}

// TestReencode: every value comes out with the same meaning (encoding/json decodes both to
// the same thing), strings written the JSON.stringify way.
func TestReencode(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"solidus and unicode decoded", `"a\/b\u00e9\ud83d\ude00"`, `"a/bé😀"`},
		{"control escapes the short way", `"\u0008\u0009\u000a\u000c\u000d"`, `"\b\t\n\f\r"`},
		{"other controls lowercase", `"\u001F\u0000"`, `"\u001f\u0000"`},
		{"quote and backslash", `"\u0022\u005c"`, `"\"\\"`},
		{"html kept", `"<script>&"`, `"<script>&"`},
		{"line separator kept", "\"\u2028\"", "\"\u2028\""},
		{"number as written", `-1.50E+07`, `-1.50E+07`},
		{"empty containers", `[{}, []]`, "[\n  {},\n  []\n]"},
		{"nested", `{"a":[1,{"b":null}]}`, "{\n  \"a\": [\n    1,\n    {\n      \"b\": null\n    }\n  ]\n}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e encoder
			rest := e.appendValue([]byte(tt.in))
			if len(bytes.TrimSpace(rest)) != 0 {
				t.Errorf("rest %q", rest)
			}
			if got := string(e.buf); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

// FuzzParseBody checks the scanner against encoding/json: what it accepts is valid JSON,
// an object, and re-encodes to the same value; what it calls malformed, encoding/json
// refuses too.
func FuzzParseBody(f *testing.F) {
	for _, s := range []string{`{"foo1":"bar"}`, mixedBody, `{}`, `[]`, `{"a":"\ud83d\ude00"}`,
		`{"a":{"b":[1,2,{"c":true}]},"d":-0.5e3}`, `{"a":1,"a":2}`, "{\"\xff\":1}", `{"a":"\u0000"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		var b Body
		err := b.Parse(src)
		valid := json.Valid(src)
		switch {
		case err == nil:
			if !valid {
				t.Fatalf("accepted invalid JSON %q", src)
			}
		case errors.Is(err, ErrMalformed), errors.Is(err, ErrBodyEmpty):
			if valid {
				t.Fatalf("called valid JSON %q malformed", src)
			}
			return
		case errors.Is(err, ErrEncoding):
			if utf8.Valid(src) && !bytes.Contains(src, []byte(`\u`)) {
				t.Fatalf("encoding error for valid UTF-8 without escapes: %q", src)
			}
			return
		case errors.Is(err, ErrTooDeep):
			return // found before the rest was checked
		default:
			if !valid {
				t.Fatalf("%v for invalid JSON %q, want ErrMalformed", err, src)
			}
			return
		}
		var in map[string]any
		d := json.NewDecoder(bytes.NewReader(src))
		d.UseNumber()
		if err := d.Decode(&in); err != nil {
			t.Fatalf("accepted %q, which encoding/json does not decode as an object: %v", src, err)
		}
		if len(in) != b.Len() {
			t.Fatalf("%d members, encoding/json sees %d", b.Len(), len(in))
		}
		for i := range b.Len() {
			var k string
			if err := json.Unmarshal(b.Key(i), &k); err != nil {
				t.Fatalf("key %s: %v", b.Key(i), err)
			}
			var e encoder
			e.appendValue(b.Value(i))
			d := json.NewDecoder(bytes.NewReader(e.buf))
			d.UseNumber()
			var v any
			if err := d.Decode(&v); err != nil {
				t.Fatalf("re-encoded %s is not JSON: %v", e.buf, err)
			}
			if !reflect.DeepEqual(v, in[k]) {
				t.Fatalf("member %q: re-encoded %#v, want %#v", k, v, in[k])
			}
		}
	})
}

func itoa(i int) string {
	var b [20]byte
	return string(appendPadded(b[:0], int64(i), 1))
}
