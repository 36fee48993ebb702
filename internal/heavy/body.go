package heavy

import (
	"errors"
	"unicode/utf8"
)

// Limits on a request body, besides its size (Config.MaxBodyBytes).
const (
	// MaxDepth bounds the nesting of objects and arrays; the body itself is level 1.
	MaxDepth = 32
	// MaxMembers bounds the members of any one object in the body.
	MaxMembers = 128
)

// Errors of Body.Parse: each is a 400 with its text as the message.
var (
	ErrBodyEmpty      = errors.New("request body is empty: want a JSON object")
	ErrMalformed      = errors.New("request body is not valid JSON")
	ErrNotObject      = errors.New("request body must be a JSON object")
	ErrTooDeep        = errors.New("request body nests more than 32 levels deep")
	ErrTooManyMembers = errors.New("an object in the request body has more than 128 members")
	ErrDuplicateKey   = errors.New("an object in the request body has a duplicate key")
	ErrEncoding       = errors.New("request body is not valid UTF-8 or has a lone surrogate escape")
)

// Body is a parsed request body: a JSON object checked against RFC 8259 and the stricter
// rules of I-JSON (RFC 7493) that make its meaning unambiguous: valid UTF-8, no lone
// surrogate escapes, no duplicate keys in any object. Its top-level members are kept in
// order, as spans of the source; nothing is decoded into Go values.
//
// A Body is reused: Parse resets it, and the spans point into the slice last parsed, so
// they are valid only as long as that slice is.
type Body struct {
	src     []byte
	keys    []byte   // normalized, quoted keys back to back (see appendNormalized)
	members []member // the top-level members
	open    []span   // keys of the objects being scanned, for the duplicate check
}

type span struct{ start, end int }

type member struct {
	key span // in keys
	val span // in src
}

// Parse checks src and keeps its top-level members. It returns one of the package's
// Err* values when src is not an acceptable body. A body with several faults gets the
// first of: ErrTooDeep or ErrEncoding where met, ErrMalformed, ErrNotObject, and then
// ErrTooManyMembers or ErrDuplicateKey, which are reported only for otherwise valid JSON.
func (b *Body) Parse(src []byte) error {
	b.src = src
	b.keys = b.keys[:0]
	b.members = b.members[:0]
	b.open = b.open[:0]
	p := scanner{b: b, s: src}
	p.ws()
	if p.i == len(src) {
		return ErrBodyEmpty
	}
	isObject := src[p.i] == '{'
	if err := p.value(0, true); err != nil {
		return err
	}
	p.ws()
	if p.i != len(src) {
		return ErrMalformed
	}
	if !isObject {
		return ErrNotObject
	}
	return p.late
}

// Len returns the number of top-level members.
func (b *Body) Len() int { return len(b.members) }

// Key returns member i's key as a normalized JSON string literal, quotes included.
func (b *Body) Key(i int) []byte {
	k := b.members[i].key
	return b.keys[k.start:k.end]
}

// Value returns member i's value as it appears in the source.
func (b *Body) Value(i int) []byte {
	v := b.members[i].val
	return b.src[v.start:v.end]
}

// find returns the index of the member whose key is name (which needs no escaping), or -1.
func (b *Body) find(name string) int {
	for i, m := range b.members {
		k := b.keys[m.key.start:m.key.end]
		if len(k) == len(name)+2 && string(k[1:len(k)-1]) == name {
			return i
		}
	}
	return -1
}

// scanner validates JSON text by recursive descent; the depth limit bounds the recursion.
type scanner struct {
	b    *Body
	s    []byte
	i    int
	late error // the first fault that does not stop the scan
}

func (p *scanner) fault(err error) {
	if p.late == nil {
		p.late = err
	}
}

func (p *scanner) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// value scans one value starting at or after p.i (white space first). depth is the
// nesting of the enclosing container; top marks the body itself.
func (p *scanner) value(depth int, top bool) error {
	p.ws()
	if p.i >= len(p.s) {
		return ErrMalformed
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.object(depth+1, top)
	case c == '[':
		return p.array(depth + 1)
	case c == '"':
		_, err := p.str()
		return err
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || isDigit(c):
		return p.number()
	}
	return ErrMalformed
}

func (p *scanner) literal(lit string) error {
	if len(p.s)-p.i < len(lit) || string(p.s[p.i:p.i+len(lit)]) != lit {
		return ErrMalformed
	}
	p.i += len(lit)
	return nil
}

