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

func reason(code int) string {
	switch code {
	case 100:
		return "Continue"
	case 200:
		return "OK"
	case 201:
		return "Created"
	case 204:
		return "No Content"
	case 304:
		return "Not Modified"
	case 400:
		return "Bad Request"
	case 401:
		return "Unauthorized"
	case 403:
		return "Forbidden"
	case 404:
		return "Not Found"
	case 405:
		return "Method Not Allowed"
	case 408:
		return "Request Timeout"
	case 411:
		return "Length Required"
	case 413:
		return "Content Too Large"
	case 415:
		return "Unsupported Media Type"
	case 417:
		return "Expectation Failed"
	case 422:
		return "Unprocessable Content"
	case 429:
		return "Too Many Requests"
	case 431:
		return "Request Header Fields Too Large"
	case 500:
		return "Internal Server Error"
	case 501:
		return "Not Implemented"
	case 503:
		return "Service Unavailable"
	case 505:
		return "HTTP Version Not Supported"
	}
	return "Status"
}
