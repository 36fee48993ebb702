// A plain node:http app as its users write it: listen(process.env.PORT), nothing else.
// It knows nothing of the supervisor (no fd 3, no signal handler, no process.send).
const http = require('http');

const port = process.env.PORT || 3000;
http.createServer((req, res) => {
  res.end(`pid ${process.pid}\n`);
}).listen(port, () => {
  console.log(`listening on ${port}`);
});
