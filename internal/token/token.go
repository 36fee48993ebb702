// Package token verifies and signs the HS256 bearer tokens of the feed API.
//
// Verify is the per-request hot path: it checks an Authorization header value with no
// allocations in the steady state (a pooled, already keyed HMAC; a fast path for the
// standard header; a JSON scanner that looks only at the members the API needs). Its
// results are meant to equal, on every input, those of github.com/golang-jwt/jwt/v5
// (Parse with WithValidMethods([]string{"HS256"}), WithExpirationRequired and MapClaims)
// followed by the feed API's own claim rules; the package's tests check that claim
// against golang-jwt directly, by table, differentially and by fuzzing.
//
// Decisions where the feed API's spec and golang-jwt could be read differently (golang-jwt
// wins on everything about the JWT itself, the spec on the API's own claims):
//   - base64url exactly as encoding/base64.RawURLEncoding decodes it, as golang-jwt does by
//     default: padding and the standard alphabet ('+', '/') are invalid, non-zero trailing
//     bits are accepted, and '\r' and '\n' inside a segment are skipped.
//   - Header and payload as encoding/json decodes them into map[string]any: JSON objects,
//     invalid UTF-8 inside strings replaced by U+FFFD, duplicate names resolved by the last,
//     and any number beyond float64's range anywhere makes the token invalid.
//   - exp and nbf are truncated to whole seconds before they are compared, as golang-jwt
//     does: exp 1000.7 is expired at now 1000.2, and nbf 1000.7 is already valid then. A
//     value of 0 counts as absent (so exp 0 is a missing exp).
//   - sub must be a JSON string of 1 to 16 digits without a leading zero
//     (^[1-9][0-9]{0,15}$), as the challenge's Node entry checks it: "01" and
//     "99999999999999999999" are invalid token payloads. Escapes are decoded first, so
//     "\u0031" is user 1. username may be any JSON string, even empty.
//   - An Authorization value longer than MaxAuthorizationLen is invalid, so a huge token
//     costs bounded work; golang-jwt itself has no limit.
//
// Non-goals: other algorithms, key rotation, aud/iss/iat checks, clock leeway.
package token

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"hash"
	"math"
	"strconv"
	"sync"
	"time"
)

// Claims is what a valid token says.
type Claims struct {
	// UserID is the token's sub, between 1 and 9999999999999999.
	UserID int64
	// Username is the token's username, appended into the caller's buffer so that a
	// reused Claims costs no allocation. It is valid UTF-8.
	Username []byte
}

// The three ways a token is refused; each maps to one error message of the API.
var (
	// ErrMissing: no Authorization value, or one whose scheme is not Bearer (in any case)
	// followed by a space.
	ErrMissing = errors.New("missing bearer token")
	// ErrInvalid: malformed, wrong algorithm, bad signature, expired or not yet valid.
	ErrInvalid = errors.New("invalid or expired token")
	// ErrPayload: a valid token whose sub or username breaks the API's rules.
	ErrPayload = errors.New("invalid token payload")
)

// MaxAuthorizationLen is the longest Authorization value Verify accepts, prefix included;
// longer ones are ErrInvalid. Our tokens are about 200 bytes.
const MaxAuthorizationLen = 8 << 10

// maxDecodedLen bounds every decoded segment: base64 turns 4 bytes into at most 3.
const maxDecodedLen = MaxAuthorizationLen / 4 * 3

// bearer is the scheme, lowercase; schemes compare case-insensitively (RFC 9110 11.1).
const bearer = "bearer"

// stdHeader is {"alg":"HS256","typ":"JWT"} encoded, the header of every token we and the
// official tests sign; Verify skips decoding and parsing it.
const stdHeader = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"

// Verifier checks HS256 tokens signed with one secret. It is safe for concurrent use.
type Verifier struct {
	// scratch holds *scratch values, each with an HMAC already keyed with the secret.
	scratch sync.Pool
}

// scratch is the working memory of one Verify call.
type scratch struct {
	mac   hash.Hash
	sum   [sha256.Size]byte
	sig   [sha256.Size]byte
	buf   [maxDecodedLen]byte
	stack nesting
}

