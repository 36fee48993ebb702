package token

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// This file is a JSON scanner that accepts exactly what encoding/json's Unmarshal into a
// map[string]any accepts for a JWT header or payload, without building the map: the same
// syntax (its scanner's grammar and whitespace), a top-level object, numbers within
// float64's range wherever they are, and string values decoded as encoding/json's unquote
// does (invalid UTF-8 and lone surrogates become U+FFFD).
//
// encoding/json also refuses nesting deeper than 10000; a segment decoded from at most
// MaxAuthorizationLen bytes cannot reach that, so the scanner needs no such limit.

// nesting is a bit stack of open containers (1 = object), deep enough for any segment.
type nesting [maxDecodedLen/64 + 1]uint64

func (n *nesting) set(depth int, object bool) {
	w, b := depth/64, uint(depth%64)
	if object {
		n[w] |= 1 << b
	} else {
		n[w] &^= 1 << b
	}
}

func (n *nesting) object(depth int) bool { return n[depth/64]&(1<<uint(depth%64)) != 0 }

// scanObject reports whether data is one JSON object as encoding/json accepts it. For each
// names[k] it sets vals[k] to the raw JSON value of the last member with that name
// (duplicate names: the last wins, as in encoding/json), or leaves it nil.
func scanObject(data []byte, names []string, vals *[4][]byte, st *nesting) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return skipSpace(data, i+1) == len(data)
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return false
		}
		end, escaped, ok := scanString(data, i)
		if !ok {
			return false
		}
		key := data[i+1 : end-1]
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		start := skipSpace(data, i+1)
		if i, ok = skipValue(data, start, st); !ok {
			return false
		}
		for k, name := range names {
			if escaped && unquotedEquals(key, name) || !escaped && string(key) == name {
				vals[k] = data[start:i]
				break
			}
		}
		i = skipSpace(data, i)
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return skipSpace(data, i+1) == len(data)
		default:
			return false
		}
	}
}

// skipValue checks the JSON value at data[i:] (leading whitespace allowed) and returns the
// index just after it. It walks nested containers with st instead of recursion, so the work
// is linear and the stack flat whatever the input.
func skipValue(data []byte, i int, st *nesting) (int, bool) {
	depth := 0
	var ok bool
value:
	for {
		i = skipSpace(data, i)
		if i >= len(data) {
			return i, false
		}
		switch c := data[i]; c {
		case '{':
			i = skipSpace(data, i+1)
			if i < len(data) && data[i] == '}' {
				i++
				break
			}
			st.set(depth, true)
			depth++
			if i, ok = memberName(data, i); !ok {
				return i, false
			}
			continue value
		case '[':
			i = skipSpace(data, i+1)
			if i < len(data) && data[i] == ']' {
				i++
				break
			}
			st.set(depth, false)
			depth++
			continue value
		case '"':
			if i, _, ok = scanString(data, i); !ok {
				return i, false
			}
		case 't':
			if i, ok = literal(data, i, "true"); !ok {
				return i, false
			}
		case 'f':
			if i, ok = literal(data, i, "false"); !ok {
				return i, false
			}
		case 'n':
			if i, ok = literal(data, i, "null"); !ok {
				return i, false
			}
		default:
			start := i
			if i, ok = scanNumber(data, i); !ok || !numberInRange(data[start:i]) {
				return i, false
			}
		}
		// A value is complete: close containers until one continues with a comma.
		for {
			if depth == 0 {
				return i, true
			}
			i = skipSpace(data, i)
			if i >= len(data) {
				return i, false
			}
			object := st.object(depth - 1)
			switch c := data[i]; {
			case c == ',' && object:
				if i, ok = memberName(data, skipSpace(data, i+1)); !ok {
					return i, false
				}
				continue value
			case c == ',':
				i++
				continue value
			case c == '}' && object, c == ']' && !object:
				i++
				depth--
			default:
				return i, false
			}
		}
	}
}

