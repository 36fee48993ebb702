// Package loadgen is an HTTP/1.1 load generator: the engine behind bench/autocannon.
//
// It drives a fixed number of keep-alive TCP connections, each keeping up to Pipelining
// requests in flight, in one of two modes:
//
//   - closed loop (Rate 0): every response is answered at once by the next request, so
//     the server sets the pace; latency is measured from the write that carried a request
//     to the wake-up that found the last byte of its response;
//   - open loop (Rate > 0): request k of the run is due at start + k/Rate, the requests
//     dealt round-robin over the connections. A request that cannot be sent when due
//     (its connection already has Pipelining requests in flight) waits, and its latency
//     still counts from when it was due, so a stalled server cannot hide its queue
//     (no coordinated omission).
//
// Latencies go to HdrHistograms (1 µs to 60 s, 3 significant digits), one per worker per
// second: each loop swaps its own at the first turn past a second's end and hands the
// full one to the controller, which adds the loops' seconds up (Result.Intervals, an
// HdrHistogram interval log's worth) and in total (Result.Latency); per-second samples
// count requests, bytes and errors. Every run also
// judges its own generator (Result.Health, package genhealth): each loop's send lag and
// connect() times, a 1 ms hiccup probe and the process's CPU share, per second.
//
// The client is lean on purpose, so that the generator costs no more CPU per request than
// wrk: each worker is one goroutine running an event loop over its connections (raw
// non-blocking sockets in a private epoll set, which it waits on through Go's poller); each
// request's bytes are built once; responses are framed (by Content-Length, chunked coding,
// or the connection's close) in a reused read buffer without copying bodies; nothing is
// allocated per request in steady state.
//
// Connections are spread over source addresses (package srcaddr: on a loopback target,
// enough of 127.0.0.2, .3, … that no (source, server) pair nears Linux's connect() cliff
// at ~14,000; elsewhere Config.LocalAddrs), each socket bound with
// IP_BIND_ADDRESS_NO_PORT before its connect. Their first connects are paced
// (Config.ConnectRate: all at once up to 1,000, 10,000/s above); reconnects are not
// paced, but counted (Result.Reconnects).
//
// Linux only (epoll). Non-goals: TLS, HTTP/2, redirects, cookies, varying requests (see
// bench/autocannon's users mode for scripted journeys), reading response bodies.
package loadgen
