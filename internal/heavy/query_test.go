package heavy

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

func TestParseQuery(t *testing.T) {
	def := Query{Page: 1, Size: DefaultSize, Fields: AllFields}
	with := func(f func(*Query)) Query { q := def; f(&q); return q }
	tests := []struct {
		name  string
		query string
		want  Query
		param string // the parameter a 400 names; "" when accepted
	}{
		{"none", "", def, ""},
		{"page and size", "page=3&size=50", with(func(q *Query) { q.Page, q.Size = 3, 50 }), ""},
		{"limits", "page=1000&size=100", with(func(q *Query) { q.Page, q.Size = 1000, 100 }), ""},
		{"leading zeros", "page=007", with(func(q *Query) { q.Page = 7 }), ""},
		{"fields", "fields=name,price", with(func(q *Query) { q.Fields = 1<<FieldName | 1<<FieldPrice }), ""},
		{"fields escaped comma", "fields=name%2Cprice", with(func(q *Query) { q.Fields = 1<<FieldName | 1<<FieldPrice }), ""},
		{"fields repeated name", "fields=id,id", with(func(q *Query) { q.Fields = 1 << FieldID }), ""},
		{"verbose true", "verbose=true", with(func(q *Query) { q.Verbose = true }), ""},
		{"verbose 1", "verbose=1", with(func(q *Query) { q.Verbose = true }), ""},
		{"verbose 0", "verbose=0", def, ""},
		{"verbose false", "verbose=false", def, ""},
		{"unknown ignored", "utm_source=x&page=2&x", with(func(q *Query) { q.Page = 2 }), ""},
		{"long unknown name ignored", "averyveryverylongname=%zz", def, ""},
		{"empty pairs skipped", "&&page=2&", with(func(q *Query) { q.Page = 2 }), ""},
		{"escaped name", "p%61ge=4", with(func(q *Query) { q.Page = 4 }), ""},

		{"page zero", "page=0", def, "page"},
		{"page too big", "page=1001", def, "page"},
		{"page huge", "page=99999999999999999999999", def, "page"},
		{"page negative", "page=-1", def, "page"},
		{"page plus", "page=%2B1", def, "page"},
		{"page empty", "page=", def, "page"},
		{"page without value", "page", def, "page"},
		{"page float", "page=1.5", def, "page"},
		{"page twice", "page=1&page=2", def, "page"},
		{"size zero", "size=0", def, "size"},
		{"size too big", "size=101", def, "size"},
		{"size word", "size=ten", def, "size"},
		{"size bad escape", "size=%g1", def, "size"},
		{"fields unknown", "fields=id,secret", def, "fields"},
		{"fields empty item", "fields=id,,name", def, "fields"},
		{"fields trailing comma", "fields=id,", def, "fields"},
		{"fields empty", "fields=", def, "fields"},
		{"fields case", "fields=ID", def, "fields"},
		{"fields too long", "fields=" + strings.Repeat("id,", 100) + "id", def, "fields"},
		{"verbose yes", "verbose=yes", def, "verbose"},
		{"verbose bare", "verbose", def, "verbose"},
		{"verbose TRUE", "verbose=TRUE", def, "verbose"},
		{"verbose twice", "verbose=1&verbose=1", def, "verbose"},
		{"bad escape in name", "pa%ge=1", def, "(name)"},
		{"bad escape in unknown name", "a%zz=1", def, "(name)"},
		{"bad escape in long name", "averyveryverylongname%zz=1", def, "(name)"},
		{"truncated escape in name", "page%2", def, "(name)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseQuery([]byte(tt.query))
			if tt.param != "" {
				var pe *ParamError
				if !errors.As(err, &pe) || pe.Param != tt.param {
					t.Fatalf("ParseQuery(%q) = %v, want an error naming %s", tt.query, err, tt.param)
				}
				if !strings.Contains(pe.Error(), tt.param) {
					t.Errorf("message %q does not name %s", pe.Error(), tt.param)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("ParseQuery(%q) = %+v, %v; want %+v", tt.query, got, err, tt.want)
			}
		})
	}
}

// FuzzParseQuery: whatever the input, ParseQuery does not panic, what it accepts is in
// range, and it agrees with net/url on the value of page (where net/url can decode the
// query and page is given once).
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"", "page=2&size=10&fields=id,name&verbose=1", "page=%31", "a=%zz&page=3",
		"fields=id%2Cname", "page=1&page=1", "verbose"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := ParseQuery([]byte(s))
		if err != nil {
			var pe *ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParamError", err)
			}
			return
		}
		if q.Page < 1 || q.Page > MaxPage || q.Size < 1 || q.Size > MaxSize || q.Fields == 0 || q.Fields&^AllFields != 0 {
			t.Fatalf("ParseQuery(%q) = %+v: out of range", s, q)
		}
		if strings.Contains(s, ";") {
			return // net/url refuses semicolons
		}
		v, uerr := url.ParseQuery(s)
		if uerr != nil || len(v["page"]) != 1 {
			return
		}
		want, _ := strconv.Atoi(v["page"][0])
		if q.Page != want {
			t.Fatalf("ParseQuery(%q).Page = %d, net/url says %q", s, q.Page, v["page"][0])
		}
	})
}
