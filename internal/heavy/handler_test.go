package heavy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/goldentest"
	"github.com/onehost/onehost/internal/http1"
)

func TestServe(t *testing.T) {
	const ok = `{"foo1":"bar"}`
	tests := []struct {
		name, method, target, ctype, body string
		status                            int
		want                              string // exact body for errors
	}{
		{"article request", "PATCH", "/api/resource/123", "application/json", ok, 200, ""},
		{"charset utf-8", "PATCH", "/api/resource/1", "application/json; charset=UTF-8", ok, 200, ""},
		{"quoted charset", "PATCH", "/api/resource/1", `Application/JSON;charset="utf-8"`, ok, 200, ""},
		{"other parameter", "PATCH", "/api/resource/1", "application/json; profile=x", ok, 200, ""},
		{"leading zeros", "PATCH", "/api/resource/007", "application/json", ok, 200, ""},
		{"largest id", "PATCH", "/api/resource/9007199254740991", "application/json", ok, 200, ""},
		{"all parameters", "PATCH", "/api/resource/5?page=2&size=3&fields=id,name&verbose=true", "application/json", ok, 200, ""},
		{"page past the end", "PATCH", "/api/resource/5?page=1000&size=100", "application/json", ok, 200, ""},
		{"deepest body", "PATCH", "/api/resource/5", "application/json", `{"a":` + strings.Repeat(`[{"b":`, 15) + `[]` + strings.Repeat(`}]`, 15) + `}`, 200, ""},
		{"too deep", "PATCH", "/api/resource/5", "application/json", `{"a":` + strings.Repeat(`[{"b":`, 16) + `[]` + strings.Repeat(`}]`, 16) + `}`, 400, `{"error":"request body nests more than 32 levels deep"}`},

		{"deeper path", "PATCH", "/api/resource/1/x", "application/json", ok, 404, `{"error":"not found"}`},
		{"trailing slash", "PATCH", "/api/resource/1/", "application/json", ok, 404, `{"error":"not found"}`},
		{"other path", "PATCH", "/api/resources/1", "application/json", ok, 404, `{"error":"not found"}`},
		{"GET", "GET", "/api/resource/1", "", "", 405, `{"error":"method not allowed"}`},
		{"lowercase patch", "patch", "/api/resource/1", "application/json", ok, 405, `{"error":"method not allowed"}`},
		{"method before id", "PUT", "/api/resource/abc", "application/json", ok, 405, `{"error":"method not allowed"}`},
		{"empty id", "PATCH", "/api/resource/", "application/json", ok, 400, `{"error":"invalid id: want an integer from 1 to 9007199254740991"}`},
		{"zero id", "PATCH", "/api/resource/0", "application/json", ok, 400, `{"error":"invalid id: want an integer from 1 to 9007199254740991"}`},
		{"negative id", "PATCH", "/api/resource/-1", "application/json", ok, 400, `{"error":"invalid id: want an integer from 1 to 9007199254740991"}`},
		{"word id", "PATCH", "/api/resource/abc", "application/json", ok, 400, `{"error":"invalid id: want an integer from 1 to 9007199254740991"}`},
		{"float id", "PATCH", "/api/resource/1.5", "application/json", ok, 400, `{"error":"invalid id: want an integer from 1 to 9007199254740991"}`},
		{"id past 2^53-1", "PATCH", "/api/resource/9007199254740992", "application/json", ok, 400, `{"error":"invalid id: want an integer from 1 to 9007199254740991"}`},
		{"id before query", "PATCH", "/api/resource/x?page=0", "application/json", ok, 400, `{"error":"invalid id: want an integer from 1 to 9007199254740991"}`},
		{"bad page", "PATCH", "/api/resource/1?page=0", "application/json", ok, 400, `{"error":"invalid query parameter page: want an integer from 1 to 1000"}`},
		{"bad size", "PATCH", "/api/resource/1?size=101", "application/json", ok, 400, `{"error":"invalid query parameter size: want an integer from 1 to 100"}`},
		{"bad fields", "PATCH", "/api/resource/1?fields=x", "application/json", ok, 400, `{"error":"` + errFields.Error() + `"}`},
		{"bad verbose", "PATCH", "/api/resource/1?verbose=2", "application/json", ok, 400, `{"error":"invalid query parameter verbose: want true, false, 1 or 0"}`},
		{"query before content type", "PATCH", "/api/resource/1?page=x", "text/plain", ok, 400, `{"error":"invalid query parameter page: want an integer from 1 to 1000"}`},
		{"no content type", "PATCH", "/api/resource/1", "", ok, 415, `{"error":"unsupported content type: want application/json"}`},
		{"text/plain", "PATCH", "/api/resource/1", "text/plain", ok, 415, `{"error":"unsupported content type: want application/json"}`},
		{"merge-patch+json", "PATCH", "/api/resource/1", "application/merge-patch+json", ok, 415, `{"error":"unsupported content type: want application/json"}`},
		{"latin-1", "PATCH", "/api/resource/1", "application/json; charset=iso-8859-1", ok, 415, `{"error":"unsupported content type: want application/json"}`},
		{"content type before body", "PATCH", "/api/resource/1", "text/html", "", 415, `{"error":"unsupported content type: want application/json"}`},
		{"too large", "PATCH", "/api/resource/1", "application/json", `{"a":"` + strings.Repeat("x", 16<<10) + `"}`, 413, `{"error":"request body too large"}`},
		{"empty body", "PATCH", "/api/resource/1", "application/json", "", 400, `{"error":"request body is empty: want a JSON object"}`},
		{"malformed", "PATCH", "/api/resource/1", "application/json", `{"foo1":}`, 400, `{"error":"request body is not valid JSON"}`},
		{"array body", "PATCH", "/api/resource/1", "application/json", `["foo1"]`, 400, `{"error":"request body must be a JSON object"}`},
		{"null body", "PATCH", "/api/resource/1", "application/json", `null`, 400, `{"error":"request body must be a JSON object"}`},
		{"duplicate key", "PATCH", "/api/resource/1", "application/json", `{"a":1,"a":2}`, 400, `{"error":"an object in the request body has a duplicate key"}`},
		{"lone surrogate", "PATCH", "/api/resource/1", "application/json", `{"a":"\udead"}`, 400, `{"error":"request body is not valid UTF-8 or has a lone surrogate escape"}`},
	}
	h := NewHandler(Config{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w http1.Response
			call(h, &w, tt.method, tt.target, tt.ctype, tt.body)
			status := w.Status
			if status == 0 {
				status = 200
			}
			if status != tt.status {
				t.Fatalf("status %d (%s), want %d", status, w.Body, tt.status)
			}
			if tt.want != "" && string(w.Body) != tt.want {
				t.Errorf("body %s, want %s", w.Body, tt.want)
			}
			if status == 200 {
				if !json.Valid(w.Body) {
					t.Fatalf("invalid JSON response:\n%s", w.Body)
				}
				if w.ContentType != "application/json; charset=utf-8" {
					t.Errorf("content type %q", w.ContentType)
				}
			} else if !json.Valid(w.Body) {
				t.Errorf("error body %s is not JSON", w.Body)
			}
		})
	}
}

