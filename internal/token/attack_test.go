package token

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// attackCases are token attacks beyond the spec's list (forged, alg none, expired, bad
// sub, no username; all in verifyCases): key confusion, header tricks, signatures that
// are almost right, claims of the wrong JSON type, odd bytes. TestAttacks checks each
// against its expected error and against golang-jwt.
func attackCases(t testing.TB) []verifyCase {
	valid := signed(validPayload)
	h, rest, _ := strings.Cut(strings.TrimPrefix(valid, "Bearer "), ".")
	p, sig, _ := strings.Cut(rest, ".")
	rawSig, _ := base64.RawURLEncoding.DecodeString(sig)
	withKey := func(key, header, payload string) string {
		hs, ps := b64(header), b64(expand(payload))
		m := hmac.New(sha256.New, []byte(key))
		m.Write([]byte(hs + "." + ps))
		return "Bearer " + hs + "." + ps + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	}
	// A header whose encoding ends in a partial group, so it has trailing bits to flip.
	oddHeader := `{"alg":"HS256","x":12}`
	if len(b64(oddHeader))%4 == 0 {
		t.Fatalf("%s encodes to a multiple of 4 characters", oddHeader)
	}
	nested := `{"alg":"HS256","x":` + strings.Repeat("[", 2500) + strings.Repeat("]", 2500) + `}`

	return []verifyCase{
		// Key confusion: the header must never choose the key or the algorithm.
		{name: "RS256 header signed with the secret as an HMAC key", authorization: signedJSON(`{"alg":"RS256","typ":"JWT"}`, validPayload), wantErr: ErrInvalid},
		{name: "ES256 header", authorization: signedJSON(`{"alg":"ES256","typ":"JWT"}`, validPayload), wantErr: ErrInvalid},
		{name: "embedded jwk with the attacker's key", authorization: withKey("attacker", `{"alg":"HS256","jwk":{"kty":"oct","k":"YXR0YWNrZXI"}}`, validPayload), wantErr: ErrInvalid},
		{name: "embedded jwk, signed with the real secret", authorization: signedJSON(`{"alg":"HS256","jwk":{"kty":"oct","k":"YXR0YWNrZXI"}}`, validPayload), wantID: 1, wantName: "golden_ember_1"},
		{name: "kid pointing at an empty file, empty key", authorization: withKey("", `{"alg":"HS256","kid":"../../../../dev/null"}`, validPayload), wantErr: ErrInvalid},
		{name: "jku to the attacker's keys", authorization: withKey("attacker", `{"alg":"HS256","jku":"https://evil.example/keys"}`, validPayload), wantErr: ErrInvalid},
		{name: "crit member is ignored as golang-jwt does", authorization: signedJSON(`{"alg":"HS256","crit":["exp"]}`, validPayload), wantID: 1, wantName: "golden_ember_1"},

		// alg values that only look like HS256.
		{name: "alg with trailing space", authorization: signedJSON(`{"alg":"HS256 "}`, validPayload), wantErr: ErrInvalid},
		{name: "alg with NUL", authorization: signedJSON(`{"alg":"HS256\u0000"}`, validPayload), wantErr: ErrInvalid},
		{name: "alg in an array", authorization: signedJSON(`{"alg":["HS256"]}`, validPayload), wantErr: ErrInvalid},
		{name: "alg null", authorization: signedJSON(`{"alg":null}`, validPayload), wantErr: ErrInvalid},
		{name: "alg with invalid UTF-8", authorization: signedJSON("{\"alg\":\"HS256\xff\"}", validPayload), wantErr: ErrInvalid},
		{name: "invalid UTF-8 elsewhere in the header", authorization: signedJSON("{\"alg\":\"HS256\",\"x\":\"\xff\"}", validPayload), wantID: 1, wantName: "golden_ember_1"},
		{name: "header nested 2,500 deep", authorization: signedJSON(nested, `{"sub":"1","username":"u","exp":LATER}`), wantID: 1, wantName: "u"},

		// Signatures that are almost right.
		{name: "signature truncated to 16 bytes", authorization: "Bearer " + h + "." + p + "." + base64.RawURLEncoding.EncodeToString(rawSig[:16]), wantErr: ErrInvalid},
		{name: "signature with its last byte changed", authorization: "Bearer " + h + "." + p + "." + base64.RawURLEncoding.EncodeToString(append(rawSig[:31:31], rawSig[31]^1)), wantErr: ErrInvalid},
		{name: "signature of the header alone", authorization: "Bearer " + h + "." + p + "." + macOf(h), wantErr: ErrInvalid},
		{name: "signature over the decoded JSON", authorization: "Bearer " + h + "." + p + "." + macOf(stdHeaderJSON+"."+expand(validPayload)), wantErr: ErrInvalid},
		{name: "header and payload swapped", authorization: signedSegments(p, h), wantErr: ErrInvalid},
		{name: "signature repeated", authorization: valid + sig, wantErr: ErrInvalid},
		{name: "non-canonical header bits", authorization: signedSegments(nonCanonical(b64(oddHeader)), b64(expand(validPayload))), wantID: 1, wantName: "golden_ember_1"},

		// Claims of the wrong JSON type.
		{name: "exp true", authorization: signed(`{"sub":"1","username":"u","exp":true}`), wantErr: ErrInvalid},
		{name: "exp in an array", authorization: signed(`{"sub":"1","username":"u","exp":[LATER]}`), wantErr: ErrInvalid},
		{name: "exp an object", authorization: signed(`{"sub":"1","username":"u","exp":{"v":LATER}}`), wantErr: ErrInvalid},
		{name: "nbf true", authorization: signed(`{"sub":"1","username":"u","exp":LATER,"nbf":true}`), wantErr: ErrInvalid},
		{name: "sub in an array", authorization: signed(`{"sub":["1"],"username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "sub an object", authorization: signed(`{"sub":{"id":"1"},"username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "sub true", authorization: signed(`{"sub":true,"username":"u","exp":LATER}`), wantErr: ErrPayload},
		{name: "username in an array", authorization: signed(`{"sub":"1","username":["u"],"exp":LATER}`), wantErr: ErrPayload},
		{name: "username false", authorization: signed(`{"sub":"1","username":false,"exp":LATER}`), wantErr: ErrPayload},

		// Odd bytes.
		{name: "BEARER in NUL-cased disguise", authorization: "B\x00ARER " + valid[len("Bearer "):], wantErr: ErrMissing},
		{name: "scheme of high bytes that fold to bearer", authorization: "\xc2earer " + valid[len("Bearer "):], wantErr: ErrMissing},
		{name: "NUL inside the token", authorization: valid[:30] + "\x00" + valid[30:], wantErr: ErrInvalid},
		{name: "NUL after the token", authorization: valid + "\x00", wantErr: ErrInvalid},
		{name: "high bytes in a segment", authorization: "Bearer " + h + "\xc3\xa9." + p + "." + sig, wantErr: ErrInvalid},
		{name: "five segments", authorization: "Bearer a.b.c.d.e", wantErr: ErrInvalid},
		{name: "empty header and payload", authorization: "Bearer .." + sig, wantErr: ErrInvalid},
		{name: "many dots within the cap", authorization: "Bearer " + strings.Repeat(".", MaxAuthorizationLen-len("Bearer ")), wantErr: ErrInvalid},
		{name: "huge payload member within the cap", authorization: tokenOfLen(MaxAuthorizationLen - 10), wantID: 1, wantName: "u"},
		{name: "1 MiB token", authorization: "Bearer " + strings.Repeat("A", 1<<20) + "." + p + "." + sig, wantErr: ErrInvalid},
	}
}

func TestAttacks(t *testing.T) {
	v := NewVerifier(testSecret)
	for _, tc := range attackCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			c := Claims{UserID: 99, Username: []byte("stale")}
			err := v.Verify(&c, []byte(tc.authorization), testNow)
			if !errors.Is(err, tc.wantErr) || c.UserID != tc.wantID || string(c.Username) != tc.wantName {
				t.Fatalf("Verify = %v, claims %d %q; want %v, %d %q", err, c.UserID, c.Username, tc.wantErr, tc.wantID, tc.wantName)
			}
			checkAgainstReference(t, v, testSecret, []byte(tc.authorization), testNow)
		})
	}
}
