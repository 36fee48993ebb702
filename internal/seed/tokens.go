package seed

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"
)

// TokenLifetime is how long a load-test token stays valid.
const TokenLifetime = 3650 * 24 * time.Hour

// jwtHeader is base64url(`{"alg":"HS256","typ":"JWT"}`), the same for every token.
var jwtHeader = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))

// WriteTokens writes the load test's token file for users 1..n: a JSON array with one
// {"id":N,"username":"…","token":"…"} object per line. Each token is an HS256 JWT signed
// with secret whose payload is {"sub":"N","username":"…","iat":now,"exp":now+3650 days},
// in exactly that key order (the tokens are signed by hand so that the order is fixed).
func WriteTokens(w io.Writer, secret []byte, n int, now time.Time) error {
	if n < 0 || n > NumUsers {
		return fmt.Errorf("write tokens: %d users requested, the seed has %d", n, NumUsers)
	}
	users := Users()[:n]
	iat := now.Unix()
	exp := now.Add(TokenLifetime).Unix()
	bw := bufio.NewWriter(w)
	bw.WriteString("[")
	var payload, line []byte
	for i, u := range users {
		name, err := json.Marshal(u.Username)
		if err != nil {
			return fmt.Errorf("write tokens: %w", err)
		}
		payload = append(payload[:0], `{"sub":"`...)
		payload = strconv.AppendInt(payload, u.ID, 10)
		payload = append(payload, `","username":`...)
		payload = append(payload, name...)
		payload = append(payload, `,"iat":`...)
		payload = strconv.AppendInt(payload, iat, 10)
		payload = append(payload, `,"exp":`...)
		payload = strconv.AppendInt(payload, exp, 10)
		payload = append(payload, '}')

		if i > 0 {
			line = append(line[:0], ',')
		} else {
			line = line[:0]
		}
		line = append(line, "\n"+`{"id":`...)
		line = strconv.AppendInt(line, u.ID, 10)
		line = append(line, `,"username":`...)
		line = append(line, name...)
		line = append(line, `,"token":"`...)
		line = appendHS256(line, secret, payload)
		line = append(line, `"}`...)
		bw.Write(line)
	}
	bw.WriteString("\n]\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write tokens: %w", err)
	}
	return nil
}

// appendHS256 appends the compact HS256 JWT of payload to b.
func appendHS256(b, secret, payload []byte) []byte {
	start := len(b)
	b = append(b, jwtHeader...)
	b = append(b, '.')
	b = base64.RawURLEncoding.AppendEncode(b, payload)
	mac := hmac.New(sha256.New, secret)
	mac.Write(b[start:])
	b = append(b, '.')
	return base64.RawURLEncoding.AppendEncode(b, mac.Sum(nil))
}
