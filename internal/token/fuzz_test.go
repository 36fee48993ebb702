package token

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

// FuzzVerify checks Verify against the golang-jwt reference on three inputs made from each
// fuzz value: authorization as it is (prefix, structure, base64, signature); header and
// payload as JSON, encoded and correctly signed (the JSON scanner and the claim rules);
// and header and payload as base64 segments, correctly signed (the decoder). nowOffset
// moves the clock around testNow, in nanoseconds within ±2 hours.
func FuzzVerify(f *testing.F) {
	for _, tc := range verifyCases(f) {
		if len(tc.authorization) > 2*MaxAuthorizationLen {
			continue // keep the corpus small; the cap is in the table
		}
		seg := strings.Split(strings.TrimPrefix(tc.authorization, "Bearer "), ".")
		var header, payload string
		if len(seg) == 3 {
			h, errH := base64.RawURLEncoding.DecodeString(seg[0])
			p, errP := base64.RawURLEncoding.DecodeString(seg[1])
			if errH == nil && errP == nil {
				header, payload = string(h), string(p)
			}
		}
		f.Add([]byte(tc.authorization), []byte(header), []byte(payload), tc.now.Sub(testNow).Nanoseconds()*boolInt(!tc.now.IsZero()))
	}
	v := NewVerifier(testSecret)
	f.Fuzz(func(t *testing.T, authorization, header, payload []byte, nowOffset int64) {
		now := testNow.Add(time.Duration(nowOffset % int64(2*time.Hour)))
		checkAgainstReference(t, v, testSecret, authorization, now)
		if len(header)+len(payload) > 0 {
			checkAgainstReference(t, v, testSecret, []byte(signedSegments(b64(string(header)), b64(string(payload)))), now)
			checkAgainstReference(t, v, testSecret, []byte(signedSegments(string(header), string(payload))), now)
		}
	})
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
