'use strict';
// TLS with ioredis's and node-redis's own options (issue 14), unchanged,
// against a node's TLS port (--tls-port, --tls-auth-clients yes): a SET NX PX
// lock over TLS with a client certificate, checked by a plain-port client,
// and a client without a certificate refused.
//
//   node tls_cases.js --lib ioredis6|redislatest --port TLS_PORT --check-port PLAIN_PORT --ca CA --cert CERT --key KEY

const crypto = require('crypto');
const fs = require('fs');
const { expect, Plain, Harness, parseArgs, unique, versionOf } = require('./harness');

const args = parseArgs(process.argv);
const lib = args.lib;

async function connect(withCert) {
  const tls = { ca: fs.readFileSync(args.ca), servername: 'localhost' };
  if (withCert) {
    tls.cert = fs.readFileSync(args.cert);
    tls.key = fs.readFileSync(args.key);
  }
  if (lib === 'ioredis5' || lib === 'ioredis6') {
    const Redis = require(lib);
    const c = new Redis({
      host: '127.0.0.1', port: args.port, lazyConnect: true, connectTimeout: 5000, commandTimeout: 10000,
      maxRetriesPerRequest: 0, retryStrategy: () => null, tls,
    });
    c.on('error', () => {});
    await c.connect();
    return { ping: () => c.ping(), setNxPx: (k, v) => c.set(k, v, 'PX', 10000, 'NX'), quit: () => c.quit(), drop: () => c.disconnect() };
  }
  const redis = require(lib);
  const c = redis.createClient({ socket: { host: '127.0.0.1', port: args.port, connectTimeout: 5000, reconnectStrategy: false, tls: true, ...tls } });
  c.on('error', () => {});
  await c.connect();
  return { ping: () => c.ping(), setNxPx: (k, v) => c.set(k, v, { NX: true, PX: 10000 }), quit: () => c.quit(), drop: () => c.disconnect().catch(() => {}) };
}

async function main() {
  const names = { ioredis5: 'ioredis', ioredis6: 'ioredis', redislatest: 'node-redis', redis4: 'node-redis' };
  const h = new Harness(`${names[lib]} ${versionOf(lib)} tls`);
  const plain = await Plain.connect(args['check-port']);

  await h.case('a lock over TLS with a client certificate', async () => {
    const c = await connect(true);
    try {
      expect((await c.ping()) === 'PONG', 'PING did not answer PONG');
      const key = unique(args.prefix, `${lib}-tls`);
      const tok = crypto.randomBytes(8).toString('hex');
      expect((await c.setNxPx(key, tok)) === 'OK', 'SET NX PX was not granted');
      expect((await c.setNxPx(key, 'other')) === null, 'SET NX PX of a held lock was granted');
      const seen = await plain.cmd('GET', key);
      expect(String(seen) === tok, `the plain checker reads ${JSON.stringify(seen)}`);
      await plain.cmd('DEL', key);
    } finally {
      await c.quit().catch(() => {});
    }
  });
  await h.case('no client certificate is refused', async () => {
    let c;
    try {
      c = await connect(false);
      await c.ping();
    } catch (e) {
      if (c) c.drop();
      return;
    }
    c.drop();
    throw new Error('PING succeeded over TLS without a client certificate');
  });
  plain.close();
  process.exit(h.failed ? 1 : 0);
}

main().catch((e) => { console.error(e); process.exit(2); });