// TestArticleResponseSize: the article's request gets 30–34 KB in about 700 lines.
func TestArticleResponseSize(t *testing.T) {
	var w http1.Response
	call(NewHandler(Config{}), &w, "PATCH", "/api/resource/123", "application/json", `{"foo1":"bar"}`)
	n, lines := len(w.Body), bytes.Count(w.Body, []byte{'\n'})+1
	if n < 30000 || n > 34000 || lines < 650 || lines > 750 {
		t.Errorf("%d bytes in %d lines, want 30,000–34,000 bytes and 650–750 lines", n, lines)
	}
}

// TestGolden pins the response to the article's request byte for byte, and checks that
// it has JSON.stringify(v, null, 2)'s layout: re-indenting it changes nothing.
func TestGolden(t *testing.T) {
	var w http1.Response
	call(NewHandler(Config{}), &w, "PATCH", "/api/resource/123", "application/json", `{"foo1":"bar"}`)
	goldentest.Check(t, "patch-123.json", w.Body)
	var v any
	if err := json.Unmarshal(w.Body, &v); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := json.Indent(&again, w.Body, "", "  "); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), w.Body) {
		t.Error("the response is not in JSON.stringify's two-space layout")
	}
}

// response is the part of the response the semantic tests look at.
type response struct {
	ID       int64
	Resource struct {
		ID         int64
		Attributes map[string]any
	}
	Patch struct {
		Applied []string
		Count   int
	}
	Query struct {
		Page, Size int
		Fields     []string
		Verbose    bool
	}
	Pagination struct {
		Page, Size, TotalItems, TotalPages int
		HasNext                            bool
	}
	Related []map[string]any
}

func serveJSON(t *testing.T, target, body string) response {
	t.Helper()
	var w http1.Response
	call(NewHandler(Config{}), &w, "PATCH", target, "application/json", body)
	if w.Status != 0 {
		t.Fatalf("status %d: %s", w.Status, w.Body)
	}
	var r response
	if err := json.Unmarshal(w.Body, &r); err != nil {
		t.Fatalf("%v in\n%s", err, w.Body)
	}
	return r
}

// TestPatchApplied: the body's members replace or extend the attributes; null removes.
func TestPatchApplied(t *testing.T) {
	base := serveJSON(t, "/api/resource/42", `{}`).Resource.Attributes
	if len(base) != len(baseAttributes) {
		t.Fatalf("base attributes %v", base)
	}
	r := serveJSON(t, "/api/resource/42", `{"color":"<red> & \"blue\"","size":null,"extra":{"a":[1,2.50,{"b":"\u00e9\n"}],"e":{}},"z":null}`)
	attrs := r.Resource.Attributes
	if got := attrs["color"]; got != `<red> & "blue"` {
		t.Errorf("color = %#v", got)
	}
	if _, ok := attrs["size"]; ok {
		t.Error("size was not removed by null")
	}
	if _, ok := attrs["z"]; ok {
		t.Error("z: null was added")
	}
	want := map[string]any{"a": []any{1.0, 2.5, map[string]any{"b": "é\n"}}, "e": map[string]any{}}
	if got := attrs["extra"]; !reflect.DeepEqual(got, want) {
		t.Errorf("extra = %#v, want %#v", got, want)
	}
	for _, k := range []string{"weightGrams", "enabled", "labels", "dimensions"} {
		if !reflect.DeepEqual(attrs[k], base[k]) {
			t.Errorf("%s changed: %v, was %v", k, attrs[k], base[k])
		}
	}
	if want := []string{"color", "size", "extra", "z"}; !reflect.DeepEqual(r.Patch.Applied, want) || r.Patch.Count != 4 {
		t.Errorf("patch = %+v, want applied %v", r.Patch, want)
	}
}

