// A Fastify app as its users write it: fastify.listen({ port: process.env.PORT, host }).
const fastify = require('fastify')({ logger: true });

fastify.get('/', async () => `pid ${process.pid}\n`);

const start = async () => {
  try {
    await fastify.listen({ port: Number(process.env.PORT) || 3000, host: '127.0.0.1' });
  } catch (err) {
    fastify.log.error(err);
    process.exit(1);
  }
};
start();
