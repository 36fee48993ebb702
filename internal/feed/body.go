package feed

import (
	"encoding/json"
	"errors"
	"unicode/utf8"
	"unsafe"
)

// The request-body errors of POST /posts; their messages are the contract's error messages.
var (
	ErrMalformedJSON = errors.New("malformed JSON body")
	ErrBodyRequired  = errors.New("body is required")
	ErrBodyTooLong   = errors.New("body must be at most 500 characters")
)

// MaxBodyChars is the most code points a post body may have after trimming.
const MaxBodyChars = 500

// ParseCreateBody returns the post text carried by a POST /posts request body: the string
// member "body" of a JSON object, with JavaScript's String.prototype.trim applied.
//
// The rules, with the choices where the contract leaves room:
//   - The request body must be exactly one JSON value (json.Valid: no trailing bytes, no
//     comments, no BOM); anything else, the empty body included, is ErrMalformedJSON.
//   - A valid JSON value that is not an object (a string, number, array, true, false or
//     null) has no "body" member: ErrBodyRequired. The contract allows either error here;
//     this is what the challenge's Node entry answers (JSON.parse succeeds, then the member
//     is missing), so a client of either sees the same thing.
//   - Member names are compared after unescaping ("b\u006fdy" is "body"); when "body"
//     appears more than once the last one wins, as in JavaScript and encoding/json.
//   - "body" missing, not a string, or empty after trimming is ErrBodyRequired.
//   - Escapes are decoded as encoding/json decodes them: a surrogate pair becomes its code
//     point; a lone surrogate (\ud800 not followed by a low surrogate \udc00–\udfff) becomes
//     U+FFFD, as does each byte of invalid UTF-8. JavaScript would keep a lone surrogate in
//     its UTF-16 string, but it cannot be stored as UTF-8 text; U+FFFD keeps the length the
//     same (one code point either way).
//   - Trimming removes, at both ends, exactly JavaScript's white space and line terminators:
//     U+0009–U+000D, U+0020, U+00A0, U+1680, U+2000–U+200A, U+2028, U+2029, U+202F, U+205F,
//     U+3000 and U+FEFF (not U+0085, U+180E or U+200B).
//   - The length is counted in code points, as SQLite's length() counts: more than
//     MaxBodyChars is ErrBodyTooLong.
//
// It reflects on nothing: one validation pass (json.Valid), one pass to find the member,
// and one allocation, the returned string.
func ParseCreateBody(body []byte) (string, error) {
	if !json.Valid(body) {
		return "", ErrMalformedJSON
	}
	i := skipSpace(body, 0)
	if body[i] != '{' {
		return "", ErrBodyRequired
	}
	var value []byte // the raw text of the last "body" member's value
	i = skipSpace(body, i+1)
	for body[i] != '}' {
		keyEnd := stringEnd(body, i)
		isBody := keyIsBody(body[i+1 : keyEnd-1])
		i = skipSpace(body, keyEnd)
		i = skipSpace(body, i+1) // past ':'
		valueEnd := valueEnd(body, i)
		if isBody {
			value = body[i:valueEnd]
		}
		i = skipSpace(body, valueEnd)
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
	}
	if len(value) == 0 || value[0] != '"' {
		return "", ErrBodyRequired
	}
	text := value[1 : len(value)-1]
	decoded := !plainString(text)
	if decoded {
		text = unquote(make([]byte, 0, len(text)), text)
	}
	text = trimJSSpace(text)
	if len(text) == 0 {
		return "", ErrBodyRequired
	}
	if len(text) > MaxBodyChars && utf8.RuneCount(text) > MaxBodyChars {
		return "", ErrBodyTooLong
	}
	if decoded {
		// The buffer is this call's own and nothing else refers to it: no second copy.
		return unsafe.String(unsafe.SliceData(text), len(text)), nil
	}
	return string(text), nil
}

// The scanners below run only on input json.Valid accepted, so they check nothing.

// skipSpace returns the index of the first byte at or after i that is not JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string literal that starts at b[i] == '"'.
func stringEnd(b []byte, i int) int {
	for i++; ; i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
}

// valueEnd returns the index just past the JSON value that starts at b[i].
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = stringEnd(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	default: // a number, true, false or null
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// keyIsBody reports whether the member name whose literal text (between the quotes) is raw
// unescapes to "body".
func keyIsBody(raw []byte) bool {
	if string(raw) == "body" {
		return true
	}
	// Four characters written as \uXXXX take 24 bytes; a longer name is not "body".
	if len(raw) > 24 || plainString(raw) {
		return false
	}
	var buf [32]byte
	return string(unquote(buf[:0], raw)) == "body"
}

// plainString reports whether the literal text raw needs no unescaping: no backslash and
// valid UTF-8 (json.Valid already excluded quotes and control characters).
func plainString(raw []byte) bool {
	for _, c := range raw {
		if c == '\\' {
			return false
		}
	}
	return utf8.Valid(raw)
}

// unquote appends the string that the literal text raw (between the quotes, valid JSON)
// denotes, decoded as encoding/json decodes it: see ParseCreateBody for surrogates and
// invalid UTF-8.
func unquote(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			switch raw[i+1] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(raw[i+2 : i+6])
				i += 6
				if r >= 0xd800 && r < 0xe000 {
					// A high surrogate followed by an escaped low surrogate is a pair;
					// anything else is one U+FFFD, and whatever follows is read anew.
					if r < 0xdc00 && i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						if r2 := hex4(raw[i+2 : i+6]); r2 >= 0xdc00 && r2 < 0xe000 {
							r = 0x10000 + (r-0xd800)<<10 + (r2 - 0xdc00)
							i += 6
						} else {
							r = utf8.RuneError
						}
					} else {
						r = utf8.RuneError
					}
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // '"', '\\', '/'
				dst = append(dst, raw[i+1])
			}
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			dst = utf8.AppendRune(dst, r) // U+FFFD for each byte of invalid UTF-8
			i += size
		}
	}
	return dst
}

// hex4 decodes four hexadecimal digits (valid JSON guarantees them).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// trimJSSpace removes JavaScript's white space and line terminators (the set of
// String.prototype.trim) from both ends of the valid UTF-8 text s.
func trimJSSpace(s []byte) []byte {
	for len(s) > 0 {
		r, size := rune(s[0]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRune(s)
		}
		if !isJSSpace(r) {
			break
		}
		s = s[size:]
	}
	for len(s) > 0 {
		r, size := rune(s[len(s)-1]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeLastRune(s)
		}
		if !isJSSpace(r) {
			break
		}
		s = s[:len(s)-size]
	}
	return s
}

// isJSSpace reports whether r is in the set String.prototype.trim removes (ECMAScript's
// WhiteSpace and LineTerminator productions, Unicode 15 "Zs" included).
func isJSSpace(r rune) bool {
	switch {
	case r == ' ' || (r >= '\t' && r <= '\r'):
		return true
	case r < 0xa0:
		return false
	case r == 0xa0 || r == 0x1680 || (r >= 0x2000 && r <= 0x200a) || r == 0x2028 ||
		r == 0x2029 || r == 0x202f || r == 0x205f || r == 0x3000 || r == 0xfeff:
		return true
	}
	return false
}