// memberName checks a member's name and colon at data[i:] and returns the index after the
// colon.
func memberName(data []byte, i int) (int, bool) {
	if i >= len(data) || data[i] != '"' {
		return i, false
	}
	i, _, ok := scanString(data, i)
	if !ok {
		return i, false
	}
	i = skipSpace(data, i)
	if i >= len(data) || data[i] != ':' {
		return i, false
	}
	return i + 1, true
}

// skipSpace returns the index of the first byte at or after i that is not JSON whitespace.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func literal(data []byte, i int, word string) (int, bool) {
	if len(data)-i < len(word) || string(data[i:i+len(word)]) != word {
		return i, false
	}
	return i + len(word), true
}

// scanString checks the JSON string starting at data[i] == '"' and returns the index after
// its closing quote and whether it contains escapes. Bytes from 0x20 up are accepted as
// they are, invalid UTF-8 included, as encoding/json's scanner does.
func scanString(data []byte, i int) (end int, escaped, ok bool) {
	for i++; i < len(data); {
		c := data[i]
		switch {
		case c == '"':
			return i + 1, escaped, true
		case c == '\\':
			escaped = true
			if i+1 >= len(data) {
				return i, false, false
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(data)-i < 6 || hex4(data[i+2:i+6]) < 0 {
					return i, false, false
				}
				i += 6
			default:
				return i, false, false
			}
		case c < 0x20:
			return i, false, false
		default:
			i++
		}
	}
	return i, false, false
}

// scanNumber checks the JSON number at data[i:] and returns the index after it:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(data []byte, i int) (int, bool) {
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		i = digits(data, i+1)
	default:
		return i, false
	}
	if i < len(data) && data[i] == '.' {
		j := digits(data, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		j := digits(data, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

func digits(data []byte, i int) int {
	for i < len(data) && data[i] >= '0' && data[i] <= '9' {
		i++
	}
	return i
}

// numberInRange reports whether the valid JSON number lit fits a float64, the one number
// encoding/json refuses when it decodes into an interface (underflow is not an error).
func numberInRange(lit []byte) bool {
	// Without an exponent, fewer than 300 bytes cannot reach 1e300.
	if len(lit) < 300 {
		plain := true
		for _, c := range lit {
			if c == 'e' || c == 'E' {
				plain = false
				break
			}
		}
		if plain {
			return true
		}
	}
	_, err := strconv.ParseFloat(string(lit), 64)
	return err == nil
}

// hex4 returns the value of four hex digits, or -1.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// decodeRune decodes one character of the contents s of a valid JSON string at s[i:],
// exactly as encoding/json's unquote does, and returns it and the bytes it took.
func decodeRune(s []byte, i int) (rune, int) {
	if s[i] != '\\' {
		// Invalid UTF-8 comes back as (RuneError, 1): one U+FFFD per bad byte.
		return utf8.DecodeRune(s[i:])
	}
	switch c := s[i+1]; c {
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		r := hex4(s[i+2 : i+6])
		if !utf16.IsSurrogate(r) {
			return r, 6
		}
		// A surrogate pair takes two escapes; anything else is U+FFFD for the first alone.
		if len(s)-i >= 12 && s[i+6] == '\\' && s[i+7] == 'u' {
			if dec := utf16.DecodeRune(r, hex4(s[i+8:i+12])); dec != utf8.RuneError {
				return dec, 12
			}
		}
		return utf8.RuneError, 6
	default: // '"', '\\', '/'
		return rune(c), 2
	}
}

// appendUnquoted appends the decoded contents s of a valid JSON string to dst.
func appendUnquoted(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf && c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		r, n := decodeRune(s, i)
		dst = utf8.AppendRune(dst, r)
		i += n
	}
	return dst
}

// unquotedEquals reports whether the contents s of a valid JSON string decode to the ASCII
// string name.
func unquotedEquals(s []byte, name string) bool {
	j := 0
	for i := 0; i < len(s); j++ {
		r, n := decodeRune(s, i)
		if j >= len(name) || r != rune(name[j]) {
			return false
		}
		i += n
	}
	return j == len(name)
}
