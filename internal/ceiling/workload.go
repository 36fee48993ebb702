package ceiling

import (
	"fmt"
	"slices"
	"strings"

	"github.com/onehost/onehost/internal/contentcoding"
)

// Workload is one kind of request the sweep sends.
type Workload struct {
	Name    string
	Method  string   // default GET
	Path    string   // with a leading slash
	Headers []string // "Name: value"
	Body    string
	// Writes: the workload writes to SQLite (it is judged for lock waits).
	Writes bool
	// WrkScript: a wrk Lua script that builds the requests itself (the challenge mix).
	// Such a workload runs on wrk whatever generator the others use, until the
	// autocannon clone can send a mix. Its Path and Method are then only the probe.
	WrkScript string
}

// DefaultWorkloads are the sweep's five workloads; mixScript is bench/mix.lua.
func DefaultWorkloads(mixScript string) []Workload {
	return []Workload{
		{Name: "hello", Path: "/api/hello"},
		{Name: "static", Path: "/static/catalog.html"},
		{Name: "feed", Path: "/feed"},
		{Name: "heavy", Method: "PATCH", Path: "/api/resource/123",
			Headers: []string{"Content-Type: application/json"}, Body: `{"foo1":"bar"}`},
		// Last: it writes, and the server's copy of the seed is not reset between workloads.
		{Name: "mix", Path: "/feed", Writes: true, WrkScript: mixScript},
	}
}

// SelectWorkloads returns the named workloads of all, in all's order, each NAME+CODING
// right after NAME's place: "static+br" is the static workload asking for that content
// coding (Accept-Encoding: br), for gzip, zstd or br. The coding is a dimension of the
// workload, so a run's bytes per request, its model and its NIC verdict are the encoded
// ones.
func SelectWorkloads(all []Workload, names []string) ([]Workload, error) {
	var known []string
	for _, w := range all {
		known = append(known, w.Name)
	}
	for _, n := range names {
		base, coding, encoded := strings.Cut(n, "+")
		i := slices.IndexFunc(all, func(w Workload) bool { return w.Name == base })
		if i < 0 {
			return nil, fmt.Errorf("select workloads: unknown workload %q (known: %s, each also as NAME+gzip, +zstd or +br)", n, strings.Join(known, ", "))
		}
		if !encoded {
			continue
		}
		if c, err := contentcoding.Parse(coding); err != nil || c == contentcoding.Identity {
			return nil, fmt.Errorf("select workloads: %q: want NAME+gzip, NAME+zstd or NAME+br", n)
		}
		if all[i].WrkScript != "" {
			return nil, fmt.Errorf("select workloads: %q: %s runs on a wrk script that sets its own headers; measure its routes one by one", n, base)
		}
	}
	var out []Workload
	for _, w := range all {
		if slices.Contains(names, w.Name) {
			out = append(out, w)
		}
		for _, n := range names {
			base, coding, encoded := strings.Cut(n, "+")
			if encoded && base == w.Name && !slices.ContainsFunc(out, func(o Workload) bool { return o.Name == n }) {
				c, _ := contentcoding.Parse(coding) // checked above
				out = append(out, withCoding(w, c))
			}
		}
	}
	return out, nil
}

// withCoding is w asking for content coding c.
func withCoding(w Workload, c contentcoding.Coding) Workload {
	w.Name += "+" + c.String()
	w.Headers = append(slices.Clip(w.Headers), "Accept-Encoding: "+c.String())
	return w
}

// requestedCoding is the content coding a workload asks for ("" none).
func requestedCoding(name string) string {
	_, coding, _ := strings.Cut(name, "+")
	return coding
}