// NewVerifier returns a Verifier for tokens signed with secret (copied).
func NewVerifier(secret []byte) *Verifier {
	key := append([]byte(nil), secret...)
	v := &Verifier{}
	v.scratch.New = func() any { return &scratch{mac: hmac.New(sha256.New, key)} }
	return v
}

// Member indexes of payloadNames.
const (
	memberExp = iota
	memberNbf
	memberSub
	memberUsername
)

var (
	payloadNames = []string{memberExp: "exp", memberNbf: "nbf", memberSub: "sub", memberUsername: "username"}
	headerNames  = []string{"alg"}
)

// Verify checks an Authorization header value (the raw bytes, e.g. "Bearer eyJ...") at
// time now. It returns nil and fills c, reusing c.Username's storage, or returns
// ErrMissing, ErrInvalid or ErrPayload and leaves c zero (Username empty).
func (v *Verifier) Verify(c *Claims, authorization []byte, now time.Time) error {
	c.UserID = 0
	c.Username = c.Username[:0]
	// RFC 9110 11.4: credentials = auth-scheme [ 1*SP token68 ]; the scheme is
	// case-insensitive ("bearer", "BEARER"), spaces only (a tab is not SP).
	if !hasScheme(authorization) {
		return ErrMissing
	}
	if len(authorization) > MaxAuthorizationLen {
		return ErrInvalid
	}
	tok := authorization[len(bearer)+1:]
	for len(tok) > 0 && tok[0] == ' ' {
		tok = tok[1:]
	}
	dot1 := indexByte(tok, '.', 0)
	if dot1 < 0 {
		return ErrInvalid
	}
	dot2 := indexByte(tok, '.', dot1+1)
	if dot2 < 0 || indexByte(tok, '.', dot2+1) >= 0 {
		return ErrInvalid
	}

	s := v.scratch.Get().(*scratch)
	defer v.scratch.Put(s)
	enc := base64.RawURLEncoding

	if string(tok[:dot1]) != stdHeader && !s.headerIsHS256(tok[:dot1]) {
		return ErrInvalid
	}

	// The MAC first: a forged token costs no JSON work.
	n, err := enc.Decode(s.buf[:], tok[dot2+1:])
	if err != nil || n != sha256.Size {
		return ErrInvalid
	}
	copy(s.sig[:], s.buf[:n])
	s.mac.Reset()
	s.mac.Write(tok[:dot2])
	if !hmac.Equal(s.mac.Sum(s.sum[:0]), s.sig[:]) {
		return ErrInvalid
	}

	n, err = enc.Decode(s.buf[:], tok[dot1+1:dot2])
	if err != nil {
		return ErrInvalid
	}
	var m [4][]byte
	if !scanObject(s.buf[:n], payloadNames, &m, &s.stack) {
		return ErrInvalid
	}
	exp, present, ok := numericDate(m[memberExp])
	if !ok || !present || !now.Before(exp) {
		return ErrInvalid
	}
	nbf, present, ok := numericDate(m[memberNbf])
	if !ok || present && now.Before(nbf) {
		return ErrInvalid
	}

	id, ok := parseSub(m[memberSub])
	if !ok {
		return ErrPayload
	}
	name := m[memberUsername]
	if len(name) == 0 || name[0] != '"' {
		return ErrPayload
	}
	c.UserID = id
	c.Username = appendUnquoted(c.Username, name[1:len(name)-1])
	return nil
}

// headerIsHS256 reports whether seg, a header segment other than the standard one, decodes
// to a JSON object whose (last) alg is the string "HS256".
func (s *scratch) headerIsHS256(seg []byte) bool {
	n, err := base64.RawURLEncoding.Decode(s.buf[:], seg)
	if err != nil {
		return false
	}
	var m [4][]byte
	if !scanObject(s.buf[:n], headerNames, &m, &s.stack) {
		return false
	}
	alg := m[0]
	return len(alg) > 0 && alg[0] == '"' && unquotedEquals(alg[1:len(alg)-1], "HS256")
}

