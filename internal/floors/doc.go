// Package floors keeps the project's import graph the shape its rooms were drawn in; it has
// no code, only a test (floors_test.go) that reads the graph with `go list` and fails when
// an import points where it must not:
//
//   - the supervisor (cmd/supervisor and its packages: the CLI, the daemon, the registry,
//     the control protocol, its logs, views, loader, pages) knows no workload (no feed,
//     no SQLite, no route, no write path) and no instrument (no load generator, journey,
//     ceiling, balancer);
//   - the engine it runs (internal/cluster and what it stands on: ipc, steering, procstat,
//     systemd's protocols) knows neither the supervisor's packages above it, nor a
//     workload, nor an instrument;
//   - the workers (cmd/worker and the workloads) know no supervisor package but the
//     channel they speak to it over (internal/ipc);
//   - the fleet's write log (internal/lognode, internal/writelog, cmd/lognode: NATS
//     JetStream) is linked by the worker and the log node alone: the supervisor runs the
//     node as an app, and the feed reaches the log through an interface of its own, so a
//     single host runs with no log at all;
//   - the leaves import nothing of the project;
//   - no package imports a command's, but a command its own CLI;
//   - no binary shipped to production (supervisor, worker, lognode) links package testing
//     or an instrument;
//   - every package of the module is on a floor.
package floors
