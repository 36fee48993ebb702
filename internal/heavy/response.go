package heavy

import "strconv"

// The response body. Everything in it is derived from the request: the resource and its
// related records from the id through a fixed hash (mix), the attributes from the body,
// the page of records from the query. The JSON layout is JSON.stringify(v, null, 2)'s.

// apiBase prefixes the URLs in the records.
const apiBase = "https://api.example.com/v1"

// Word lists the generated text is drawn from; none needs JSON escaping.
var (
	adjectives = []string{"Compact", "Brushed", "Heavy-duty", "Lightweight", "Modular", "Weatherproof",
		"Insulated", "Adjustable", "Foldable", "Rechargeable", "Industrial", "Ergonomic", "Reinforced",
		"Handcrafted", "Minimalist", "Professional"}
	materials = []string{"stainless steel", "anodised aluminium", "solid oak", "recycled polymer",
		"tempered glass", "carbon fibre", "cast iron", "bamboo composite"}
	nouns = []string{"kettle", "desk lamp", "tool chest", "bookshelf", "camping stove", "bike rack",
		"monitor arm", "standing desk", "storage crate", "garden bench", "spice rack", "coat stand",
		"bread bin", "wall clock", "plant stand", "laundry basket"}
	finishes = []string{"matte black", "satin nickel", "natural grain", "powder-coated white",
		"brushed copper", "graphite grey", "polished chrome", "sand-blasted"}
	uses = []string{"daily household", "heavy commercial", "occasional outdoor", "light workshop",
		"continuous office", "seasonal garden", "professional kitchen", "student dormitory"}
	tagWords = []string{"bestseller", "eco-friendly", "limited-edition", "new-arrival", "clearance",
		"gift-idea", "staff-pick", "made-in-europe", "bulk-discount", "refurbished", "premium", "essentials"}
	firstNames = []string{"ada", "grace", "alan", "edsger", "barbara", "donald", "frances", "ken",
		"margaret", "dennis", "radia", "leslie", "sophie", "tim", "hedy", "john"}
	lastNames = []string{"lovelace", "hopper", "turing", "dijkstra", "liskov", "knuth", "allen",
		"thompson", "hamilton", "ritchie", "perlman", "lamport", "wilson", "berners-lee", "lamarr", "backus"}
	colors     = []string{"teal", "crimson", "ochre", "slate", "ivory", "forest", "navy", "charcoal"}
	sizes      = []string{"XS", "S", "M", "L", "XL", "XXL"}
	currencies = []string{"EUR", "USD", "GBP", "CHF"}
	statuses   = []string{"active", "active", "active", "backorder", "preorder", "discontinued"}
)

// baseAttributes are the resource's own attributes, in order; the body's members replace
// them or are added after them.
var baseAttributes = [...]string{"color", "size", "weightGrams", "enabled", "labels", "dimensions"}

// mix is SplitMix64's finaliser: a fixed, well-spread hash of x.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// pick returns a word of list chosen by bits of h.
func pick(list []string, h uint64) string {
	return list[h%uint64(len(list))]
}

// Times in the response lie in the two years from 2023-01-01T00:00:00Z.
const (
	epoch    = 1672531200
	timeSpan = 2 * 365 * 86400
)

// AppendResponse appends the 200 response to a PATCH of resource id with the query q and
// the body b to dst.
func AppendResponse(dst []byte, id int64, q *Query, b *Body) []byte {
	e := encoder{buf: dst}
	h := mix(uint64(id))
	e.open('{')
	e.key("id")
	e.int(id)
	e.key("updated")
	e.bool(true)
	e.key("resource")
	appendResource(&e, id, h, b)
	e.key("patch")
	e.open('{')
	e.key("applied")
	e.open('[')
	for i := range b.Len() {
		e.elem()
		e.buf = append(e.buf, b.Key(i)...)
	}
	e.close(']')
	e.key("count")
	e.int(int64(b.Len()))
	e.close('}')
	e.key("query")
	e.open('{')
	e.key("page")
	e.int(int64(q.Page))
	e.key("size")
	e.int(int64(q.Size))
	e.key("fields")
	e.open('[')
	for f := range numFields {
		if q.Fields.Has(f) {
			e.elem()
			e.plain(fieldNames[f])
		}
	}
	e.close(']')
	e.key("verbose")
	e.bool(q.Verbose)
	e.close('}')

	total := int64(50000 + h%50000)
	size, page := int64(q.Size), int64(q.Page)
	pages := (total + size - 1) / size
	e.key("pagination")
	e.open('{')
	e.key("page")
	e.int(page)
	e.key("size")
	e.int(size)
	e.key("totalItems")
	e.int(total)
	e.key("totalPages")
	e.int(pages)
	e.key("hasNext")
	e.bool(page < pages)
	e.close('}')
	e.key("related")
	e.open('[')
	for g := (page - 1) * size; g < page*size && g < total; g++ {
		e.elem()
		e.buf = appendRecord(e.buf, id, g, q)
	}
	e.close(']')
	e.close('}')
	return e.buf
}

