package http1

import "strconv"

// Request is one parsed request. Its slices point into the connection's buffers and are
// valid only while the handler runs.
type Request struct {
	Method []byte
	Path   []byte // the target up to '?', not unescaped
	Query  []byte // after '?', without it; nil when absent
	Minor  int    // HTTP/1.Minor: 0 or 1
	Body   []byte

	hdr [maxHeaders]field
	nh  int
}

type field struct{ name, value []byte }

// Header returns the value of the first header named name (ASCII case-insensitive), or nil.
func (r *Request) Header(name string) []byte {
	for i := 0; i < r.nh; i++ {
		if equalFold(r.hdr[i].name, name) {
			return r.hdr[i].value
		}
	}
	return nil
}

// HeaderList returns the value of the list-based header named name (Accept-Encoding,
// If-None-Match …) as RFC 9110 5.3 reads one sent on several field lines: their values in
// order, joined by ", ". One line, the usual case, is returned as Header returns it, with
// no copy; two or more are joined in dst's storage (give a buffer to reuse, e.g. a stack
// array's [:0], and the join allocates only when it outgrows it). nil when absent.
func (r *Request) HeaderList(dst []byte, name string) []byte {
	var first []byte
	n := 0
	for i := 0; i < r.nh; i++ {
		if !equalFold(r.hdr[i].name, name) {
			continue
		}
		switch v := r.hdr[i].value; n {
		case 0:
			first = v
		case 1:
			dst = append(append(append(dst[:0], first...), ", "...), v...)
		default:
			dst = append(append(dst, ", "...), v...)
		}
		n++
	}
	if n <= 1 {
		return first
	}
	return dst
}

// MethodIs reports whether the method is m (methods are case-sensitive).
func (r *Request) MethodIs(m string) bool { return string(r.Method) == m }

// Response is what a handler answers. The server resets it before every request.
type Response struct {
	// Status defaults to 200.
	Status int
	// ContentType defaults to "application/json".
	ContentType string
	// Body is appended to by the handler; its storage is reused across requests.
	Body []byte
	// Close asks the server to close the connection after this response.
	Close bool
	// Probe marks the answer to a health check: it is not counted in Stats.Requests. A
	// balancer checks a drained host on (HAProxy's httpchk, every inter), and `supervisor
	// drain` waits for that counter to stand still.
	Probe bool

	header []byte
}

// AddHeader adds a header line. Name and value must be valid header text: the caller's
// constants, never request input.
func (w *Response) AddHeader(name, value string) {
	w.header = append(w.header, name...)
	w.header = append(w.header, ": "...)
	w.header = append(w.header, value...)
	w.header = append(w.header, "\r\n"...)
}

// Error sets an error answer: status and the body {"error":"msg"}. msg must not need JSON
// escaping (the callers' messages are constants).
func (w *Response) Error(status int, msg string) {
	w.Status = status
	w.ContentType = ""
	w.Body = append(w.Body[:0], `{"error":"`...)
	w.Body = append(w.Body, msg...)
	w.Body = append(w.Body, `"}`...)
}

func (w *Response) reset() {
	w.Status = 0
	w.ContentType = ""
	w.Body = w.Body[:0]
	w.Close = false
	w.Probe = false
	w.header = w.header[:0]
}

func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c, d := b[i], s[i]
		if c == d {
			continue
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// statusLine returns "HTTP/1.1 NNN Reason\r\n".
func statusLine(dst []byte, code int) []byte {
	dst = append(dst, "HTTP/1.1 "...)
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = append(dst, ' ')
	dst = append(dst, reason(code)...)
	return append(dst, "\r\n"...)
}

// reason is code's reason phrase: RFC 9110's for every status it defines (section 15),
// and those of RFC 6585 and RFC 7725; "" for a code it does not know, which RFC 9112
// allows (the status line then ends "NNN \r\n"). A handler may send any of them, so the
// table is whole rather than the list of what the handlers send today (a 406 went out as
// "406 Status" when the table lacked it).
func reason(code int) string {
	if code >= 0 && code < len(reasons) {
		return reasons[code]
	}
	return ""
}

var reasons = [...]string{
	100: "Continue",
	101: "Switching Protocols",
	200: "OK",
	201: "Created",
	202: "Accepted",
	203: "Non-Authoritative Information",
	204: "No Content",
	205: "Reset Content",
	206: "Partial Content",
	300: "Multiple Choices",
	301: "Moved Permanently",
	302: "Found",
	303: "See Other",
	304: "Not Modified",
	305: "Use Proxy",
	307: "Temporary Redirect",
	308: "Permanent Redirect",
	400: "Bad Request",
	401: "Unauthorized",
	402: "Payment Required",
	403: "Forbidden",
	404: "Not Found",
	405: "Method Not Allowed",
	406: "Not Acceptable",
	407: "Proxy Authentication Required",
	408: "Request Timeout",
	409: "Conflict",
	410: "Gone",
	411: "Length Required",
	412: "Precondition Failed",
	413: "Content Too Large",
	414: "URI Too Long",
	415: "Unsupported Media Type",
	416: "Range Not Satisfiable",
	417: "Expectation Failed",
	421: "Misdirected Request",
	422: "Unprocessable Content",
	426: "Upgrade Required",
	428: "Precondition Required",
	429: "Too Many Requests",
	431: "Request Header Fields Too Large",
	451: "Unavailable For Legal Reasons",
	500: "Internal Server Error",
	501: "Not Implemented",
	502: "Bad Gateway",
	503: "Service Unavailable",
	504: "Gateway Timeout",
	505: "HTTP Version Not Supported",
	511: "Network Authentication Required",
}
