package heavy

import (
	"strconv"
	"unicode/utf8"

	"github.com/onehost/onehost/internal/jsonstr"
)

// maxIndentDepth bounds the nesting the encoder can indent: the response's own three
// levels plus a body nested MaxDepth deep.
const maxIndentDepth = 4 + MaxDepth

// newlineIndent is a newline followed by enough spaces for maxIndentDepth levels.
const newlineIndent = "\n" +
	"                                                                " +
	"                                                                "

// A negative constant converted to uint does not compile: newlineIndent is long enough.
const _ = uint(len(newlineIndent) - 1 - 2*maxIndentDepth)

// encoder appends pretty-printed JSON to buf in the layout of JavaScript's
// JSON.stringify(v, null, 2): every member and element on its own line, indented two
// spaces per level, `"key": value`, and `{}` / `[]` for empty containers.
//
// Members are written as key(k) followed by one value call; elements as elem() followed by
// one value call; containers with open and close. The encoder keeps one bit of state, so
// callers must pair these correctly (the package's own code does; tests check the output
// with encoding/json).
type encoder struct {
	buf   []byte
	depth int
	first bool // nothing written yet in the innermost open container
}

func (e *encoder) open(c byte) {
	e.buf = append(e.buf, c)
	e.depth++
	e.first = true
}

func (e *encoder) close(c byte) {
	e.depth--
	if !e.first {
		e.buf = append(e.buf, newlineIndent[:1+2*e.depth]...)
	}
	e.buf = append(e.buf, c)
	e.first = false
}

// key starts a member named k, which must need no escaping (the package's constants).
func (e *encoder) key(k string) {
	if !e.first {
		e.buf = append(e.buf, ',')
	}
	e.first = false
	e.buf = append(e.buf, newlineIndent[:1+2*e.depth]...)
	e.buf = append(e.buf, '"')
	e.buf = append(e.buf, k...)
	e.buf = append(e.buf, '"', ':', ' ')
}

// keyJSON starts a member whose key is the already-quoted JSON string q.
func (e *encoder) keyJSON(q []byte) {
	if !e.first {
		e.buf = append(e.buf, ',')
	}
	e.first = false
	e.buf = append(e.buf, newlineIndent[:1+2*e.depth]...)
	e.buf = append(e.buf, q...)
	e.buf = append(e.buf, ':', ' ')
}

// elem starts an array element.
func (e *encoder) elem() {
	if !e.first {
		e.buf = append(e.buf, ',')
	}
	e.first = false
	e.buf = append(e.buf, newlineIndent[:1+2*e.depth]...)
}

// plain appends s as a JSON string; s must need no escaping (generated text).
func (e *encoder) plain(s string) {
	e.buf = append(e.buf, '"')
	e.buf = append(e.buf, s...)
	e.buf = append(e.buf, '"')
}

func (e *encoder) bool(v bool) {
	if v {
		e.buf = append(e.buf, "true"...)
	} else {
		e.buf = append(e.buf, "false"...)
	}
}

func (e *encoder) int(v int64) { e.buf = strconv.AppendInt(e.buf, v, 10) }

// appendNormalized appends, quoted, the string whose JSON source between the quotes is
// raw (already validated by the scanner), written as JSON.stringify(JSON.parse(...))
// would: escapes that JSON.stringify does not use are decoded (\/, \u00e9 and surrogate
// pairs become the characters), the ones it uses are written its way (\u000A becomes
// \n, \u001f stays lowercase). Two strings are equal exactly when their normalized forms
// are, which is how body keys are compared.
func appendNormalized(dst, raw []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(raw); {
		if raw[i] != '\\' {
			i++
			continue
		}
		dst = append(dst, raw[start:i]...)
		c := raw[i+1]
		i += 2
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '/':
			dst = append(dst, '/')
		case 'b', 'f', 'n', 'r', 't':
			dst = append(dst, '\\', c)
		case 'u':
			r := rune(hexVal(raw[i : i+4]))
			i += 4
			if r >= 0xD800 && r < 0xDC00 { // the scanner checked that a low surrogate follows
				lo := rune(hexVal(raw[i+2 : i+6]))
				i += 6
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
			}
			if r < 0x20 || r == '"' || r == '\\' {
				dst = jsonstr.AppendEscape(dst, byte(r))
			} else {
				dst = utf8.AppendRune(dst, r)
			}
		}
		start = i
	}
	dst = append(dst, raw[start:]...)
	return append(dst, '"')
}

// hexVal decodes four hex digits (already validated).
func hexVal(h []byte) int {
	v := 0
	for _, c := range h[:4] {
		v <<= 4
		switch {
		case c <= '9':
			v |= int(c - '0')
		case c <= 'F':
			v |= int(c - 'A' + 10)
		default:
			v |= int(c - 'a' + 10)
		}
	}
	return v
}
