package token

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var testSecret = []byte("twelve-dollar-challenge")

// testNow is the verification time of the tests; tokens expire an hour after it.
var testNow = time.Unix(1_700_000_000, 0)

// expand writes the test times into a payload template: NOW, LATER (+1 h), PAST (-1 h).
var expand = strings.NewReplacer("NOW", "1700000000", "LATER", "1700003600", "PAST", "1699996400").Replace

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// macOf returns the encoded HMAC-SHA256 of signingInput under testSecret.
func macOf(signingInput string) string {
	mac := hmac.New(sha256.New, testSecret)
	mac.Write([]byte(signingInput))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// signedSegments returns the Authorization value of the already encoded header and
// payload, correctly signed.
func signedSegments(header, payload string) string {
	return "Bearer " + header + "." + payload + "." + macOf(header+"."+payload)
}

// signedJSON encodes and signs a header and a payload template (see expand).
func signedJSON(header, payload string) string {
	return signedSegments(b64(header), b64(expand(payload)))
}

const stdHeaderJSON = `{"alg":"HS256","typ":"JWT"}`

// signed signs a payload template under the standard header.
func signed(payload string) string { return signedJSON(stdHeaderJSON, payload) }

// validPayload is what the official tests sign.
const validPayload = `{"sub":"1","username":"golden_ember_1","iat":NOW,"exp":LATER}`

// withPayloadSegment returns a signed token whose payload segment is the encoding of
// payload changed by edit.
func withPayloadSegment(payload string, edit func(seg string) string) string {
	return signedSegments(stdHeader, edit(b64(expand(payload))))
}

// nonCanonical flips a trailing bit of the last character of seg, which must carry some
// (its length not a multiple of 4): the decoded bytes stay the same.
func nonCanonical(seg string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, seg[len(seg)-1])
	return seg[:len(seg)-1] + string(alphabet[last^1])
}

// payloadNeedingPadding returns validPayload with spaces added until its encoding needs
// padding and contains a '-' or '_' (for the alphabet cases).
func payloadNeedingPadding(t testing.TB) string {
	p := expand(`{"sub":"1","username":"golden_ember_1","iat":NOW,"exp":LATER,"x":"??>>~~??>>~~"}`)
	for i := 0; i < 64; i++ {
		seg := b64(p)
		if len(p)%3 != 0 && strings.ContainsAny(seg, "-_") {
			return p
		}
		p = p[:len(p)-1] + " }"
	}
	t.Fatal("no payload needs padding")
	return ""
}

// tokenOfLen returns the shortest valid Authorization value of at least n bytes (n >= 200)
// with a filler member; some lengths are impossible (base64 never ends in 4k+1 characters).
func tokenOfLen(n int) string {
	for fill := max(0, (n-200)*3/4-8); ; fill++ {
		tok := signed(`{"sub":"1","username":"u","exp":LATER,"fill":"` + strings.Repeat("x", fill) + `"}`)
		if len(tok) >= n {
			return tok
		}
	}
}

type verifyCase struct {
	name          string
	authorization string
	now           time.Time // testNow when zero
	wantErr       error
	wantID        int64
	wantName      string
}

