package feed

// appendJSONString appends s to dst as a JSON string literal, escaped exactly as SQLite's
// json_quote (and JavaScript's JSON.stringify, for well-formed text) does: `"` and `\` are
// escaped, the control characters U+0000–U+001F become \b, \t, \n, \f, \r or \u00xx
// (lowercase hex), and everything else, U+007F, `<>&`, U+2028 and non-ASCII included, is
// copied as is. The reference implementation builds its JSON in SQLite, so the golden
// bytes follow SQLite; the bytes are copied even when they are not valid UTF-8, as SQLite
// copies them.
func appendJSONString[T ~string | ~[]byte](dst []byte, s T) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		// Skip 8 clean bytes at a time: the feed escapes ~5 KB per request, and a profile
		// put the byte loop at 6 % of the feed's CPU.
		for i+8 <= len(s) && !needsEscape8(uint64(s[i])|uint64(s[i+1])<<8|uint64(s[i+2])<<16|
			uint64(s[i+3])<<24|uint64(s[i+4])<<32|uint64(s[i+5])<<40|uint64(s[i+6])<<48|uint64(s[i+7])<<56) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			const hex = "0123456789abcdef"
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// needsEscape8 reports whether any of the 8 bytes packed in x is below 0x20, '"' or '\\'
// (the classic SWAR "has zero byte" and "has byte less than n" tests: a borrow can flag a
// lane above a true match but never a lane when there is none, so the answer is exact).
func needsEscape8(x uint64) bool {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	lt := (x - ones*0x20) &^ x & highs // a byte < 0x20 (bytes >= 0x80 are excluded by &^x)
	q := x ^ (ones * '"')
	bs := x ^ (ones * '\\')
	eq := ((q-ones)&^q | (bs-ones)&^bs) & highs
	return lt|eq != 0
}