func appendResource(e *encoder, id int64, h uint64, b *Body) {
	e.open('{')
	e.key("id")
	e.int(id)
	e.key("type")
	e.plain("product-bundle")
	e.key("name")
	e.buf = append(e.buf, '"')
	e.buf = append(e.buf, pick(adjectives, h)...)
	e.buf = append(e.buf, ' ')
	e.buf = append(e.buf, pick(nouns, h>>8)...)
	e.buf = append(e.buf, " bundle "...)
	e.buf = strconv.AppendInt(e.buf, id, 10)
	e.buf = append(e.buf, '"')
	e.key("status")
	e.plain(pick(statuses, h>>12))
	e.key("version")
	e.int(int64(2 + h>>16%40))
	e.key("owner")
	e.buf = appendOwner(e.buf, mix(h), 3)

	e.key("attributes")
	e.open('{')
	for k, name := range baseAttributes {
		if j := b.find(name); j >= 0 {
			if v := b.Value(j); !isNull(v) {
				e.key(name)
				e.appendValue(v)
			}
			continue
		}
		e.key(name)
		appendBaseAttribute(e, k, h)
	}
	for i := range b.Len() {
		if v := b.Value(i); !isNull(v) && !isBaseAttribute(b.Key(i)) {
			e.keyJSON(b.Key(i))
			e.appendValue(v)
		}
	}
	e.close('}')
	created := epoch + int64(h>>20%timeSpan)
	e.key("createdAt")
	e.buf = appendTime(e.buf, created)
	e.key("updatedAt")
	e.buf = appendTime(e.buf, created+int64(h>>24%(30*86400)))
	e.close('}')
}

func appendBaseAttribute(e *encoder, k int, h uint64) {
	switch k {
	case 0:
		e.plain(pick(colors, h>>28))
	case 1:
		e.plain(pick(sizes, h>>32))
	case 2:
		e.int(int64(200 + h>>36%9800))
	case 3:
		e.bool(h>>40&1 == 0)
	case 4:
		e.open('[')
		e.elem()
		e.plain(pick(tagWords, h>>41))
		e.elem()
		e.plain(pick(tagWords, h>>45))
		e.close(']')
	case 5:
		e.open('{')
		e.key("widthMm")
		e.int(int64(100 + h>>49%900))
		e.key("heightMm")
		e.int(int64(100 + h>>52%900))
		e.key("depthMm")
		e.int(int64(50 + h>>55%450))
		e.close('}')
	}
}

func isBaseAttribute(key []byte) bool {
	for _, name := range baseAttributes {
		if len(key) == len(name)+2 && string(key[1:len(key)-1]) == name {
			return true
		}
	}
	return false
}

func isNull(v []byte) bool { return string(v) == "null" }

// appendOwner appends a user object whose members are at depth (3 in the resource, 4 in
// a record).
func appendOwner(b []byte, h uint64, depth int) []byte {
	k := &ownerKeys[depth-3]
	uid := int64(1000 + h%90000)
	first, last := pick(firstNames, h>>20), pick(lastNames, h>>24)
	b = append(b, '{')
	b = append(b, k[0][1:]...) // the first member: no comma
	b = strconv.AppendInt(b, uid, 10)
	b = append(b, k[1]...)
	b = append(b, '"')
	b = appendTitle(b, first)
	b = append(b, ' ')
	b = appendTitle(b, last)
	b = append(b, '"')
	b = append(b, k[2]...)
	b = append(b, '"')
	b = append(b, first...)
	b = append(b, '.')
	b = append(b, last...)
	b = strconv.AppendInt(b, uid, 10)
	b = append(b, "@accounts.example-marketplace.com\""...)
	b = append(b, k[3]...)
	if h>>30&3 != 0 {
		b = append(b, "true"...)
	} else {
		b = append(b, "false"...)
	}
	b = append(b, newlineIndent[:1+2*(depth-1)]...)
	return append(b, '}')
}

// appendTitle appends word with its first letter in upper case (ASCII).
func appendTitle(dst []byte, word string) []byte {
	c := word[0]
	if 'a' <= c && c <= 'z' {
		c -= 'a' - 'A'
	}
	dst = append(dst, c)
	return append(dst, word[1:]...)
}

// Key prefixes of the members written at a fixed depth: ",\n" + indent + `"name": `; the
// first member of an object takes the prefix without its comma. One append per key
// instead of five: the records hold two thirds of the response's keys.
var (
	recordKeys [numFields]string
	linksKey   = memberPrefix(3, "links")
	linkKeys   = [3]string{memberPrefix(4, "self"), memberPrefix(4, "resource"), memberPrefix(4, "owner")}
	ownerKeys  [2][4]string // members of an owner at depth 3 and 4
)

