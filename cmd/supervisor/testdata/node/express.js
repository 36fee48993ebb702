// An Express app as its users write it: app.listen(process.env.PORT).
const express = require('express');

const app = express();
const port = process.env.PORT || 3000;
app.get('/', (req, res) => {
  res.send(`pid ${process.pid}\n`);
});
app.listen(port, () => {
  console.log(`Example app listening on port ${port}`);
});
