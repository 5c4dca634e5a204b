'use strict';
// The lock code users write with a plain Node client: `SET key token NX PX ms` to
// acquire, a Lua script (through the library's own script helper: EVALSHA, and
// EVAL on NOSCRIPT) to extend and to release only if still the owner.
//
//   node setnx_lua.js --lib ioredis5|ioredis6|redis4|redislatest [--resp 2|3] --port P --check-port C
//
// NODE_PATH must contain the interop cache's node_modules (run.sh sets it).

const crypto = require('crypto');
const { CaseFail, expect, Plain, ServerError, Harness, parseArgs, unique, sleep, versionOf, staleText, infoToken } = require('./harness');

const args = parseArgs(process.argv);
const lib = args.lib;
const resp = args.resp ? parseInt(args.resp, 10) : undefined;
const TTL = 10000;

// A fresh comment makes each run's scripts new to the server, so the first call
// of each goes EVALSHA -> NOSCRIPT -> EVAL: the library's fallback is exercised.
const RUN = crypto.randomBytes(6).toString('hex');
const UNLOCK = `-- interop ${RUN}
if redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("del", KEYS[1])
else
  return 0
end`;
const EXTEND = `-- interop ${RUN}
if redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("pexpire", KEYS[1], ARGV[2])
else
  return 0
end`;
const sha1 = (s) => crypto.createHash('sha1').update(s).digest('hex');

// One adapter per library: connect, setNxPx, unlock/extend through the library's
// script helper, evalRaw (plain EVAL), quit.
async function makeClient() {
  if (lib === 'ioredis5' || lib === 'ioredis6') {
    const Redis = require(lib);
    const opts = {
      host: '127.0.0.1', port: args.port, lazyConnect: true,
      connectTimeout: 5000, commandTimeout: 15000, maxRetriesPerRequest: 1,
      retryStrategy: (times) => (times > 3 ? null : 200),
    };
    if (resp) opts.protocol = resp;
    const c = new Redis(opts);
    c.on('error', () => {});
    c.defineCommand('unlockIfOwner', { numberOfKeys: 1, lua: UNLOCK });
    c.defineCommand('extendIfOwner', { numberOfKeys: 1, lua: EXTEND });
    await c.connect();
    return {
      ping: () => c.ping(),
      clientInfo: () => c.call('CLIENT', 'INFO'),
      setNxPx: (k, v, ms) => c.set(k, v, 'PX', ms, 'NX'),
      unlock: (k, v) => c.unlockIfOwner(k, v),
      extend: (k, v, ms) => c.extendIfOwner(k, v, ms),
      evalRaw: (script, k, v) => c.eval(script, 1, k, v),
      call: (...a) => c.call(...a.map(String)),
      quit: () => c.quit(),
    };
  }
  if (lib === 'redis4' || lib === 'redislatest') {
    const redis = require(lib);
    const v4 = lib === 'redis4';
    const script = (src) => (v4
      ? redis.defineScript({
        NUMBER_OF_KEYS: 1, SCRIPT: src,
        transformArguments: (key, ...rest) => [key, ...rest.map(String)],
        transformReply: (r) => r,
      })
      : redis.defineScript({
        NUMBER_OF_KEYS: 1, FIRST_KEY_INDEX: 0, SCRIPT: src,
        parseCommand: (parser, key, ...rest) => { parser.pushKey(key); parser.push(...rest.map(String)); },
        transformReply: (r) => r,
      }));
    const opts = {
      socket: { host: '127.0.0.1', port: args.port, connectTimeout: 5000, reconnectStrategy: false },
      scripts: { unlockIfOwner: script(UNLOCK), extendIfOwner: script(EXTEND) },
    };
    if (resp) opts.RESP = resp;
    const c = redis.createClient(opts);
    c.on('error', () => {});
    await c.connect();
    return {
      ping: () => c.ping(),
      clientInfo: () => c.sendCommand(['CLIENT', 'INFO']),
      setNxPx: (k, v, ms) => c.set(k, v, { NX: true, PX: ms }),
      unlock: (k, v) => c.unlockIfOwner(k, v),
      extend: (k, v, ms) => c.extendIfOwner(k, v, ms),
      evalRaw: (src, k, v) => c.eval(src, { keys: [k], arguments: [v] }),
      call: (...a) => c.sendCommand(a.map(String)),
      quit: () => c.quit(),
    };
  }
  throw new Error('unknown --lib ' + lib);
}

