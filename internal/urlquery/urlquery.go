// Package urlquery decodes the components of a URL query string (the names and values of
// application/x-www-form-urlencoded pairs: %XX escapes, '+' for a space) into a caller's
// fixed-size buffer, without allocating: for request parsers on hot paths that only care
// about short, known names and values.
//
// Non-goals: splitting the query into pairs (callers differ on what a bad pair means),
// encoding, anything net/url does beyond url.QueryUnescape.
package urlquery

// Unescape appends the decoding of s to dst as far as dst's capacity allows, and reports
// whether all of it fitted and whether every escape in s was well-formed (checked even
// past what fitted). It decodes as url.QueryUnescape does: '+' is a space, %XX (either
// case) is the byte XX, every other byte stands for itself.
func Unescape(dst, s []byte) (out []byte, fits, valid bool) {
	fits = true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '+':
			c = ' '
		case '%':
			if i+2 >= len(s) {
				return dst, fits, false
			}
			h, l := unhex(s[i+1]), unhex(s[i+2])
			if h < 0 || l < 0 {
				return dst, fits, false
			}
			c = byte(h<<4 | l)
			i += 2
		}
		if len(dst) == cap(dst) {
			fits = false
			continue
		}
		dst = append(dst, c)
	}
	return dst, fits, true
}

// unhex returns the value of the hex digit c, or -1.
func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}