// Element prefixes at depth 4 (the tags of a record), and the ends of containers.
const (
	tagPrefix   = ",\n        "
	recordEnd   = "\n    }"
	closeAt3    = "\n      " // before the ']' or '}' of a container at depth 3
	memberDepth = 3          // of a record's members
)

func init() {
	for f := range numFields {
		recordKeys[f] = memberPrefix(memberDepth, fieldNames[f])
	}
	for d := range ownerKeys {
		for i, name := range [...]string{"id", "name", "email", "active"} {
			ownerKeys[d][i] = memberPrefix(3+d, name)
		}
	}
}

func memberPrefix(depth int, name string) string {
	return "," + newlineIndent[:1+2*depth] + `"` + name + `": `
}

// appendRecord appends related record g (0-based across pages) of resource id, with the
// fields of q, as the value of an element at depth 2.
//
// It is one step on purpose, though long (~160 lines): it runs once per record of every
// response, and the larger field blocks (name, description, the links) exceed the
// compiler's inlining budget, so splitting them out would add a call per field per record
// on the hot path (BenchmarkAppendResponse, TestServeAllocs). Each block
// writes one member, in the fixed order of the fields.
func appendRecord(b []byte, id, g int64, q *Query) []byte {
	h := mix(uint64(id)<<20 ^ uint64(g))
	fs := q.Fields
	var ridBuf [20]byte                              // the record id's digits, written three times
	rid := strconv.AppendUint(ridBuf[:0], h>>11, 10) // 53 bits: exact in JavaScript too
	b = append(b, '{')
	skip := 1 // the first member's prefix goes without its comma
	if fs.Has(FieldID) {
		b = append(b, recordKeys[FieldID][skip:]...)
		skip = 0
		b = append(b, rid...)
	}
	if fs.Has(FieldSKU) {
		b = append(b, recordKeys[FieldSKU][skip:]...)
		skip = 0
		b = append(b, `"SKU-`...)
		b = appendPadded(b, id%1000000, 6)
		b = append(b, '-')
		b = appendPadded(b, g, 5)
		b = append(b, '"')
	}
	adj, mat, noun := pick(adjectives, h), pick(materials, h>>4), pick(nouns, h>>8)
	if fs.Has(FieldName) {
		b = append(b, recordKeys[FieldName][skip:]...)
		skip = 0
		b = append(b, '"')
		b = append(b, adj...)
		b = append(b, ' ')
		b = append(b, mat...)
		b = append(b, ' ')
		b = append(b, noun...)
		b = append(b, ", model "...)
		b = strconv.AppendInt(b, int64(100+h>>12%900), 10)
		b = append(b, '"')
	}
	if fs.Has(FieldDescription) {
		b = append(b, recordKeys[FieldDescription][skip:]...)
		skip = 0
		b = append(b, '"')
		b = append(b, adj...)
		b = append(b, ' ')
		b = append(b, noun...)
		b = append(b, " in "...)
		b = append(b, mat...)
		b = append(b, " with a "...)
		b = append(b, pick(finishes, h>>16)...)
		b = append(b, " finish, rated for "...)
		b = append(b, pick(uses, h>>19)...)
		b = append(b, " use and backed by a "...)
		b = strconv.AppendInt(b, int64(1+h>>22%5), 10)
		b = append(b, "-year warranty. Ships flat-packed with every fixing included; assembly takes about "...)
		b = strconv.AppendInt(b, int64(10+h>>25%50), 10)
		b = append(b, " minutes with the supplied tools. Fits the "...)
		b = append(b, pick(nouns, h>>31)...)
		b = append(b, " mounts of the "...)
		b = append(b, pick(adjectives, h>>35)...)
		b = append(b, " range; spare parts stay available for at least "...)
		b = strconv.AppendInt(b, int64(5+h>>39%6), 10)
		b = append(b, " years after the last production run.\""...)
	}
	if fs.Has(FieldURL) {
		b = append(b, recordKeys[FieldURL][skip:]...)
		skip = 0
		b = appendURL(b, id, rid)
	}
	if fs.Has(FieldImageURL) {
		b = append(b, recordKeys[FieldImageURL][skip:]...)
		skip = 0
		b = append(b, `"https://cdn.example.com/images/products/`...)
		b = append(b, rid...)
		b = append(b, "/gallery/large-1600x1200.webp\""...)
	}
	if fs.Has(FieldPrice) {
		b = append(b, recordKeys[FieldPrice][skip:]...)
		skip = 0
		cents := int64(199 + h>>28%99800)
		b = append(b, '"')
		b = strconv.AppendInt(b, cents/100, 10)
		b = append(b, '.', byte('0'+cents/10%10), byte('0'+cents%10), '"')
	}
	if fs.Has(FieldCurrency) {
		b = append(b, recordKeys[FieldCurrency][skip:]...)
		skip = 0
		b = append(b, '"')
		b = append(b, pick(currencies, h>>45)...)
		b = append(b, '"')
	}
	if fs.Has(FieldQuantity) {
		b = append(b, recordKeys[FieldQuantity][skip:]...)
		skip = 0
		b = strconv.AppendInt(b, int64(h>>47%500), 10)
	}
	if fs.Has(FieldStatus) {
		b = append(b, recordKeys[FieldStatus][skip:]...)
		skip = 0
		b = append(b, '"')
		b = append(b, pick(statuses, h>>56)...)
		b = append(b, '"')
	}
	if fs.Has(FieldTags) {
		b = append(b, recordKeys[FieldTags][skip:]...)
		skip = 0
		b = append(b, '[')
		for t := range 3 {
			b = append(b, tagPrefix[1-min(t, 1):]...)
			b = append(b, '"')
			b = append(b, pick(tagWords, h>>(t*4+30))...)
			b = append(b, '"')
		}
		b = append(b, closeAt3...)
		b = append(b, ']')
	}
	oh := mix(h)
	if fs.Has(FieldOwner) {
		b = append(b, recordKeys[FieldOwner][skip:]...)
		skip = 0
		b = appendOwner(b, oh, memberDepth+1)
	}
	if fs.Has(FieldRating) {
		b = append(b, recordKeys[FieldRating][skip:]...)
		skip = 0
		r := int64(10 + oh>>40%41) // 1.0 .. 5.0 in tenths
		b = strconv.AppendInt(b, r/10, 10)
		if r%10 != 0 {
			b = append(b, '.', byte('0'+r%10))
		}
	}
	created := epoch + int64(oh>>8%timeSpan)
	if fs.Has(FieldCreatedAt) {
		b = append(b, recordKeys[FieldCreatedAt][skip:]...)
		skip = 0
		b = appendTime(b, created)
	}
	if fs.Has(FieldUpdatedAt) {
		b = append(b, recordKeys[FieldUpdatedAt][skip:]...)
		skip = 0
		b = appendTime(b, created+int64(oh>>36%(90*86400)))
	}
	if q.Verbose {
		b = append(b, linksKey[skip:]...)
		skip = 0
		b = append(b, '{')
		b = append(b, linkKeys[0][1:]...)
		b = appendURL(b, id, rid)
		b = append(b, linkKeys[1]...)
		b = append(b, `"`+apiBase+`/resources/`...)
		b = strconv.AppendInt(b, id, 10)
		b = append(b, '"')
		b = append(b, linkKeys[2]...)
		b = append(b, `"`+apiBase+`/users/`...)
		b = strconv.AppendInt(b, int64(1000+oh%90000), 10)
		b = append(b, '"')
		b = append(b, closeAt3...)
		b = append(b, '}')
	}
	if skip == 1 { // no members: "{}"
		return append(b, '}')
	}
	return append(b, recordEnd...)
}