func (p *scanner) object(depth int, top bool) error {
	if depth > MaxDepth {
		return ErrTooDeep
	}
	b := p.b
	p.i++ // '{'
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return nil
	}
	// The keys of this object are normalized into b.keys and remembered in b.open above
	// base; a nested object's keys are dropped when it ends, the top level's are kept.
	base, keysBase := len(b.open), len(b.keys)
	for {
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != '"' {
			return ErrMalformed
		}
		raw, err := p.str()
		if err != nil {
			return err
		}
		// Too many members and duplicate keys are reported after the whole body has
		// been checked, so that a body that is also malformed is called malformed.
		var k span
		if len(b.open)-base == MaxMembers {
			p.fault(ErrTooManyMembers)
		} else if p.late == nil {
			k.start = len(b.keys)
			b.keys = appendNormalized(b.keys, raw)
			k.end = len(b.keys)
			key := b.keys[k.start:k.end]
			for _, o := range b.open[base:] {
				if string(b.keys[o.start:o.end]) == string(key) {
					p.fault(ErrDuplicateKey)
					break
				}
			}
			b.open = append(b.open, k)
		}
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return ErrMalformed
		}
		p.i++
		p.ws()
		v := span{start: p.i}
		if err := p.value(depth, false); err != nil {
			return err
		}
		if top {
			v.end = p.i
			b.members = append(b.members, member{key: k, val: v})
		}
		p.ws()
		if p.i >= len(p.s) {
			return ErrMalformed
		}
		switch p.s[p.i] {
		case ',':
			p.i++
			continue
		case '}':
			p.i++
			b.open = b.open[:base]
			if !top {
				b.keys = b.keys[:keysBase]
			}
			return nil
		}
		return ErrMalformed
	}
}

func (p *scanner) array(depth int) error {
	if depth > MaxDepth {
		return ErrTooDeep
	}
	p.i++ // '['
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == ']' {
		p.i++
		return nil
	}
	for {
		if err := p.value(depth, false); err != nil {
			return err
		}
		p.ws()
		if p.i >= len(p.s) {
			return ErrMalformed
		}
		switch p.s[p.i] {
		case ',':
			p.i++
			continue
		case ']':
			p.i++
			return nil
		}
		return ErrMalformed
	}
}

// str scans a string literal at p.i and returns its source between the quotes.
func (p *scanner) str() ([]byte, error) {
	s := p.s
	start := p.i + 1
	for i := start; i < len(s); {
		c := s[i]
		switch {
		case c == '"':
			p.i = i + 1
			return s[start:i], nil
		case c == '\\':
			if i+1 >= len(s) {
				return nil, ErrMalformed
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				r, ok := hex4(s, i+2)
				if !ok {
					return nil, ErrMalformed
				}
				i += 6
				switch {
				case r >= 0xDC00 && r < 0xE000:
					return nil, ErrEncoding // a low surrogate without a high one
				case r >= 0xD800 && r < 0xDC00:
					if i+1 >= len(s) || s[i] != '\\' || s[i+1] != 'u' {
						return nil, ErrEncoding
					}
					lo, ok := hex4(s, i+2)
					if !ok {
						return nil, ErrMalformed
					}
					if lo < 0xDC00 || lo >= 0xE000 {
						return nil, ErrEncoding
					}
					i += 6
				}
			default:
				return nil, ErrMalformed
			}
		case c < 0x20:
			return nil, ErrMalformed
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, ErrEncoding
			}
			i += size
		}
	}
	return nil, ErrMalformed
}

// hex4 decodes the four hex digits at s[i:].
func hex4(s []byte, i int) (int, bool) {
	if len(s)-i < 4 {
		return 0, false
	}
	v := 0
	for _, c := range s[i : i+4] {
		v <<= 4
		switch {
		case '0' <= c && c <= '9':
			v |= int(c - '0')
		case 'a' <= c && c <= 'f':
			v |= int(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			v |= int(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (p *scanner) number() error {
	s, i := p.s, p.i
	if s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && isDigit(s[i]):
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	default:
		return ErrMalformed
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || !isDigit(s[i]) {
			return ErrMalformed
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || !isDigit(s[i]) {
			return ErrMalformed
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	p.i = i
	return nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// appendValue re-encodes the JSON value at the start of src (text the scanner accepted)
// with e, in the encoder's layout: containers re-indented, strings normalized, numbers and
// literals as written. It returns the rest of src after the value.
func (e *encoder) appendValue(src []byte) []byte {
	src = skipWS(src)
	switch src[0] {
	case '{':
		e.open('{')
		src = skipWS(src[1:])
		for src[0] != '}' {
			if src[0] == ',' {
				src = skipWS(src[1:])
			}
			n := stringLen(src)
			if !e.first {
				e.buf = append(e.buf, ',')
			}
			e.first = false
			e.buf = append(e.buf, newlineIndent[:1+2*e.depth]...)
			e.buf = appendNormalized(e.buf, src[1:n-1])
			e.buf = append(e.buf, ':', ' ')
			src = skipWS(src[n:])[1:] // the ':'
			src = skipWS(e.appendValue(src))
		}
		e.close('}')
		return src[1:]
	case '[':
		e.open('[')
		src = skipWS(src[1:])
		for src[0] != ']' {
			if src[0] == ',' {
				src = src[1:]
			}
			e.elem()
			src = skipWS(e.appendValue(src))
		}
		e.close(']')
		return src[1:]
	case '"':
		n := stringLen(src)
		e.buf = appendNormalized(e.buf, src[1:n-1])
		return src[n:]
	}
	n := 1
	for n < len(src) && !isDelim(src[n]) {
		n++
	}
	e.buf = append(e.buf, src[:n]...)
	return src[n:]
}

func skipWS(s []byte) []byte {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r') {
		s = s[1:]
	}
	return s
}

// stringLen returns the length of the (valid) string literal at the start of s, quotes
// included.
func stringLen(s []byte) int {
	for i := 1; ; i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
}

func isDelim(c byte) bool {
	return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r'
}
