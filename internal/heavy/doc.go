// Package heavy is the "realistic API" workload of the Node clustering article: one PATCH
// endpoint, /api/resource/:id, that parses a path parameter, validates query parameters
// and a JSON body, applies the body to a resource and answers with about 32 KB of
// pretty-printed JSON (about 700 lines) built and serialised on every request.
//
// The response is a function of the id, the query and the body alone: the resource and
// its related records are generated from the id with a fixed hash, timestamps included,
// so the same request always gets the same bytes (a golden file pins them) and nothing is
// cached across requests.
//
// The work is done the way a lean Go service would do it, which is the point of the
// comparison with the Fastify peer: the body is checked by a small validating JSON
// scanner of this package (no reflection, no maps), the response is appended to the
// connection's reused buffer by a pretty-printing encoder that writes JSON.stringify's
// layout (two-space indent, "key": value), and the per-request scratch space comes from a
// sync.Pool, so a request allocates nothing in steady state.
//
// Non-goals: storage (there is no database behind the resource), JSON Merge Patch beyond
// the top level (see Body), and number canonicalisation (numbers are echoed as written).
package heavy
