// A node:http app for the supervisor's real-program tests: serves the socket inherited at
// fd 3 (LISTEN_FDS, as the supervisor passes it), answers its pid; /slow answers after a
// second. With SEND_READY=1 it says ready over Node's IPC channel once listening, as PM2's
// wait_ready expects. SIGTERM, or the message "shutdown" (PM2's shutdown_with_message),
// closes the server: requests in flight finish, then it exits.
'use strict';
const http = require('http');

const server = http.createServer((req, res) => {
  const answer = () => res.end(`pid ${process.pid}\n`);
  if (req.url === '/slow') setTimeout(answer, 1000); else answer();
});
server.keepAliveTimeout = 60000;

function stop() {
  server.close(() => process.exit(0));
  server.closeIdleConnections();
}
process.on('SIGTERM', stop);
process.on('message', (m) => { if (m === 'shutdown') stop(); });

server.listen(process.env.LISTEN_FDS ? { fd: 3 } : 3000, () => {
  if (process.env.SEND_READY === '1' && process.send) process.send('ready');
});
