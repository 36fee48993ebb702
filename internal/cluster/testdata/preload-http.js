// A plain node:http app under the supervisor's Node preload (TestNodePreloadDrain): it
// answers "ok" and prints "listening" once it does; its stop is the preload's.
'use strict';
require('http').createServer((req, res) => res.end('ok')).listen(Number(process.env.PORT), () => console.log('listening'));