// TestQueryShapesResponse: page, size, fields and verbose do what they say.
func TestQueryShapesResponse(t *testing.T) {
	r := serveJSON(t, "/api/resource/7?page=3&size=4&fields=name,id&verbose=1", `{"x":1}`)
	if r.Query.Page != 3 || r.Query.Size != 4 || !r.Query.Verbose || !reflect.DeepEqual(r.Query.Fields, []string{"id", "name"}) {
		t.Errorf("query echo %+v", r.Query)
	}
	if len(r.Related) != 4 {
		t.Fatalf("%d related records, want 4", len(r.Related))
	}
	for _, rec := range r.Related {
		if len(rec) != 3 || rec["id"] == nil || rec["name"] == nil || rec["links"] == nil {
			t.Errorf("record %v: want exactly id, name and links", rec)
		}
	}
	all := serveJSON(t, "/api/resource/7?size=12", `{}`)
	if p := all.Related[8]; !reflect.DeepEqual(p["id"], r.Related[0]["id"]) {
		t.Errorf("record 9 of size 12 (%v) is not record 1 of page 3 of size 4 (%v)", p["id"], r.Related[0]["id"])
	}
	if n := len(all.Related[0]); n != int(numFields) {
		t.Errorf("a default record has %d fields, want %d", n, numFields)
	}
	last := serveJSON(t, "/api/resource/7?size=100&page=1000", `{}`)
	if last.Pagination.TotalPages >= 1000 || len(last.Related) != 0 || last.Pagination.HasNext {
		t.Errorf("past the end: %+v with %d records", last.Pagination, len(last.Related))
	}
}

// TestDeterministic: the same request gets the same bytes, another id other bytes.
func TestDeterministic(t *testing.T) {
	h := NewHandler(Config{})
	get := func(target string) string {
		var w http1.Response
		call(h, &w, "PATCH", target, "application/json", mixedBody)
		return string(w.Body)
	}
	a, b, c := get("/api/resource/9?verbose=1"), get("/api/resource/9?verbose=1"), get("/api/resource/10?verbose=1")
	if a != b {
		t.Error("two identical requests got different responses")
	}
	if a == c {
		t.Error("two ids got the same response")
	}
}

func TestServeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	h := NewHandler(Config{})
	method, path, query, ct, body := []byte("PATCH"), []byte("/api/resource/123"), []byte("verbose=1&fields=id,name,owner"), []byte("application/json"), []byte(mixedBody)
	var w http1.Response
	for _, q := range [][]byte{nil, query} {
		allocs := testing.AllocsPerRun(100, func() {
			w = http1.Response{Body: w.Body[:0]}
			h.serve(&w, method, path, q, ct, body)
		})
		if allocs != 0 {
			t.Errorf("query %q: %.1f allocations per request, want 0", q, allocs)
		}
	}
}

// TestOverHTTP runs the handler in an http1.Server on port 0 for what only the server
// shows: the Allow header, the server's own 413 at its 16 KiB default, keep-alive.
func TestOverHTTP(t *testing.T) {
	srv := &http1.Server{Handler: NewHandler(Config{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	do := func(method, body string) *http.Response {
		t.Helper()
		fmt.Fprintf(c, "%s /api/resource/123 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", method, len(body), body)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(b))
		return resp
	}
	resp := do("PATCH", `{"foo1":"bar"}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json; charset=utf-8" || resp.ContentLength < 30000 {
		t.Errorf("article request: %d %q, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), resp.ContentLength)
	}
	if resp := do("GET", ""); resp.StatusCode != 405 || resp.Header.Get("Allow") != "PATCH" {
		t.Errorf("GET: %d, Allow %q; want 405, PATCH", resp.StatusCode, resp.Header.Get("Allow"))
	}
	// Exactly 16 KiB is accepted, on the same connection.
	pad := 16<<10 - len(`{"a":""}`)
	if resp := do("PATCH", `{"a":"`+strings.Repeat("x", pad)+`"}`); resp.StatusCode != 200 {
		t.Errorf("16 KiB body: %d", resp.StatusCode)
	}
	// One byte more: the server refuses it before the handler runs, and closes.
	resp = do("PATCH", `{"a":"`+strings.Repeat("x", pad+1)+`"}`)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 413 || string(body) != `{"error":"request body too large"}` || !resp.Close {
		t.Errorf("16 KiB + 1: %d %s close=%v; want 413 and a closed connection", resp.StatusCode, body, resp.Close)
	}
}