// numericDate converts the raw JSON value of exp or nbf the way golang-jwt's MapClaims
// does: a number becomes its time truncated to the second, except that 0 counts as absent,
// like a missing member (present false); any other JSON type is an error (ok false).
func numericDate(raw []byte) (t time.Time, present, ok bool) {
	if raw == nil {
		return time.Time{}, false, true
	}
	f, ok := jsonNumber(raw)
	if !ok {
		return time.Time{}, false, false
	}
	if f == 0 {
		return time.Time{}, false, true
	}
	// The same operations as golang-jwt's newNumericDateFromSeconds and NewNumericDate
	// with TimePrecision = time.Second, so that even absurd values (fractions, numbers
	// beyond int64) come out exactly as they do there.
	round, frac := math.Modf(f)
	return time.Unix(int64(round), int64(frac*1e9)).Truncate(time.Second), true, true
}

// jsonNumber returns the float64 that encoding/json gives for raw, which must be a JSON
// value already validated by scanObject, or false when raw is not a number.
func jsonNumber(raw []byte) (float64, bool) {
	if c := raw[0]; c != '-' && (c < '0' || c > '9') {
		return 0, false
	}
	// Up to 15 digits, an integer is exact in a float64; this is every exp we sign.
	if len(raw) <= 15 {
		var n int64
		for _, c := range raw {
			if c < '0' || c > '9' {
				goto slow
			}
			n = n*10 + int64(c-'0')
		}
		return float64(n), true
	}
slow:
	f, err := strconv.ParseFloat(string(raw), 64)
	return f, err == nil
}

// parseSub returns the user id in the raw JSON value of sub, which must be a string of 1 to
// 16 decimal digits, the first not 0, after JSON unescaping.
func parseSub(raw []byte) (int64, bool) {
	if len(raw) < 3 || raw[0] != '"' {
		return 0, false
	}
	s := raw[1 : len(raw)-1]
	var n int64
	digits := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c == '\\' {
			r, size := decodeRune(s, i)
			if r < '0' || r > '9' {
				return 0, false
			}
			c = byte(r)
			i += size
		} else {
			i++
		}
		if c < '0' || c > '9' || digits == 0 && c == '0' || digits == 16 {
			return 0, false
		}
		n = n*10 + int64(c-'0')
		digits++
	}
	return n, digits > 0
}

// indexByte returns the index of the first c in b at or after from, or -1.
func indexByte(b []byte, c byte, from int) int {
	if i := bytes.IndexByte(b[from:], c); i >= 0 {
		return from + i
	}
	return -1
}

// Sign makes an HS256 token with the header {"alg":"HS256","typ":"JWT"} and the payload
// {"sub":"<userID>","username":<username>,"iat":<unix>,"exp":<unix>}, in that key order,
// times in whole seconds. Invalid UTF-8 in username is replaced by U+FFFD.
func Sign(secret []byte, userID int64, username string, iat, exp time.Time) string {
	name, _ := json.Marshal(username) // a string always marshals
	payload := make([]byte, 0, 64+len(name))
	payload = append(payload, `{"sub":"`...)
	payload = strconv.AppendInt(payload, userID, 10)
	payload = append(payload, `","username":`...)
	payload = append(payload, name...)
	payload = append(payload, `,"iat":`...)
	payload = strconv.AppendInt(payload, iat.Unix(), 10)
	payload = append(payload, `,"exp":`...)
	payload = strconv.AppendInt(payload, exp.Unix(), 10)
	payload = append(payload, '}')

	enc := base64.RawURLEncoding
	out := make([]byte, 0, len(stdHeader)+2+enc.EncodedLen(len(payload))+enc.EncodedLen(sha256.Size))
	out = append(out, stdHeader...)
	out = append(out, '.')
	out = enc.AppendEncode(out, payload)
	mac := hmac.New(sha256.New, secret)
	mac.Write(out)
	out = append(out, '.')
	out = enc.AppendEncode(out, mac.Sum(nil))
	return string(out)
}

// hasScheme reports whether authorization starts with the Bearer scheme, in any case, and
// a space.
func hasScheme(authorization []byte) bool {
	if len(authorization) <= len(bearer) || authorization[len(bearer)] != ' ' {
		return false
	}
	for i := 0; i < len(bearer); i++ {
		if authorization[i]|0x20 != bearer[i] {
			return false
		}
	}
	return true
}