async function main() {
  const names = { ioredis5: 'ioredis', ioredis6: 'ioredis', redis4: 'node-redis', redislatest: 'node-redis' };
  const h = new Harness(`${names[lib]} ${versionOf(lib)}`);
  const tag = resp ? `resp${resp} ` : '';
  const plain = await Plain.connect(args['check-port']);
  let c;
  const clients = [];
  const state = {};
  const token = () => crypto.randomBytes(16).toString('hex');

  const ok = await h.case(`${tag}connect`, async () => {
    c = await makeClient();
    clients.push(c);
    const pong = await c.ping();
    expect(pong === 'PONG', `PING replied ${JSON.stringify(pong)}`);
    // The connection speaks the protocol this library version defaults to (or was given).
    const want = resp || { ioredis5: 2, ioredis6: 3, redis4: 2, redislatest: 3 }[lib];
    const info = String(await c.clientInfo());
    const m = /\bresp=(\d)/.exec(info);
    expect(m && Number(m[1]) === want, `CLIENT INFO says ${m ? m[0] : JSON.stringify(info)}, expected resp=${want}`);
  });
  if (!ok) { plain.close(); process.exit(1); }

  await h.case(`${tag}acquire (SET NX PX)`, async () => {
    const key = unique(args.prefix, `${lib}-lock`);
    const tok = token();
    const r = await c.setNxPx(key, tok, TTL);
    expect(r === 'OK', `SET NX PX replied ${JSON.stringify(r)}`);
    Object.assign(state, { key, tok });
    await plain.expectOwner(key, tok, TTL);
    const other = await c.setNxPx(key, token(), TTL);
    expect(other === null, `a second SET NX PX on a held lock replied ${JSON.stringify(other)}`);
    await plain.expectOwner(key, tok, TTL);
  });

  await h.case(`${tag}extend (Lua, EVALSHA/NOSCRIPT/EVAL)`, async () => {
    expect(state.key, 'no lock: acquire failed');
    const shaBefore = await plain.cmd('SCRIPT', 'EXISTS', sha1(EXTEND));
    expect(Array.isArray(shaBefore) && shaBefore[0] === 0, `SCRIPT EXISTS before first use = ${JSON.stringify(shaBefore)}`);
    const r = await c.extend(state.key, state.tok, 20000);
    expect(r === 1, `extend script replied ${JSON.stringify(r)}`);
    await plain.expectOwner(state.key, state.tok, 20000);
    const shaAfter = await plain.cmd('SCRIPT', 'EXISTS', sha1(EXTEND));
    expect(shaAfter[0] === 1, `SCRIPT EXISTS after EVAL = ${JSON.stringify(shaAfter)}`);
    const again = await c.extend(state.key, state.tok, TTL); // now by EVALSHA
    expect(again === 1, `second extend replied ${JSON.stringify(again)}`);
    await plain.expectOwner(state.key, state.tok, TTL);
    const notMine = await c.extend(state.key, token(), 60000);
    expect(notMine === 0, `extend by a non-owner replied ${JSON.stringify(notMine)}`);
    await plain.expectOwner(state.key, state.tok, TTL);
  });

  await h.case(`${tag}release (Lua)`, async () => {
    expect(state.key, 'no lock: acquire failed');
    const notMine = await c.unlock(state.key, token());
    expect(notMine === 0, `release by a non-owner replied ${JSON.stringify(notMine)}`);
    await plain.expectOwner(state.key, state.tok, TTL);
    const r = await c.unlock(state.key, state.tok);
    expect(r === 1, `release replied ${JSON.stringify(r)}`);
    await plain.expectGone(state.key);
    const twice = await c.unlock(state.key, state.tok);
    expect(twice === 0, `a second release replied ${JSON.stringify(twice)}`);
  });

  await h.case(`${tag}release (plain EVAL)`, async () => {
    const key = unique(args.prefix, `${lib}-eval`);
    const tok = token();
    expect(await c.setNxPx(key, tok, TTL) === 'OK', 'acquire failed');
    await plain.expectOwner(key, tok, TTL);
    const r = await c.evalRaw(UNLOCK, key, tok);
    expect(r === 1, `EVAL release replied ${JSON.stringify(r)}`);
    await plain.expectGone(key);
  });

  await h.case(`${tag}wait for release (retry loop)`, async () => {
    const key = unique(args.prefix, `${lib}-wait`);
    const holder = token();
    expect(await c.setNxPx(key, holder, TTL) === 'OK', 'holder could not acquire');
    const c2 = await makeClient();
    clients.push(c2);
    const waiter = token();
    const t0 = Date.now();
    const waiting = (async () => {
      while (Date.now() - t0 < 8000) {
        if (await c2.setNxPx(key, waiter, TTL) === 'OK') return Date.now() - t0;
        await sleep(50);
      }
      return -1;
    })();
    await sleep(1000);
    const releasedAt = Date.now() - t0;
    expect(await c.unlock(key, holder) === 1, 'holder release failed');
    const waited = await waiting;
    // The retry loop gives up after 8 s, before the holder's 10 s lease ends: only
    // the release can have let it in.
    expect(waited >= 0, 'waiter never acquired within its 8 s retry loop');
    expect(waited >= releasedAt, `waiter acquired at ${waited} ms, before the release at ${releasedAt} ms`);
    await plain.expectOwner(key, waiter, TTL);
    expect(await c2.unlock(key, waiter) === 1, 'waiter release failed');
    await plain.expectGone(key);
  });

  await h.case(`${tag}expiry`, async () => {
    const key = unique(args.prefix, `${lib}-expiry`);
    const old = token();
    const since = Date.now();
    expect(await c.setNxPx(key, old, 1000) === 'OK', 'could not acquire');
    await plain.expectExpires(key, 1000, since);
    const fresh = token();
    expect(await c.setNxPx(key, fresh, TTL) === 'OK', 'could not acquire the expired lock');
    expect(await c.unlock(key, old) === 0, 'the expired holder could release the new lock');
    await plain.expectOwner(key, fresh, TTL);
    expect(await c.unlock(key, fresh) === 1, 'release failed');
    await plain.expectGone(key);
  });

  await h.case(`${tag}fenced write`, async () => {
    // The lock's token from LOCK.INFO through the library (a flat array in RESP2,
    // a map in RESP3); the resource honours each holder's token and then refuses
    // the earlier, lower one with the exact STALE error.
    const key = unique(args.prefix, `${lib}-fence`);
    const resource = unique(args.prefix, `${lib}-resource`);
    const fence = async (client, t) => {
      try {
        return await client.call('LOCK.FENCE', resource, t);
      } catch (e) {
        return new ServerError(e.message);
      }
    };
    const first = token();
    expect(await c.setNxPx(key, first, TTL) === 'OK', 'first holder could not acquire');
    const i1 = infoToken(await c.call('LOCK.INFO', key));
    expect(i1.owner === first, `LOCK.INFO owner ${i1.owner}, expected ${first}`);
    expect(await plain.expectTokenOwner(key, first) === i1.token, 'plain LOCK.INFO disagrees on the token');
    const t1 = i1.token;
    expect(Number(await fence(c, t1)) === t1, `LOCK.FENCE with the holder's token ${t1} refused`);
    expect(await c.unlock(key, first) === 1, 'first holder release failed');
    const c2 = await makeClient();
    clients.push(c2);
    const second = token();
    expect(await c2.setNxPx(key, second, TTL) === 'OK', 'second holder could not acquire');
    const i2 = infoToken(await c2.call('LOCK.INFO', key));
    const t2 = i2.token;
    expect(i2.owner === second && t2 > t1, `second holder: owner ${i2.owner} token ${t2} (first token ${t1})`);
    expect(Number(await fence(c2, t2)) === t2, `LOCK.FENCE with the second holder's token ${t2} refused`);
    const got = await fence(c, t1);
    expect(got instanceof ServerError && got.message === staleText(t1, t2),
      `LOCK.FENCE with the first holder's lower token gave ${got instanceof Error ? '-' + got.message : JSON.stringify(got)}, expected -${staleText(t1, t2)}`);
    await plain.expectFence(resource, t1, t2);
    await plain.expectFence(resource, t2, t2);
    expect(await c2.unlock(key, second) === 1, 'second holder release failed');
    await plain.expectGone(key);
  });

  for (const x of clients) { try { await x.quit(); } catch (e) { /* ignore */ } }
  plain.close();
  process.exit(h.failed ? 1 : 0);
}

main().catch((e) => { console.error(e); process.exit(2); });
