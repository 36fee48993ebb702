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
