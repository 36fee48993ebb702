// An app that listens on a port of its own, argv[2] (TestNodePreloadAppPort): it answers
// "own", and prints "listening PORT" once it listens. No handler for 'error'.
'use strict';
const port = Number(process.argv[2]);
const server = require('http').createServer((req, res) => res.end('own\n'));
server.listen(port, () => {
  console.log(`listening ${server.address().port}`);
});
