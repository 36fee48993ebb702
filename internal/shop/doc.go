// Package shop is the "$6 server" workload: the four kinds of route the article put on a
// one-vCPU box, served by one worker.
//
//   - GET /static/catalog.html: a 6.7 KB static HTML catalogue page, embedded in the binary
//     (the same file nginx serves from internal/shop/static/), with a strong ETag, a
//     Last-Modified and Cache-Control, answering conditional requests with 304;
//   - GET /api/hello: a tiny JSON API answer, {"hello":"world"};
//   - GET /api/products?page=N: twenty rows of a 5,000-row SQLite table as JSON;
//   - GET /products?page=N: the same query rendered as an HTML page with html/template.
//
// The products live in their own SQLite file (the feed database's schema is fixed),
// generated deterministically on first use (EnsureProducts) and read through read-only
// connections with a prepared statement; every request runs the query, nothing is cached.
//
// Non-goals: writes, search, sorting, anything a real shop needs beyond these reads.
package shop
