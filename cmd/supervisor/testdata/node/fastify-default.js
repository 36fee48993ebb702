// A Fastify app with Fastify's defaults: no logger, and listen({ port }) with no host,
// which Fastify binds on localhost (127.0.0.1 and ::1) only.
const fastify = require('fastify')();

fastify.get('/', async () => `pid ${process.pid} ${process.env.GREETING || ''}\n`);

fastify.listen({ port: Number(process.env.PORT) || 3000 }).catch((err) => {
  console.error(err);
  process.exit(1);
});
