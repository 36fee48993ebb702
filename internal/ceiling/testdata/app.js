// A plain node:http app as a user writes it: listen(process.env.PORT), nothing of fd 3.
// The app sweep's test runs it under the supervisor (whose preload hands it the socket).
const http = require('http');

http.createServer((req, res) => {
  res.end('hello\n');
}).listen(process.env.PORT || 3000);
