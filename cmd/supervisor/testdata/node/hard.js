// A node:http app with its port hard-coded, as some PM2 users write it: listen(8080),
// PORT ignored. (The tests pick a free port and pass it as argv[2]; 8080 otherwise.)
const http = require('http');

const port = Number(process.argv[2] || 8080);
http.createServer((req, res) => {
  res.end(`pid ${process.pid}\n`);
}).listen(port, () => {
  console.log(`listening on ${port}`);
});