func appendURL(dst []byte, id int64, rid []byte) []byte {
	dst = append(dst, `"`+apiBase+`/resources/`...)
	dst = strconv.AppendInt(dst, id, 10)
	dst = append(dst, "/related/"...)
	dst = append(dst, rid...)
	return append(dst, '"')
}

// appendPadded appends v >= 0 in decimal, zero-padded to width digits.
func appendPadded(dst []byte, v int64, width int) []byte {
	var b [20]byte
	i := len(b)
	for v > 0 || len(b)-i < width {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return append(dst, b[i:]...)
}

// appendTime appends the unix time sec (>= 0, before year 10000) as JavaScript's
// Date.toISOString writes it, quoted: "2023-11-14T22:13:20.000Z".
func appendTime(dst []byte, sec int64) []byte {
	days, rem := uint64(sec)/86400, uint64(sec)%86400
	// civil_from_days (H. Hinnant), for days since 1970-01-01 >= 0.
	z := days + 719468
	era := z / 146097
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if m > 12 {
		m -= 12
	}
	if m <= 2 {
		y++
	}
	hh, mm, ss := rem/3600, rem/60%60, rem%60
	return append(dst, '"',
		digitPairs[2*(y/100)], digitPairs[2*(y/100)+1], digitPairs[2*(y%100)], digitPairs[2*(y%100)+1], '-',
		digitPairs[2*m], digitPairs[2*m+1], '-', digitPairs[2*d], digitPairs[2*d+1], 'T',
		digitPairs[2*hh], digitPairs[2*hh+1], ':', digitPairs[2*mm], digitPairs[2*mm+1], ':',
		digitPairs[2*ss], digitPairs[2*ss+1], '.', '0', '0', '0', 'Z', '"')
}

const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"
