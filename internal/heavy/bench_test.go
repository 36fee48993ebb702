package heavy

import (
	"testing"

	"github.com/onehost/onehost/internal/http1"
)

// BenchmarkServe is the whole handler on the article's request, PATCH /api/resource/123
// with {"foo1":"bar"}: route, checks, body
// scan, response build (about 31 KB).
func BenchmarkServe(b *testing.B) {
	h := NewHandler(Config{})
	method, path, ct, body := []byte("PATCH"), []byte("/api/resource/123"), []byte("application/json"), []byte(`{"foo1":"bar"}`)
	var w http1.Response
	b.ReportAllocs()
	for b.Loop() {
		w = http1.Response{Body: w.Body[:0]}
		h.serve(&w, method, path, nil, ct, body)
	}
	b.SetBytes(int64(len(w.Body)))
	if w.Status != 0 {
		b.Fatalf("status %d: %s", w.Status, w.Body)
	}
}

// BenchmarkAppendResponse is the response build alone.
func BenchmarkAppendResponse(b *testing.B) {
	var body Body
	if err := body.Parse([]byte(`{"foo1":"bar","nested":{"a":[1,2,{"b":"c\u00e9"}]}}`)); err != nil {
		b.Fatal(err)
	}
	q, _ := ParseQuery(nil)
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendResponse(buf[:0], 123, &q, &body)
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkParseBody scans a 1 KB body of mixed values.
func BenchmarkParseBody(b *testing.B) {
	src := []byte(mixedBody)
	var body Body
	b.ReportAllocs()
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if err := body.Parse(src); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseQuery(b *testing.B) {
	q := []byte("page=3&size=50&fields=id%2Cname,price,owner&verbose=true&utm_source=x")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseQuery(q); err != nil {
			b.Fatal(err)
		}
	}
}
