package token

import (
	"bytes"
	"errors"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// subPattern is the spec's sub rule as the challenge's Node entry writes it.
var subPattern = regexp.MustCompile(`^[1-9][0-9]{0,15}$`)

// referenceVerify is what Verify must agree with: golang-jwt v5 with the options the feed
// API's rules need, then the checks of the scheme (RFC 9110: case-insensitive, 1*SP), the length cap, sub and
// username.
func referenceVerify(secret, authorization []byte, now time.Time) (int64, string, error) {
	scheme, rest, found := bytes.Cut(authorization, []byte(" "))
	if !found || !bytes.EqualFold(scheme, []byte("Bearer")) {
		return 0, "", ErrMissing
	}
	if len(authorization) > MaxAuthorizationLen {
		return 0, "", ErrInvalid
	}
	tok, err := jwt.Parse(string(bytes.TrimLeft(rest, " ")),
		func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{"HS256"}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	if err != nil {
		return 0, "", ErrInvalid
	}
	claims := tok.Claims.(jwt.MapClaims)
	sub, ok := claims["sub"].(string)
	if !ok || !subPattern.MatchString(sub) {
		return 0, "", ErrPayload
	}
	username, ok := claims["username"].(string)
	if !ok {
		return 0, "", ErrPayload
	}
	id, err := strconv.ParseInt(sub, 10, 64)
	if err != nil {
		return 0, "", ErrPayload
	}
	return id, username, nil
}

// checkAgainstReference runs Verify and referenceVerify on authorization and fails t when
// they differ in error or claims.
func checkAgainstReference(t *testing.T, v *Verifier, secret, authorization []byte, now time.Time) {
	t.Helper()
	c := Claims{Username: []byte("stale")}
	err := v.Verify(&c, authorization, now)
	wantID, wantName, wantErr := referenceVerify(secret, authorization, now)
	if !errors.Is(err, wantErr) {
		t.Fatalf("Verify(%q, now %v) = %v, golang-jwt reference says %v", authorization, now.UnixNano(), err, wantErr)
	}
	if err != nil {
		if c.UserID != 0 || len(c.Username) != 0 {
			t.Fatalf("Verify(%q) failed but left claims %d %q", authorization, c.UserID, c.Username)
		}
		return
	}
	if c.UserID != wantID || string(c.Username) != wantName {
		t.Fatalf("Verify(%q) = claims %d %q, golang-jwt reference says %d %q", authorization, c.UserID, c.Username, wantID, wantName)
	}
}
