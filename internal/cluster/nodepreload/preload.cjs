// onehost's Node preload: lets an unmodified Node app serve the slot's socket in cluster
// mode, as PM2's container lets a cluster worker's listen(port) share the primary's handle.
//
// The supervisor passes it as NODE_OPTIONS=--require <this file> to every Node worker, with
// the served port in ONEHOST_NODE_PORT and the slot's listening socket at fd 3 (LISTEN_FDS).
// It wraps net.Server.prototype.listen, where node:http, Express's app.listen, Koa's and
// Fastify's listen all end:
//   - the first listen of the process for the served port (a number, a numeric string,
//     { port }, { port, host }) becomes listen({ fd: 3 }), so that the app's 'listening'
//     event, its callback and server.address() behave as usual; the host asked is ignored
//     (the supervisor's listen address decides);
//   - a listen for another port (not 0) fails with an error that names the port asked and
//     the port served, emitted as listen's own errors are ('error' on the server);
//   - a second listen for the served port fails with EADDRINUSE, as it would without us;
//   - an app's own listen({ fd: 3 }) is left as it is (and announced, below);
//   - unix socket paths, other { fd }, { handle }, port 0 (a port of its own) pass through, and
//     so does every listen of any other process Node starts with this NODE_OPTIONS (the
//     first process that loads the preload claims fd 3: ONEHOST_NODE_WORKER_PID), or of a
//     worker of the app's own cluster module.
// Once fd 3 listens it sends "onehost:listening" over Node's IPC channel, when there is one,
// so that a worker is online at 'listening' as in PM2's cluster mode. On the stop signal
// (SIGTERM, or SIGINT, PM2's default), when the app has no handler of its own for it, it
// closes its servers, lets requests in flight finish and exits: Node's default would drop
// them. ONEHOST_NODE_PRELOAD=0 in the app's environment turns all of this off.
'use strict';

(function onehostPreload() {
  const env = process.env;
  const served = Number(env.ONEHOST_NODE_PORT);
  if (env.ONEHOST_NODE_PRELOAD === '0' || !Number.isInteger(served) || served <= 0 || !env.LISTEN_FDS) return;
  if (env.ONEHOST_NODE_WORKER_PID && env.ONEHOST_NODE_WORKER_PID !== String(process.pid)) return;
  env.ONEHOST_NODE_WORKER_PID = String(process.pid); // children the app starts see it is not theirs
  const cluster = require('cluster');
  if (!cluster.isPrimary) return;

  const net = require('net');
  const listen = net.Server.prototype.listen;
  const servers = []; // ours, on fd 3
  let taken = false;

  // portOf reads the port a listen call asks for: a number, or undefined when the call is not
  // for a TCP port (a path, an fd, a handle) and passes through.
  function portOf(args) {
    const a = args[0];
    if (a === undefined || a === null || typeof a === 'function') return 0;
    if (typeof a === 'number') return a;
    if (typeof a === 'string') return /^\d+$/.test(a) ? Number(a) : undefined;
    if (typeof a === 'object') {
      if (a.path !== undefined || a.fd !== undefined || a.handle !== undefined || a._handle !== undefined) return undefined;
      if (a.port === undefined || a.port === null) return 0;
      const p = Number(a.port);
      return Number.isInteger(p) ? p : undefined;
    }
    return undefined;
  }

  // fail emits err as listen's own errors are: 'error' on the server, which throws (and
  // ends the process, its message in the log) where the app has no handler for it. The
  // listen callback is a 'listening' listener, and there is none.
  function fail(server, err) {
    process.nextTick(() => server.emit('error', err));
    return server;
  }

  // announce tells the supervisor, over Node's IPC channel where there is one, when the
  // server on fd 3 listens.
  function announce(server) {
    server.once('listening', () => {
      if (process.send && process.connected) {
        try { process.send('onehost:listening'); } catch (_) { /* the channel closed: nothing to tell */ }
      }
    });
  }

  net.Server.prototype.listen = function onehostListen(...args) {
    const a = args[0];
    if (!taken && a !== null && typeof a === 'object' && a.fd === 3) {
      // An app that already serves the inherited socket itself: as it is, announced.
      taken = true;
      servers.push(this);
      announce(this);
      return listen.apply(this, args);
    }
    const port = portOf(args);
    if (port === undefined || port === 0) return listen.apply(this, args);
    if (port !== served) {
      const what = env.PORT !== undefined && env.PORT !== String(served)
        ? `the app's environment sets PORT=${env.PORT}: leave PORT out (the supervisor sets it to the port it serves) or make the supervisor serve port ${env.PORT}`
        : `make the app listen on process.env.PORT (the supervisor sets it to ${served}), or make the supervisor serve port ${port}`;
      const err = new Error(`onehost: the app listens on port ${port}, but the supervisor serves port ${served} ` +
        `(the slot's socket, fd 3): ${what}`);
      err.code = 'ONEHOST_PORT';
      err.port = port;
      err.served = served;
      return fail(this, err);
    }
    if (taken) {
      const err = new Error(`listen EADDRINUSE: port ${port} is already served by another server of this process ` +
        `(onehost gives the slot's socket to the first listen for it)`);
      err.code = 'EADDRINUSE';
      err.port = port;
      return fail(this, err);
    }
    taken = true;
    servers.push(this);
    announce(this);
    const opts = { fd: 3 };
    if (a !== null && typeof a === 'object' && a.backlog !== undefined) opts.backlog = a.backlog;
    const cb = typeof args[args.length - 1] === 'function' ? args[args.length - 1] : undefined;
    return cb ? listen.call(this, opts, cb) : listen.call(this, opts);
  };

  // The stop: close the servers (no new connections), close idle keep-alive connections as
  // they become idle, exit once every server closed. The supervisor's SIGKILL after
  // kill_timeout bounds it.
  let stopping = false;
  function stop(signal) {
    if (process.listenerCount(signal) > 1) return; // the app handles its own stop
    if (stopping) return;
    stopping = true;
    let open = servers.filter((s) => s.listening).length;
    if (open === 0) process.exit(0);
    for (const s of servers) {
      if (!s.listening) continue;
      s.close(() => { if (--open === 0) process.exit(0); });
      if (typeof s.closeIdleConnections === 'function') {
        s.closeIdleConnections();
        setInterval(() => s.closeIdleConnections(), 50).unref();
      }
    }
  }
  for (const sig of ['SIGTERM', 'SIGINT']) {
    process.on(sig, () => stop(sig));
  }
})();
