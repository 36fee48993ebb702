// Package http1 is a lean HTTP/1.1 server for small JSON and HTML APIs served directly to the
// internet or behind nginx.
//
// It exists because the feed API's budget is ~20 µs of CPU per request and net/http spends
// about half of that on its own machinery (per-request maps, bufio, goroutine hand-offs and
// ~20 allocations). This server parses only what an API needs, answers from reused
// per-connection buffers and allocates nothing per request in steady state.
//
// What it guarantees (each is tested on raw sockets):
//   - keep-alive, HTTP/1.0 with and without keep-alive, "Connection: close";
//   - pipelining: requests already in the read buffer are answered in order and their
//     responses leave in one write;
//   - requests arriving one byte at a time, bodies split across writes, header names in any case;
//   - "Expect: 100-continue" gets exactly one interim response, only when the body is not
//     already there, and never when the request will be refused (413);
//   - ambiguous framing (two different Content-Lengths, Content-Length with chunked, a
//     Transfer-Encoding other than chunked, signed or non-numeric lengths, obsolete line
//     folding, whitespace before a colon) is 400 and the connection closes, so no smuggled
//     request behind it is ever read;
//   - a request head over MaxHeaderBytes is 431, a body over MaxBodyBytes is 413, both close;
//   - a stalled request is dropped after ReadTimeout, a client that does not read its
//     responses after WriteTimeout, and memory per connection is bounded by the buffer
//     limits; idle keep-alive connections are kept for IdleTimeout, a new connection that
//     sends nothing for FirstRequestTimeout (60 s, nginx's client_header_timeout);
//   - past MaxConns open connections (default: the descriptor limit less a reserve) a new
//     one is closed at once and counted, as when descriptors run out.
//
// Two transports serve those guarantees with the same parser (Server.Transport): the
// goroutine transport (the zero value's; the worker chooses the loop) gives each connection a goroutine parked on Go's
// netpoller; the loop transport (loop.go) owns the connections from one epoll loop per
// GOMAXPROCS (Server.Loops), each new connection given to the loop holding the fewest,
// reads a socket only when epoll says data is there, and holds a buffer only
// while a request is read or a response written, so an idle connection costs a few hundred
// bytes instead of a goroutine's stack and buffers. Handlers run on the loop; requests a
// handler's Blocker says may wait run on goroutines of their own.
//
// Files: server.go is the Server (config, Serve, Shutdown, the connection limit) and its
// goroutine transport; request.go the Request, the Response and the reason phrases;
// rawio.go the non-blocking socket calls. loop.go starts and runs the loop transport's
// epoll loops (run, wake-ups, the tick); loopaccept.go accepts and
// spreads connections over the loops (handOff, adopt, the shed reserve); loopwait.go
// parks a loop in Go's netpoller (poll, yield); loopconn.go drives one connection on a
// loop (ready, advance, write, close, the buffer pools). conn.go is a connection's state and
// its read and timeout handling, shared by both transports; parse.go parses a request's line
// and head; chunked.go decodes chunked bodies; connwrite.go appends and flushes responses.
//
// Non-goals: HTTP/2, TLS, upgrades, trailers exposed to handlers, streaming bodies. Bodies are
// read whole (they are at most MaxBodyBytes) and responses are built whole.
package http1
