// Each form of listen an app may call, under the supervisor's Node preload (TestNodePreload):
// prints one JSON object, case -> what happened.
'use strict';
const net = require('net');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');

const served = Number(process.env.ONEHOST_NODE_PORT);
const out = {};

function attempt(name, ...args) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.on('error', (err) => { out[name] = `error ${err.code}`; if (err.code === 'ONEHOST_PORT') out.message = err.message; resolve(s); });
    s.listen(...args, () => {
      const a = s.address();
      if (typeof a === 'string') out[name] = 'listening path';
      else if (a.port === served) out[name] = `listening ${a.address}:${a.port}`;
      else out[name] = 'listening own';
      resolve(s);
    });
  });
}

(async () => {
  const servers = [];
  servers.push(await attempt('first {port, host}', { port: served, host: '0.0.0.0' }));
  servers.push(await attempt('second for the port', served));
  servers.push(await attempt('numeric string, another', '1'));
  servers.push(await attempt('another port', 1, '127.0.0.1'));
  servers.push(await attempt('port 0', 0));
  servers.push(await attempt('unix path', path.join(os.tmpdir(), `onehost-preload-${process.pid}.sock`)));
  // A node child of the app (NODE_OPTIONS, and so the preload, are inherited): its listen
  // for the served port is its own, a bind that fails (the port is taken) instead of fd 3.
  const child = execFileSync(process.execPath, ['-e', `
    const s = require('net').createServer();
    s.on('error', (e) => process.stdout.write('error ' + e.code));
    s.listen(${served}, '127.0.0.1', () => { process.stdout.write('listening slot'); s.close(); });
  `]).toString();
  out['child process'] = child;
  for (const s of servers) if (s.listening) s.close();
  process.stdout.write(JSON.stringify(out));
})();
