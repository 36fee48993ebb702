// Package contentcoding chooses an HTTP content coding for a response (RFC 9110 12.5.3):
// among the codings a route offers, the one a request's Accept-Encoding weighs highest,
// ties going to the server's order of preference, identity always last.
//
// It parses the header in place with no allocation (it runs on every request of a route
// that offers a coding) and never fails: an item it cannot read is ignored, as a
// malformed preference should not cost the client its answer.
package contentcoding

import "fmt"

// Coding is a content coding.
type Coding uint8

// The codings this project serves.
const (
	Identity Coding = iota
	Gzip
	Zstd
	Br
	numCodings
)

var names = [numCodings]string{"identity", "gzip", "zstd", "br"}

// String returns the coding's token, as Content-Encoding and Accept-Encoding write it.
func (c Coding) String() string {
	if c < numCodings {
		return names[c]
	}
	return fmt.Sprintf("coding(%d)", uint8(c))
}

// Parse returns the coding named name (case-insensitive; x-gzip is gzip, RFC 9110 8.4.1.3).
func Parse(name string) (Coding, error) {
	if c, ok := lookup([]byte(name)); ok {
		return c, nil
	}
	return 0, fmt.Errorf("parse content coding %q: want identity, gzip, zstd or br", name)
}

func lookup(tok []byte) (Coding, bool) {
	switch {
	case equalFold(tok, "gzip"), equalFold(tok, "x-gzip"):
		return Gzip, true
	case equalFold(tok, "zstd"):
		return Zstd, true
	case equalFold(tok, "br"):
		return Br, true
	case equalFold(tok, "identity"):
		return Identity, true
	}
	return 0, false
}

// Weights in thousandths, doubled so that identity's implicit acceptability (weight 1)
// ranks below every coding the client lists with a q above zero, even q=0.001.
const (
	implicitIdentity = 1
	unset            = -1
)

// Negotiate returns the coding to answer with, given the request's Accept-Encoding value
// (nil when the request has none) and the codings the route offers, in the server's order
// of preference. identity needs no listing: it is offered always, and acceptable unless
// the request excludes it with identity;q=0, or *;q=0 without a word on identity. ok is
// false only when nothing offered is acceptable: the answer is then 406.
//
// No header means "no preference" (RFC 9110 12.5.3); like nginx and Go's servers we
// answer identity then, since a client that says nothing may not decode anything. An
// empty value asks for identity alone.
func Negotiate(accept []byte, offered []Coding) (c Coding, ok bool) {
	if accept == nil {
		return Identity, true
	}
	var w [numCodings]int
	for i := range w {
		w[i] = unset
	}
	star := unset
	for len(accept) > 0 {
		var item []byte
		item, accept = cut(accept, ',')
		tok, params := cut(item, ';')
		tok = trim(tok)
		if len(tok) == 0 {
			continue
		}
		q, valid := weight(params)
		if !valid {
			continue
		}
		if len(tok) == 1 && tok[0] == '*' {
			star = max(star, q)
			continue
		}
		if k, known := lookup(tok); known {
			w[k] = max(w[k], q)
		}
	}
	weightOf := func(k Coding) int {
		switch {
		case w[k] != unset:
			return w[k]
		case star != unset:
			return star
		case k == Identity:
			return implicitIdentity
		}
		return 0
	}
	best, bestW := Identity, weightOf(Identity)
	for _, k := range offered {
		if k == Identity || k >= numCodings {
			continue
		}
		// Strictly greater: on a tie the earlier (preferred) coding stays, and identity,
		// considered first, only wins when no coding is weighed above it.
		if kw := weightOf(k); kw > bestW || (kw == bestW && kw > 0 && best == Identity) {
			best, bestW = k, kw
		}
	}
	if bestW <= 0 {
		return Identity, false
	}
	return best, true
}

// weight reads the parameters after a coding (";q=0.5", with optional whitespace) and
// returns q in doubled thousandths. An item without q weighs 1; an item whose q is not
// a qvalue (RFC 9110 12.4.2: 0 to 1, three decimals at most) is invalid. Other
// parameters are not defined for Accept-Encoding and are ignored.
func weight(params []byte) (int, bool) {
	q := 2000
	for len(params) > 0 {
		var p []byte
		p, params = cut(params, ';')
		p = trim(p)
		if len(p) < 2 || (p[0] != 'q' && p[0] != 'Q') || p[1] != '=' {
			continue
		}
		v, ok := qvalue(p[2:])
		if !ok {
			return 0, false
		}
		q = v * 2
	}
	return q, true
}

func qvalue(b []byte) (int, bool) {
	if len(b) == 0 || (b[0] != '0' && b[0] != '1') {
		return 0, false
	}
	v := int(b[0]-'0') * 1000
	if len(b) == 1 {
		return v, true
	}
	if b[1] != '.' || len(b) > 5 {
		return 0, false
	}
	scale := 100
	for _, d := range b[2:] {
		if d < '0' || d > '9' {
			return 0, false
		}
		v += int(d-'0') * scale
		scale /= 10
	}
	if v > 1000 {
		return 0, false // 1.5
	}
	return v, true
}

func cut(b []byte, sep byte) (before, after []byte) {
	for i, c := range b {
		if c == sep {
			return b[:i], b[i+1:]
		}
	}
	return b, nil
}

func trim(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
