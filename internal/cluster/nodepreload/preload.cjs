// onehost's Node preload: lets an unmodified Node app serve the slot's socket in cluster
// mode, as PM2's container lets a cluster worker's listen(port) share the primary's handle.
//
// The supervisor passes it as NODE_OPTIONS=--require <this file> to every Node worker, with
// the served port in ONEHOST_NODE_PORT and the slot's listening socket at fd 3 (LISTEN_FDS).
// It wraps net.Server.prototype.listen, where node:http, Express's app.listen, Koa's and
// Fastify's listen all end:
//   - the first listen of the process for the served port (a number, a numeric string,
//     { port }, { port, host }) becomes listen({ fd: 3 }), so that the app's 'listening'
//     event, its callback and server.address() behave as usual; the host asked is kept
//     where the socket is wider: when fd 3 is bound on every interface (0.0.0.0, ::) and
//     the app asks for one host (Fastify's default 'localhost', '127.0.0.1', a name), a
//     connection to any other local address is closed before the app sees it, and the
//     supervisor is told ("onehost:host"), which says so in its log with the fix (bind the
//     slot's socket there: listen / env.HOST). Where the supervisor binds one address, that
//     address decides;
//   - a listen for another port (not 0), a port of the app's own, is served there as PM2's
//     primary serves it: the preload asks the supervisor over Node's IPC channel
//     ({"onehost":"listen",seq,port,host}), which binds the slot's socket on that address
//     (or finds the one it holds) and sends it back as Node passes handles (a NODE_HANDLE
//     message with the descriptor attached: 'internalMessage' here, never the app's
//     'message'); the server listens on it. The app's callback and 'listening' come as
//     usual, a little later, and "onehost:listening" is said as {"onehost":"listening",addr};
//   - where it cannot be served (the address is another process's, a port below 1024
//     without the capability, no IPC channel), listen fails with an error whose message is
//     one line, "onehost: the app's listen(PORT) cannot be served: WHY: FIX", emitted as
//     listen's own errors are ('error' on the server); an app with no handler for it (on
//     the server, or uncaughtException) gets that line alone on stderr and exits 1, so that
//     it is the first line the user sees, not one buried under the preload's own stack;
//   - a second listen for the served port, or for an app port, fails with EADDRINUSE, as
//     it would without us;
//   - an app's own listen({ fd: 3 }) is left as it is (and announced, below);
//   - unix socket paths, other { fd }, { handle }, port 0 (a port of its own) pass through, and
//     so does every listen of any other process Node starts with this NODE_OPTIONS (the
//     first process that loads the preload claims fd 3: ONEHOST_NODE_WORKER_PID), or of a
//     worker of the app's own cluster module.
// Once fd 3 listens it sends "onehost:listening" over Node's IPC channel, when there is one,
// so that a worker is online at 'listening' as in PM2's cluster mode; then, every
// ONEHOST_NODE_STATS_MS, its requests and open connections ({"onehost":"stats"}), the
// status columns our own workers fill. On the stop signal (SIGTERM, or SIGINT, PM2's
// default), when the app has no handler of its own for it, it drains as our own worker
// does: it stops accepting, answers every request from then on with "Connection: close"
// and closes the connection after it, keeps idle keep-alive connections open for
// ONEHOST_NODE_GRACE_MS (a request the client has already sent on one is answered, not
// met by a closed socket, which a client cannot tell from a failure), closes those still
// idle after it, and exits once its servers have closed. Node's default would drop the
// requests in flight; closing idle connections at once loses the requests on their way.
// ONEHOST_NODE_PRELOAD=0 in the app's environment turns all of this off.
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
  // ends the process) where the app has no handler for it. The listen callback is a
  // 'listening' listener, and there is none. Our own error (ONEHOST_PORT) unhandled is
  // written as its one line and the process exits 1: Node's report of an unhandled 'error'
  // would put the preload's stack first and the line the user needs out of sight.
  function fail(server, err) {
    process.nextTick(() => {
      if (err.code === 'ONEHOST_PORT' && server.listenerCount('error') === 0 &&
          process.listenerCount('uncaughtException') === 0) {
        require('fs').writeSync(2, err.message + '\n');
        process.exit(1);
      }
      server.emit('error', err);
    });
    return server;
  }

  // portError is the error of a listen the supervisor cannot serve: one line, why and what
  // to do.
  function portError(port, why, fix) {
    const err = new Error(`onehost: the app's listen(${port}) cannot be served: ${why}: ${fix}`);
    err.code = 'ONEHOST_PORT';
    err.port = port;
    err.served = served;
    return err;
  }

  // announce tells the supervisor, over Node's IPC channel where there is one, when the
  // server listens: on fd 3 (msg "onehost:listening"), or on an app port.
  function announce(server, msg) {
    count(server);
    server.once('listening', () => {
      tell(msg);
      startStats();
    });
  }

  // ask asks the supervisor for a socket on host:port, and calls done(answer, handle) with
  // its answer ({addr} and the handle, or {error, fix}). A timer waits for it (and keeps the
  // process alive meanwhile); the supervisor answers at once unless its loop is stuck.
  let seq = 0;
  const pending = new Map();
  function ask(port, host, done) {
    if (seq === 0) {
      process.on('internalMessage', (m, handle) => {
        if (!m || m.cmd !== 'NODE_ONEHOST_LISTEN') return;
        const cb = pending.get(m.seq);
        if (!cb) { if (handle) handle.close(); return; }
        pending.delete(m.seq);
        cb(m, handle);
      });
    }
    const n = ++seq;
    const timer = setTimeout(() => {
      pending.delete(n);
      done({ error: 'the supervisor did not answer within 30 s', fix: 'see its log (supervisor logs)' });
    }, 30000);
    pending.set(n, (m, handle) => { clearTimeout(timer); done(m, handle); });
    tell({ onehost: 'listen', seq: n, port, host });
  }

  // tell sends msg to the supervisor over Node's IPC channel, when there is one.
  function tell(msg) {
    if (process.send && process.connected) {
      try { process.send(msg); } catch (_) { /* the channel closed: nothing to tell */ }
    }
  }

  // The counters of the status columns: requests answered by our servers (HTTP's
  // 'request') and their open connections.
  let requests = 0;
  let conns = 0;
  function count(server) {
    server.prependListener('request', () => { requests++; });
    server.prependListener('connection', (sock) => {
      conns++;
      sock.once('close', () => { conns--; });
    });
  }
  let statsTimer;
  function startStats() {
    const every = Number(env.ONEHOST_NODE_STATS_MS);
    if (statsTimer || !Number.isFinite(every) || every <= 0 || !process.send) return;
    // at: this process's monotonic clock, in ms, so that the supervisor computes req/s
    // from when the counts were taken, not from when a busy loop read them.
    const report = () => tell({ onehost: 'stats', requests, connections: conns, at: performance.now() });
    report();
    statsTimer = setInterval(report, every);
    statsTimer.unref(); // never what keeps the app running
  }

  // hostOf reads the host a listen call asks for: '' when none (every interface).
  function hostOf(args) {
    const a = args[0];
    if (a !== null && typeof a === 'object') return typeof a.host === 'string' ? a.host : '';
    return typeof args[1] === 'string' ? args[1] : '';
  }

  // backlogOf is listen's options' backlog (undefined: Node's default), callbackOf its
  // callback (its last argument, when a function).
  function backlogOf(args) {
    const a = args[0];
    return a !== null && typeof a === 'object' ? a.backlog : undefined;
  }
  function callbackOf(args) {
    return typeof args[args.length - 1] === 'function' ? args[args.length - 1] : undefined;
  }

  // plainIP reads an address as Node reports it, v4-mapped IPv6 as IPv4.
  function plainIP(a) {
    a = String(a || '').toLowerCase();
    return a.startsWith('::ffff:') && a.includes('.') ? a.slice(7) : a;
  }
  function isLoopback(a) { a = plainIP(a); return a === '::1' || a.startsWith('127.'); }
  function isWildcard(a) { a = plainIP(a); return a === '' || a === '0.0.0.0' || a === '::'; }

  // keepHost makes the host the app asks for matter where fd 3 is bound wider (every
  // interface): a connection to another local address is closed as it is accepted, before
  // the app (or its 'connection' listeners) sees it. The address fd 3 serves is read at
  // 'listening'. A name other than localhost is resolved as listen would (its first
  // address); until it is, connections pass.
  function keepHost(server, host) {
    if (isWildcard(host)) return;
    server.once('listening', () => {
      const bound = server.address();
      if (!bound || typeof bound !== 'object' || !isWildcard(bound.address)) {
        if (bound && typeof bound === 'object') tell({ onehost: 'host', host, bound: bound.address, kept: false });
        return;
      }
      let allowed; // undefined: every address, for now
      if (host.toLowerCase() === 'localhost') {
        allowed = isLoopback;
      } else if (require('net').isIP(plainIP(host))) {
        const want = plainIP(host);
        allowed = (a) => plainIP(a) === want;
      } else {
        require('dns').lookup(host, (err, address) => {
          if (!err) allowed = (a) => plainIP(a) === plainIP(address);
        });
      }
      const h = server._handle;
      if (h && typeof h.onconnection === 'function' && typeof h.getsockname === 'function') {
        const onconnection = h.onconnection;
        h.onconnection = function onehostConnection(err, client) {
          if (!err && client && allowed && typeof client.getsockname === 'function') {
            const local = {};
            if (client.getsockname(local) === 0 && !allowed(local.address)) {
              client.close();
              return undefined;
            }
          }
          return onconnection.call(this, err, client);
        };
      } else {
        // A Node without the handle's hook: the same, once the socket exists.
        server.prependListener('connection', (sock) => {
          if (allowed && !allowed(sock.localAddress)) sock.destroy();
        });
      }
      tell({ onehost: 'host', host, bound: bound.address, kept: true });
    });
  }

  net.Server.prototype.listen = function onehostListen(...args) {
    const a = args[0];
    if (!taken && a !== null && typeof a === 'object' && a.fd === 3) {
      // An app that already serves the inherited socket itself: as it is, announced.
      taken = true;
      servers.push(this);
      announce(this, 'onehost:listening');
      return listen.apply(this, args);
    }
    const port = portOf(args);
    if (port === undefined || port === 0) return listen.apply(this, args);
    if (port !== served) return listenOwn(this, port, hostOf(args), args);
    if (taken) return fail(this, inUse(port));
    taken = true;
    servers.push(this);
    announce(this, 'onehost:listening');
    keepHost(this, hostOf(args));
    const opts = { fd: 3 };
    const backlog = backlogOf(args);
    if (backlog !== undefined) opts.backlog = backlog;
    const cb = callbackOf(args);
    return cb ? listen.call(this, opts, cb) : listen.call(this, opts);
  };

  function inUse(port) {
    const err = new Error(`listen EADDRINUSE: port ${port} is already served by another server of this process ` +
      `(onehost gives the first listen for it the slot's socket there)`);
    err.code = 'EADDRINUSE';
    err.port = port;
    return err;
  }

  // listenOwn serves a listen for a port of the app's own (not the served one) on the
  // socket the supervisor binds for it. Without Node's IPC channel there is nobody to ask:
  // the error then says how to make the supervisor serve that port.
  const asked = new Set(); // host|port of this process's app ports
  function listenOwn(server, port, host, args) {
    if (!process.send || !process.connected) {
      const fix = env.PORT !== undefined && env.PORT !== String(served)
        ? `the app's environment sets PORT=${env.PORT}: leave PORT out (the supervisor sets it to the port it serves) or make the supervisor serve port ${env.PORT} (-listen 0.0.0.0:${env.PORT})`
        : `make the app listen on process.env.PORT (the supervisor sets it to ${served}), or make the supervisor serve port ${port} (-listen 0.0.0.0:${port})`;
      return fail(server, portError(port, `the app listens on port ${port}, but the supervisor serves port ${served} ` +
        `(the slot's socket, fd 3) and no IPC channel reaches it to ask for another`, fix));
    }
    const key = `${host}|${port}`;
    if (asked.has(key)) return fail(server, inUse(port));
    asked.add(key);
    servers.push(server);
    const backlog = backlogOf(args);
    const cb = callbackOf(args);
    if (cb) server.once('listening', cb); // now, as listen would add it
    ask(port, host, (m, handle) => {
      if (m.error || !handle) {
        asked.delete(key);
        fail(server, portError(port, m.error || 'no socket came with the supervisor\'s answer', m.fix || 'see its log'));
        return;
      }
      announce(server, { onehost: 'listening', addr: m.addr });
      if (backlog !== undefined) listen.call(server, handle, backlog);
      else listen.call(server, handle);
    });
    return server;
  }

  // The stop, as our own worker drains: stop accepting (net's close: http's own close would
  // also close the idle keep-alive connections at once), answer every response not yet
  // begun with "Connection: close" and close its connection after it, keep idle
  // connections open for the grace (a request already sent on one is answered), then close
  // those still idle; exit once every server has closed, that is once its last connection
  // has. The supervisor's SIGKILL after kill_timeout bounds it.
  let stopping = false;
  // closeAfter makes every response of our servers whose head is not yet written say
  // "Connection: close", and Node close its connection after it: writeHead is where
  // node:http, Express (through res.end) and Fastify write a head. Patched at the stop
  // only, so that serving costs nothing until then.
  function closeAfter() {
    const http = require('http');
    const writeHead = http.ServerResponse.prototype.writeHead;
    http.ServerResponse.prototype.writeHead = function onehostWriteHead(...args) {
      if (this.socket && servers.includes(this.socket.server)) {
        this.shouldKeepAlive = false; // Node writes "Connection: close" and closes after it
        if (this.hasHeader('connection')) this.setHeader('Connection', 'close');
      }
      return writeHead.apply(this, args);
    };
  }
  function stop(signal) {
    if (process.listenerCount(signal) > 1) return; // the app handles its own stop
    if (stopping) return;
    stopping = true;
    closeAfter();
    let open = servers.filter((s) => s.listening).length;
    if (open === 0) process.exit(0);
    for (const s of servers) {
      if (!s.listening) continue;
      net.Server.prototype.close.call(s, () => { if (--open === 0) process.exit(0); });
    }
    const grace = Number(env.ONEHOST_NODE_GRACE_MS);
    // closeIdle runs after the loop's next poll (setImmediate): a timer that fires late on a
    // starved machine would otherwise close connections whose next request is already in
    // the kernel's buffer, unread; the poll reads it, and the connection is busy, not idle.
    const closeIdle = () => setImmediate(() => {
      for (const s of servers) {
        if (typeof s.closeIdleConnections === 'function') s.closeIdleConnections();
      }
    });
    // After the grace, idle connections are closed as they become idle; each one's next
    // response already closes it, so this is for those whose clients send nothing.
    const afterGrace = () => { closeIdle(); setInterval(closeIdle, 50).unref(); };
    if (Number.isFinite(grace) && grace > 0) setTimeout(afterGrace, grace).unref();
    else afterGrace();
  }
  for (const sig of ['SIGTERM', 'SIGINT']) {
    process.on(sig, () => stop(sig));
  }
})();
