'use strict';
// Authentication with ioredis's and node-redis's own options (issue 14),
// unchanged, against a node started with --requirepass: `password` (and
// `username: 'default'`), a SET NX PX lock through the authenticated client
// checked by a plain client, and the errors for no password and a wrong one.
//
//   node auth_cases.js --lib ioredis6|redislatest --port P --check-port C --password PW

const crypto = require('crypto');
const { expect, Plain, Harness, parseArgs, unique, versionOf } = require('./harness');

const args = parseArgs(process.argv);
const lib = args.lib;

async function connect(opts) {
  if (lib === 'ioredis5' || lib === 'ioredis6') {
    const Redis = require(lib);
    const c = new Redis({
      host: '127.0.0.1', port: args.port, lazyConnect: true, connectTimeout: 5000, commandTimeout: 10000,
      maxRetriesPerRequest: 0, retryStrategy: () => null, ...opts,
    });
    c.on('error', () => {});
    await c.connect();
    return { ping: () => c.ping(), setNxPx: (k, v) => c.set(k, v, 'PX', 10000, 'NX'), quit: () => c.quit(), drop: () => c.disconnect() };
  }
  const redis = require(lib);
  const c = redis.createClient({ socket: { host: '127.0.0.1', port: args.port, connectTimeout: 5000, reconnectStrategy: false }, ...opts });
  c.on('error', () => {});
  await c.connect();
  return { ping: () => c.ping(), setNxPx: (k, v) => c.set(k, v, { NX: true, PX: 10000 }), quit: () => c.quit(), drop: () => c.disconnect().catch(() => {}) };
}

async function main() {
  const names = { ioredis5: 'ioredis', ioredis6: 'ioredis', redislatest: 'node-redis', redis4: 'node-redis' };
  const h = new Harness(`${names[lib]} ${versionOf(lib)} auth`);
  const plain = await Plain.connect(args['check-port']);
  await plain.cmd('AUTH', args.password);

  const locks = async (opts) => {
    const c = await connect(opts);
    try {
      expect((await c.ping()) === 'PONG', 'PING did not answer PONG');
      const key = unique(args.prefix, `${lib}-auth`);
      const tok = crypto.randomBytes(8).toString('hex');
      expect((await c.setNxPx(key, tok)) === 'OK', 'SET NX PX was not granted');
      const seen = await plain.cmd('GET', key);
      expect(String(seen) === tok, `the plain checker reads ${JSON.stringify(seen)}`);
      await plain.cmd('DEL', key);
    } finally {
      await c.quit().catch(() => {});
    }
  };
  const refused = async (opts) => {
    let c;
    try {
      c = await connect(opts);
      await c.ping();
    } catch (e) {
      const text = String(e && e.message);
      // ioredis (RESP3) closes the connection when its HELLO is refused, as
      // it does against Redis itself.
      expect(/NOAUTH|WRONGPASS|invalid username-password|already authenticated|Connection is closed/.test(text),
        `refused with an unexpected error: ${text}`);
      if (c) c.drop();
      return;
    }
    c.drop();
    throw new Error('PING succeeded without the right password');
  };

  await h.case('password', () => locks({ password: args.password }));
  await h.case('username default, password', () => locks({ username: 'default', password: args.password }));
  await h.case('no password is refused', () => refused({}));
  await h.case('a wrong password is refused', () => refused({ password: `wrong-${args.password}` }));
  plain.close();
  process.exit(h.failed ? 1 : 0);
}

main().catch((e) => { console.error(e); process.exit(2); });
