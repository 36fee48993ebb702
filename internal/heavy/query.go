package heavy

import (
	"bytes"

	"github.com/onehost/onehost/internal/urlquery"
)

// Query parameters of PATCH /api/resource/:id. Unknown parameters are ignored, as most
// APIs do; a known one with a bad value, or given twice, is a 400 that names it.

// Field is one field of a related record; Fields is a set of them.
type Field uint8

// Fields is a set of Field, bit f for field f.
type Fields uint32

// The fields of a related record, in the order they are written.
const (
	FieldID Field = iota
	FieldSKU
	FieldName
	FieldDescription
	FieldURL
	FieldImageURL
	FieldPrice
	FieldCurrency
	FieldQuantity
	FieldStatus
	FieldTags
	FieldOwner
	FieldRating
	FieldCreatedAt
	FieldUpdatedAt
	numFields
)

// fieldNames are the names of the fields, as the fields parameter and the response spell
// them.
var fieldNames = [numFields]string{
	"id", "sku", "name", "description", "url", "imageUrl", "price", "currency", "quantity",
	"status", "tags", "owner", "rating", "createdAt", "updatedAt",
}

// AllFields is every field: the default of the fields parameter.
const AllFields Fields = 1<<numFields - 1

// Has reports whether f is in the set.
func (s Fields) Has(f Field) bool { return s&(1<<f) != 0 }

// Limits and defaults of the query parameters.
const (
	MaxPage     = 1000
	MaxSize     = 100
	DefaultSize = 25
)

// Query is a validated query string.
type Query struct {
	Page    int    // page of related records, 1..MaxPage; default 1
	Size    int    // related records per page, 1..MaxSize; default DefaultSize
	Fields  Fields // fields of each related record; default AllFields
	Verbose bool   // add links to each related record; default false
}

// ParamError is a query parameter with a bad value. Its message names the parameter
// and says what is wanted; it needs no JSON escaping.
type ParamError struct {
	Param string
	msg   string
}

func (e *ParamError) Error() string { return e.msg }

func paramError(param, want string) *ParamError {
	return &ParamError{Param: param, msg: "invalid query parameter " + param + ": " + want}
}

// The errors of ParseQuery, built once so a refused request allocates nothing.
var (
	errPage        = paramError("page", "want an integer from 1 to 1000")
	errSize        = paramError("size", "want an integer from 1 to 100")
	errFields      = paramError("fields", "want a comma-separated list of id, sku, name, description, url, imageUrl, price, currency, quantity, status, tags, owner, rating, createdAt, updatedAt")
	errVerbose     = paramError("verbose", "want true, false, 1 or 0")
	errPageTwice   = paramError("page", "given more than once")
	errSizeTwice   = paramError("size", "given more than once")
	errFieldsTwice = paramError("fields", "given more than once")
	errVerboseTwo  = paramError("verbose", "given more than once")
	// ErrQueryEncoding is a query string with a bad percent-escape in a parameter's name,
	// known or not: the name cannot be known.
	ErrQueryEncoding = paramError("(name)", "bad percent-encoding in a parameter name")
)

// maxValue bounds a decoded parameter value: the longest valid fields list fits.
const maxValue = 256

// ParseQuery parses and validates the query string q (the request target after '?',
// still percent-encoded; '+' is a space). It returns a *ParamError for a bad known
// parameter.
func ParseQuery(q []byte) (Query, error) {
	out := Query{Page: 1, Size: DefaultSize, Fields: AllFields}
	var seen [4]bool
	var buf [maxValue]byte
	for len(q) > 0 {
		var pair []byte
		if i := bytes.IndexByte(q, '&'); i >= 0 {
			pair, q = q[:i], q[i+1:]
		} else {
			pair, q = q, nil
		}
		if len(pair) == 0 {
			continue
		}
		name, value, hasValue := pair, []byte(nil), false
		if i := bytes.IndexByte(pair, '='); i >= 0 {
			name, value, hasValue = pair[:i], pair[i+1:], true
		}
		var nb [8]byte
		dn, fits, valid := urlquery.Unescape(nb[:0], name)
		if !valid {
			return out, ErrQueryEncoding
		}
		if !fits {
			continue // too long for a known name
		}
		var which int
		switch string(dn) {
		case "page":
			which = 0
		case "size":
			which = 1
		case "fields":
			which = 2
		case "verbose":
			which = 3
		default:
			continue
		}
		if seen[which] {
			return out, [...]error{errPageTwice, errSizeTwice, errFieldsTwice, errVerboseTwo}[which]
		}
		seen[which] = true
		v, fits, valid := urlquery.Unescape(buf[:0], value)
		if !fits || !valid || !hasValue {
			return out, [...]error{errPage, errSize, errFields, errVerbose}[which]
		}
		switch which {
		case 0:
			n, ok := parseUint(v, MaxPage)
			if !ok || n < 1 {
				return out, errPage
			}
			out.Page = n
		case 1:
			n, ok := parseUint(v, MaxSize)
			if !ok || n < 1 {
				return out, errSize
			}
			out.Size = n
		case 2:
			f, ok := parseFields(v)
			if !ok {
				return out, errFields
			}
			out.Fields = f
		case 3:
			switch string(v) {
			case "true", "1":
				out.Verbose = true
			case "false", "0":
				out.Verbose = false
			default:
				return out, errVerbose
			}
		}
	}
	return out, nil
}

// parseUint parses 1*DIGIT no greater than max (leading zeros allowed).
func parseUint(s []byte, max int) (int, bool) {
	if len(s) == 0 {
		return 0, false
	}
	n := 0
	for _, c := range s {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int(c-'0')
		if n > max {
			return 0, false
		}
	}
	return n, true
}

// parseFields parses a comma-separated list of field names: no empty items, no unknown
// names; repeats are harmless.
func parseFields(s []byte) (Fields, bool) {
	var set Fields
	for {
		item := s
		i := bytes.IndexByte(s, ',')
		if i >= 0 {
			item, s = s[:i], s[i+1:]
		}
		f, ok := lookupField(item)
		if !ok {
			return 0, false
		}
		set |= 1 << f
		if i < 0 {
			return set, true
		}
	}
}

func lookupField(name []byte) (Field, bool) {
	for f, n := range fieldNames {
		if string(name) == n {
			return Field(f), true
		}
	}
	return 0, false
}
