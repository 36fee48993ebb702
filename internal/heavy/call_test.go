package heavy

import "github.com/onehost/onehost/internal/http1"

// mixedBody has every kind of value, escapes and non-ASCII text.
const mixedBody = `{
  "title": "A \"quoted\" title with \\ backslash, tab\t and \u00e9\u20ac\ud83d\ude00 and \/slash",
  "count": 42, "ratio": -0.125e+2, "big": 123456789012345678901234567890,
  "flags": [true, false, null], "empty": {}, "none": [],
  "nested": {"level": {"deeper": [1, [2, [3, {"k": "v"}]]], "html": "<script>alert(1)</script>"}},
  "text": "línea\nnueva \u0001 control \u2028 separator",
  "color": "ultraviolet", "labels": null
}`

// call runs the handler on a request given by its parts; target may carry a query.
func call(h *Handler, w *http1.Response, method, target, contentType, body string) {
	path, query := target, ""
	for i := range len(target) {
		if target[i] == '?' {
			path, query = target[:i], target[i+1:]
			break
		}
	}
	var q []byte
	if query != "" || len(path) < len(target) {
		q = []byte(query)
	}
	var ct []byte
	if contentType != "" {
		ct = []byte(contentType)
	}
	h.serve(w, []byte(method), []byte(path), q, ct, []byte(body))
}