// verifyCases are the table of TestVerify, also the seeds of the differential test and the
// fuzz corpus.
func verifyCases(t testing.TB) []verifyCase {
	valid := signed(validPayload)
	h, rest, _ := strings.Cut(strings.TrimPrefix(valid, "Bearer "), ".")
	p, sig, _ := strings.Cut(rest, ".")
	otherMAC := hmac.New(sha256.New, []byte("another secret"))
	otherMAC.Write([]byte(h + "." + p))
	hs512 := hmac.New(sha512.New, testSecret)
	h512 := b64(`{"alg":"HS512","typ":"JWT"}`)
	hs512.Write([]byte(h512 + "." + p))
	padded := payloadNeedingPadding(t)
	half := testNow.Add(500 * time.Millisecond)

	return []verifyCase{
		{name: "valid", authorization: valid, wantID: 1, wantName: "golden_ember_1"},
		{name: "valid from Sign", authorization: "Bearer " + Sign(testSecret, 42, `Zoë "z" <b>`, testNow, testNow.Add(time.Hour)), wantID: 42, wantName: `Zoë "z" <b>`},
		{name: "valid one second before exp", authorization: valid, now: testNow.Add(time.Hour - time.Nanosecond), wantID: 1, wantName: "golden_ember_1"},

		// The prefix.
		{name: "no header", authorization: "", wantErr: ErrMissing},
		{name: "Basic abc", authorization: "Basic abc", wantErr: ErrMissing},
		{name: "lowercase bearer", authorization: "bearer x", wantErr: ErrInvalid},
		{name: "lowercase bearer with a valid token", authorization: "b" + valid[1:], wantID: 1, wantName: "golden_ember_1"},
		{name: "uppercase BEARER with a valid token", authorization: "BEARER " + valid[7:], wantID: 1, wantName: "golden_ember_1"},
		{name: "Bearer-like scheme", authorization: "Bearex " + valid[7:], wantErr: ErrMissing},
		{name: "Bearer with a suffix", authorization: "Bearers " + valid[7:], wantErr: ErrMissing},
		{name: "Bearer without space", authorization: "Bearer", wantErr: ErrMissing},
		{name: "Bearer with tab", authorization: "Bearer\t" + valid[7:], wantErr: ErrMissing},
		{name: "Bearer and nothing", authorization: "Bearer ", wantErr: ErrInvalid},
		{name: "Bearer abc", authorization: "Bearer abc", wantErr: ErrInvalid},
		{name: "two spaces", authorization: "Bearer  " + valid[7:], wantID: 1, wantName: "golden_ember_1"},
		{name: "trailing space", authorization: valid + " ", wantErr: ErrInvalid},

		// Structure and signature.
		{name: "forged signature", authorization: "Bearer " + h + "." + p + "." + b64(strings.Repeat("f", 32)), wantErr: ErrInvalid},
		{name: "wrong secret", authorization: "Bearer " + h + "." + p + "." + base64.RawURLEncoding.EncodeToString(otherMAC.Sum(nil)), wantErr: ErrInvalid},
		{name: "signature cut short", authorization: valid[:len(valid)-1], wantErr: ErrInvalid},
		{name: "signature too long", authorization: valid + "AA", wantErr: ErrInvalid},
		{name: "empty signature", authorization: "Bearer " + h + "." + p + ".", wantErr: ErrInvalid},
		{name: "alg none with empty signature", authorization: "Bearer " + b64(`{"alg":"none","typ":"JWT"}`) + "." + p + ".", wantErr: ErrInvalid},
		{name: "alg none signed", authorization: signedJSON(`{"alg":"none","typ":"JWT"}`, validPayload), wantErr: ErrInvalid},
		{name: "HS512 signed with SHA-512", authorization: "Bearer " + h512 + "." + p + "." + base64.RawURLEncoding.EncodeToString(hs512.Sum(nil)), wantErr: ErrInvalid},
		{name: "HS512 header signed with SHA-256", authorization: signedJSON(`{"alg":"HS512","typ":"JWT"}`, validPayload), wantErr: ErrInvalid},
		{name: "alg hs256", authorization: signedJSON(`{"alg":"hs256","typ":"JWT"}`, validPayload), wantErr: ErrInvalid},
		{name: "alg missing", authorization: signedJSON(`{"typ":"JWT"}`, validPayload), wantErr: ErrInvalid},
		{name: "alg a number", authorization: signedJSON(`{"alg":256}`, validPayload), wantErr: ErrInvalid},
		{name: "alg only", authorization: signedJSON(`{"alg":"HS256"}`, validPayload), wantID: 1, wantName: "golden_ember_1"},
		{name: "alg escaped", authorization: signedJSON(`{"alg":"HS\u0032\u0035\u0036"}`, validPayload), wantID: 1, wantName: "golden_ember_1"},
		{name: "alg name escaped", authorization: signedJSON(`{"\u0061lg":"HS256"}`, validPayload), wantID: 1, wantName: "golden_ember_1"},
		{name: "header reordered with spaces", authorization: signedJSON(" {\"typ\" : \"JWT\",\n\"alg\":\"HS256\", \"kid\":[1,{}]} ", validPayload), wantID: 1, wantName: "golden_ember_1"},
		{name: "duplicate alg last HS256", authorization: signedJSON(`{"alg":"none","alg":"HS256"}`, validPayload), wantID: 1, wantName: "golden_ember_1"},
		{name: "duplicate alg last none", authorization: signedJSON(`{"alg":"HS256","alg":"none"}`, validPayload), wantErr: ErrInvalid},
		{name: "header number out of range", authorization: signedJSON(`{"alg":"HS256","x":1e999}`, validPayload), wantErr: ErrInvalid},
		{name: "header array", authorization: signedJSON(`["HS256"]`, validPayload), wantErr: ErrInvalid},
		{name: "header string", authorization: signedJSON(`"HS256"`, validPayload), wantErr: ErrInvalid},
		{name: "header null", authorization: signedJSON(`null`, validPayload), wantErr: ErrInvalid},
		{name: "header empty", authorization: signedJSON(``, validPayload), wantErr: ErrInvalid},
		{name: "two segments", authorization: "Bearer " + h + "." + p, wantErr: ErrInvalid},
		{name: "extra segment", authorization: valid + ".", wantErr: ErrInvalid},
		{name: "extra segments", authorization: valid + "." + sig, wantErr: ErrInvalid},
		{name: "only dots", authorization: "Bearer ..", wantErr: ErrInvalid},

		// base64url as golang-jwt decodes it.
		{name: "non-canonical signature bits", authorization: "Bearer " + h + "." + p + "." + nonCanonical(sig), wantID: 1, wantName: "golden_ember_1"},
		{name: "non-canonical payload bits", authorization: withPayloadSegment(padded, nonCanonical), wantID: 1, wantName: "golden_ember_1"},
		{name: "padded payload", authorization: withPayloadSegment(padded, func(s string) string { return s + strings.Repeat("=", 4-len(s)%4) }), wantErr: ErrInvalid},
		{name: "padded signature", authorization: valid + "=", wantErr: ErrInvalid},
		{name: "standard alphabet", authorization: withPayloadSegment(padded, func(s string) string { return strings.NewReplacer("-", "+", "_", "/").Replace(s) }), wantErr: ErrInvalid},
		{name: "newline inside payload segment", authorization: withPayloadSegment(validPayload, func(s string) string { return s[:10] + "\r\n" + s[10:] }), wantID: 1, wantName: "golden_ember_1"},
		{name: "newline inside standard header", authorization: signedSegments(stdHeader[:5]+"\n"+stdHeader[5:], b64(expand(validPayload))), wantID: 1, wantName: "golden_ember_1"},
		{name: "payload segment of 4n+1 characters", authorization: withPayloadSegment(validPayload, func(s string) string { return s + strings.Repeat("A", 5-len(s)%4) }), wantErr: ErrInvalid},

		// exp, nbf, iat.
		{name: "missing exp", authorization: signed(`{"sub":"1","username":"u","iat":NOW}`), wantErr: ErrInvalid},
		{name: "string exp", authorization: signed(`{"sub":"1","username":"u","exp":"LATER"}`), wantErr: ErrInvalid},
		{name: "null exp", authorization: signed(`{"sub":"1","username":"u","exp":null}`), wantErr: ErrInvalid},
		{name: "exp 0", authorization: signed(`{"sub":"1","username":"u","exp":0}`), wantErr: ErrInvalid},
		{name: "expired", authorization: signed(`{"sub":"1","username":"u","exp":PAST}`), wantErr: ErrInvalid},
		{name: "exp == now", authorization: signed(`{"sub":"1","username":"u","exp":NOW}`), wantErr: ErrInvalid},
		{name: "exp == now at half a second", authorization: signed(`{"sub":"1","username":"u","exp":NOW}`), now: half, wantErr: ErrInvalid},
		{name: "exp now+1", authorization: signed(`{"sub":"1","username":"u","exp":1700000001}`), wantID: 1, wantName: "u"},
		{name: "exp fraction truncated", authorization: signed(`{"sub":"1","username":"u","exp":1700000000.9}`), wantErr: ErrInvalid},
		{name: "exp fraction later", authorization: signed(`{"sub":"1","username":"u","exp":1700000001.2}`), now: half, wantID: 1, wantName: "u"},
		{name: "exp with exponent", authorization: signed(`{"sub":"1","username":"u","exp":2e9}`), wantID: 1, wantName: "u"},
		{name: "exp out of float range", authorization: signed(`{"sub":"1","username":"u","exp":1e999}`), wantErr: ErrInvalid},
		{name: "exp negative", authorization: signed(`{"sub":"1","username":"u","exp":-1}`), wantErr: ErrInvalid},
		{name: "duplicate exp last expired", authorization: signed(`{"sub":"1","username":"u","exp":LATER,"exp":PAST}`), wantErr: ErrInvalid},
		{name: "duplicate exp last valid", authorization: signed(`{"sub":"1","username":"u","exp":"x","exp":LATER}`), wantID: 1, wantName: "u"},
		{name: "future nbf", authorization: signed(`{"sub":"1","username":"u","exp":LATER,"nbf":1700000001}`), wantErr: ErrInvalid},
		{name: "nbf == now", authorization: signed(`{"sub":"1","username":"u","exp":LATER,"nbf":NOW}`), wantID: 1, wantName: "u"},
		{name: "nbf past", authorization: signed(`{"sub":"1","username":"u","exp":LATER,"nbf":PAST}`), wantID: 1, wantName: "u"},
		{name: "nbf 0", authorization: signed(`{"sub":"1","username":"u","exp":LATER,"nbf":0}`), wantID: 1, wantName: "u"},
		{name: "nbf fraction truncated", authorization: signed(`{"sub":"1","username":"u","exp":LATER,"nbf":1700000000.9}`), wantID: 1, wantName: "u"},
		{name: "string nbf", authorization: signed(`{"sub":"1","username":"u","exp":LATER,"nbf":"PAST"}`), wantErr: ErrInvalid},
		{name: "null nbf", authorization: signed(`{"sub":"1","username":"u","exp":LATER,"nbf":null}`), wantErr: ErrInvalid},
		{name: "future iat is not checked", authorization: signed(`{"sub":"1","username":"u","exp":LATER,"iat":LATER}`), wantID: 1, wantName: "u"},
		{name: "string iat is not checked", authorization: signed(`{"sub":"1","username":"u","exp":LATER,"iat":"x"}`), wantID: 1, wantName: "u"},
		{name: "expired before bad sub", authorization: signed(`{"sub":"abc","exp":PAST}`), wantErr: ErrInvalid},

		// sub.
		{name: "sub abc", authorization: signed(`{"sub":"abc","username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "sub numeric 1", authorization: signed(`{"sub":1,"username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "sub 0", authorization: signed(`{"sub":"0","username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "sub -1", authorization: signed(`{"sub":"-1","username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "sub space 1", authorization: signed(`{"sub":" 1","username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "sub 1 space", authorization: signed(`{"sub":"1 ","username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "sub 1.5", authorization: signed(`{"sub":"1.5","username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "sub +1", authorization: signed(`{"sub":"+1","username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "sub 01", authorization: signed(`{"sub":"01","username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "sub empty", authorization: signed(`{"sub":"","username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "sub null", authorization: signed(`{"sub":null,"username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "sub missing", authorization: signed(`{"username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "sub 16 digits", authorization: signed(`{"sub":"9999999999999999","username":"u","exp":LATER}`), wantID: 9999999999999999, wantName: "u"},
		{name: "sub 17 digits", authorization: signed(`{"sub":"10000000000000000","username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "sub 99999999999999999999", authorization: signed(`{"sub":"99999999999999999999","username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "sub escaped digits", authorization: signed(`{"sub":"\u0031\u0032","username":"u","exp":LATER}`), wantID: 12, wantName: "u"},
		{name: "sub fullwidth digit", authorization: signed(`{"sub":"１","username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "sub duplicate last wins", authorization: signed(`{"sub":"abc","username":"u","exp":LATER,"sub":"7"}`), wantID: 7, wantName: "u"},
		{name: "sub nested is not sub", authorization: signed(`{"x":{"sub":"5","y":[{"sub":"6"}]},"sub":"1","username":"u","exp":LATER}`), wantID: 1, wantName: "u"},
		{name: "sub name case", authorization: signed(`{"Sub":"1","username":"u","exp":LATER}`), wantErr: ErrPayload},

		// username.
		{name: "missing username", authorization: signed(`{"sub":"1","exp":LATER}`), wantErr: ErrPayload},
		{name: "numeric username", authorization: signed(`{"sub":"1","username":123,"exp":LATER}`), wantErr: ErrPayload},
		{name: "null username", authorization: signed(`{"sub":"1","username":null,"exp":LATER}`), wantErr: ErrPayload},
		{name: "object username", authorization: signed(`{"sub":"1","username":{"a":"b"},"exp":LATER}`), wantErr: ErrPayload},
		{name: "empty username", authorization: signed(`{"sub":"1","username":"","exp":LATER}`), wantID: 1, wantName: ""},
		{name: "username escapes", authorization: signed(`{"sub":"1","username":"a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00\u0000","exp":LATER}`), wantID: 1, wantName: "a\"b\\c/d\b\f\n\r\t\u00e9\U0001F600\x00"},
		{name: "username lone surrogates", authorization: signed(`{"sub":"1","username":"\ud800x\udc00\ud800\ud800\ude00","exp":LATER}`), wantID: 1, wantName: "\uFFFDx\uFFFD\uFFFD\U00010200"},
		{name: "username invalid UTF-8", authorization: signed("{\"sub\":\"1\",\"username\":\"a\xff\xc3\x28\xed\xa0\x80\",\"exp\":LATER}"), wantID: 1, wantName: "a\uFFFD\uFFFD(\uFFFD\uFFFD\uFFFD"},
		{name: "username duplicate last wins", authorization: signed(`{"sub":"1","username":1,"exp":LATER,"username":"second"}`), wantID: 1, wantName: "second"},
		{name: "username name escaped", authorization: signed(`{"sub":"1","user\u006eame":"esc","exp":LATER}`), wantID: 1, wantName: "esc"},

		// Payload JSON.
		{name: "payload array", authorization: signed(`[]`), wantErr: ErrInvalid},
		{name: "payload null", authorization: signed(`null`), wantErr: ErrInvalid},
		{name: "payload number", authorization: signed(`1`), wantErr: ErrInvalid},
		{name: "payload string", authorization: signed(`"x"`), wantErr: ErrInvalid},
		{name: "payload empty", authorization: signed(``), wantErr: ErrInvalid},
		{name: "payload trailing comma", authorization: signed(`{"sub":"1","username":"u","exp":LATER,}`), wantErr: ErrInvalid},
		{name: "payload trailing garbage", authorization: signed(`{"sub":"1","username":"u","exp":LATER}x`), wantErr: ErrInvalid},
		{name: "payload two objects", authorization: signed(`{"sub":"1","username":"u","exp":LATER}{}`), wantErr: ErrInvalid},
		{name: "payload leading zero", authorization: signed(`{"sub":"1","username":"u","exp":LATER,"x":01}`), wantErr: ErrInvalid},
		{name: "payload control character", authorization: signed("{\"sub\":\"1\",\"username\":\"a\tb\",\"exp\":LATER}"), wantErr: ErrInvalid},
		{name: "payload bad escape", authorization: signed(`{"sub":"1","username":"\x41","exp":LATER}`), wantErr: ErrInvalid},
		{name: "payload single-quote escape", authorization: signed(`{"sub":"1","username":"\'","exp":LATER}`), wantErr: ErrInvalid},
		{name: "payload short unicode escape", authorization: signed(`{"sub":"1","username":"\u12","exp":LATER}`), wantErr: ErrInvalid},
		{name: "payload invalid UTF-8 outside strings", authorization: signed("{\"sub\":\"1\",\"username\":\"u\",\"exp\":LATER\xff}"), wantErr: ErrInvalid},
		{name: "payload BOM", authorization: signed("\ufeff{\"sub\":\"1\",\"username\":\"u\",\"exp\":LATER}"), wantErr: ErrInvalid},
		{name: "payload number out of range nested", authorization: signed(`{"sub":"1","username":"u","exp":LATER,"x":[{"y":-1e400}]}`), wantErr: ErrInvalid},
		{name: "payload number underflow", authorization: signed(`{"sub":"1","username":"u","exp":LATER,"x":1e-400}`), wantID: 1, wantName: "u"},
		{name: "payload deep nesting", authorization: signed(`{"sub":"1","username":"u","exp":LATER,"x":` + strings.Repeat("[", 500) + strings.Repeat("]", 500) + `}`), wantID: 1, wantName: "u"},
		{name: "payload unbalanced nesting", authorization: signed(`{"sub":"1","username":"u","exp":LATER,"x":[{]}}`), wantErr: ErrInvalid},
		{name: "payload whitespace", authorization: signed(" \t\r\n{ \"sub\" : \"1\" ,\n\"username\":\"u\", \"exp\" :\tLATER , \"a\":[ true , false , null , { } , [ ] , -0.5e+3 ] } \n"), wantID: 1, wantName: "u"},
		{name: "payload bad literal", authorization: signed(`{"sub":"1","username":"u","exp":LATER,"x":tru}`), wantErr: ErrInvalid},

		// Size.
		{name: "token at the length cap", authorization: tokenOfLen(MaxAuthorizationLen), wantID: 1, wantName: "u"},
		{name: "huge token", authorization: tokenOfLen(MaxAuthorizationLen + 1), wantErr: ErrInvalid},
		{name: "huge garbage", authorization: "Bearer " + strings.Repeat("a.", 1<<16), wantErr: ErrInvalid},
	}
}

func TestVerify(t *testing.T) {
	v := NewVerifier(testSecret)
	for _, tc := range verifyCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			now := tc.now
			if now.IsZero() {
				now = testNow
			}
			c := Claims{UserID: 99, Username: append(make([]byte, 0, 64), "stale"...)}
			err := v.Verify(&c, []byte(tc.authorization), now)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Verify(%q) = %v, want %v", tc.authorization, err, tc.wantErr)
			}
			if c.UserID != tc.wantID || string(c.Username) != tc.wantName {
				t.Fatalf("Verify(%q) claims = %d %q, want %d %q", tc.authorization, c.UserID, c.Username, tc.wantID, tc.wantName)
			}
		})
	}
}

// TestVerifyAgreesWithGolangJWT runs the table through golang-jwt too, so that the table's
// wants are the reference's, not only ours.
func TestVerifyAgreesWithGolangJWT(t *testing.T) {
	v := NewVerifier(testSecret)
	for _, tc := range verifyCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			now := tc.now
			if now.IsZero() {
				now = testNow
			}
			checkAgainstReference(t, v, testSecret, []byte(tc.authorization), now)
		})
	}
}

// TestVerifyOddNumbers compares exp and nbf values whose meaning is golang-jwt's accident
// (fractions, values beyond int64, negative times) with the reference only.
func TestVerifyOddNumbers(t *testing.T) {
	v := NewVerifier(testSecret)
	nums := []string{"0", "-0", "0.0", "1e-400", "-1.5", "-0.5", "0.5", "1700000000", "1700000000.0", "1700000000.000000001",
		"1700000000.999999999", "1700000000.9999999999999", "1700000001e0", "17000000005e-1", "1.7000000005e9",
		"9007199254740993", "9223372036854775807", "9223372036854775808", "1e19", "-1e19", "1e300", "-1e300",
		"1.7976931348623157e308", "-62135596800", "-62135596801", "253402300800", "1e15", "999999999999999", "1000000000000000"}
	nows := []time.Time{testNow, testNow.Add(500 * time.Millisecond), testNow.Add(-time.Nanosecond), time.Unix(0, 0), time.Unix(-1, 999_999_999)}
	for _, n := range nums {
		for _, now := range nows {
			checkAgainstReference(t, v, testSecret, []byte(signed(`{"sub":"1","username":"u","exp":`+n+`}`)), now)
			checkAgainstReference(t, v, testSecret, []byte(signed(`{"sub":"1","username":"u","exp":LATER,"nbf":`+n+`}`)), now)
		}
	}
}

// TestVerifyOddJSON compares string and name decoding corners with the reference only.
func TestVerifyOddJSON(t *testing.T) {
	v := NewVerifier(testSecret)
	payloads := []string{
		`{"sub":"1","username":"\ud83d\u0041","exp":LATER}`,
		`{"sub":"1","username":"\uD83D\uDE00\uDBFF\uDFFF","exp":LATER}`,
		`{"sub":"1","username":"\udc00\ud800","exp":LATER}`,
		`{"sub":"1","username":"\ud800\","exp":LATER}`,
		`{"sub":"1","username":"\ud800\n","exp":LATER}`,
		`{"sub":"1","username":"\u2028\u2029\ufffd\ufeff","exp":LATER}`,
		"{\"sub\":\"1\",\"username\":\"\xf0\x9f\x98\x80\xf0\x9f\x98\xef\xbf\xbd\xc0\xaf\xf4\x90\x80\x80\",\"exp\":LATER}",
		"{\"sub\":\"1\",\"su\xffb\":\"2\",\"username\":\"u\",\"exp\":LATER}",
		`{"sub":"1","\ud800":1,"username":"u","exp":LATER}`,
		`{"sub":"\u0030\u0031","username":"u","exp":LATER}`,
		`{"sub":"1\u0000","username":"u","exp":LATER}`,
		`{"sub":"\u00311","username":"u","exp":LATER}`,
		`{"sub":"12345678901234\u00356","username":"u","exp":LATER}`,
		`{"s\u0075b":"3","username":"u","\u0065xp":LATER}`,
		`{"sub":"1","username":"u","exp":LATER,"nb\u0066":1700000001}`,
		`{"sub":"1","username":"u","exp":LATER,"nbf ":1700000001}`,
		`{"sub":"1","username":"u","exp":LATER,"":1,"":[]}`,
		`{"sub":"1","username":"u","exp":LATER,"x":[1,2,]}`,
		`{"sub":"1","username":"u","exp":LATER,"x":{"a":1,}}`,
		`{"sub":"1","username":"u","exp":LATER,"x":{"a"}}`,
		`{"sub":"1","username":"u","exp":LATER,"x":[-]}`,
		`{"sub":"1","username":"u","exp":LATER,"x":[1.]}`,
		`{"sub":"1","username":"u","exp":LATER,"x":[.5]}`,
		`{"sub":"1","username":"u","exp":LATER,"x":[1e]}`,
		`{"sub":"1","username":"u","exp":LATER,"x":[1E+5,-0,0e0,-0.0E-0]}`,
		`{"sub":"1","username":"u","exp":LATER,"x":[1` + strings.Repeat("0", 400) + `]}`,
		`{"sub":"1","username":"u","exp":LATER,"x":[0.` + strings.Repeat("0", 400) + `1e700]}`,
		`{"sub":"1","username":"u","exp":LATER,"x":[` + strings.Repeat("9", 310) + `]}`,
		`{"sub":"1","username":"u","exp":LATER,"x":"` + strings.Repeat(`\u00e9`, 500) + `"}`,
		`{"sub":"1","username":"u","exp":17000036` + strings.Repeat("0", 300) + `e-300}`,
	}
	for _, p := range payloads {
		checkAgainstReference(t, v, testSecret, []byte(signed(p)), testNow)
	}
}

func TestTokenOfLen(t *testing.T) {
	if got := len(tokenOfLen(MaxAuthorizationLen)); got != MaxAuthorizationLen {
		t.Fatalf("len(tokenOfLen(%d)) = %d, want %d", MaxAuthorizationLen, got, MaxAuthorizationLen)
	}
}

func TestStandardHeader(t *testing.T) {
	if got := b64(stdHeaderJSON); got != stdHeader {
		t.Fatalf("encoding of %s = %s, want %s", stdHeaderJSON, got, stdHeader)
	}
}

func TestSignParsesWithGolangJWT(t *testing.T) {
	tok := Sign(testSecret, 7, "zed", testNow, testNow.Add(time.Hour))
	parsed, err := jwt.Parse(tok, func(*jwt.Token) (any, error) { return testSecret, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithTimeFunc(func() time.Time { return testNow }))
	if err != nil {
		t.Fatalf("golang-jwt Parse(Sign(...)) = %v, want nil", err)
	}
	claims := parsed.Claims.(jwt.MapClaims)
	if claims["sub"] != "7" || claims["username"] != "zed" || claims["iat"] != float64(testNow.Unix()) || claims["exp"] != float64(testNow.Unix()+3600) {
		t.Fatalf("claims = %v, want sub 7, username zed, iat %d, exp %d", claims, testNow.Unix(), testNow.Unix()+3600)
	}
	want := `{"sub":"7","username":"zed","iat":1700000000,"exp":1700003600}`
	_, rest, _ := strings.Cut(tok, ".")
	seg, _, _ := strings.Cut(rest, ".")
	if got, _ := base64.RawURLEncoding.DecodeString(seg); string(got) != want {
		t.Fatalf("payload = %s, want %s", got, want)
	}
}

func TestVerifyAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	v := NewVerifier(testSecret)
	auth := []byte(signed(validPayload))
	c := Claims{Username: make([]byte, 0, 64)}
	allocs := testing.AllocsPerRun(1000, func() {
		if err := v.Verify(&c, auth, testNow); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Verify allocates %v times per call, want 0", allocs)
	}
}

func TestVerifyConcurrent(t *testing.T) {
	v := NewVerifier(testSecret)
	auth := []byte(signed(validPayload))
	done := make(chan error)
	for g := 0; g < 4; g++ {
		go func() {
			var c Claims
			for i := 0; i < 200; i++ {
				if err := v.Verify(&c, auth, testNow); err != nil || c.UserID != 1 || string(c.Username) != "golden_ember_1" {
					done <- errors.Join(err, errors.New("wrong claims"))
					return
				}
			}
			done <- nil
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	auth := []byte(signed(validPayload))
	b.Run("lean", func(b *testing.B) {
		v := NewVerifier(testSecret)
		c := Claims{Username: make([]byte, 0, 64)}
		b.ReportAllocs()
		for b.Loop() {
			if err := v.Verify(&c, auth, testNow); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("lean-other-header", func(b *testing.B) {
		auth := []byte(signedJSON(`{"typ":"JWT","alg":"HS256"}`, validPayload))
		v := NewVerifier(testSecret)
		c := Claims{Username: make([]byte, 0, 64)}
		b.ReportAllocs()
		for b.Loop() {
			if err := v.Verify(&c, auth, testNow); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("lean-forged", func(b *testing.B) {
		forged := []byte(string(auth[:len(auth)-2]) + "AA")
		v := NewVerifier(testSecret)
		var c Claims
		b.ReportAllocs()
		for b.Loop() {
			if err := v.Verify(&c, forged, testNow); err != ErrInvalid {
				b.Fatal(err)
			}
		}
	})
	b.Run("golang-jwt", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := referenceVerify(testSecret, auth, testNow); err != nil {
				b.Fatal(err)
			}
		}
	})
}
