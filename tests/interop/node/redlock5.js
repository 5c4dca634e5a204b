'use strict';
// node-redlock 5 (npm `redlock`), unchanged, with one ioredis 5 client: acquire,
// contention, extend, release, several resources in one lock, and `using()`, whose
// automatic extension must keep a lock alive well past its duration.
// All of redlock's operations are Lua scripts (EVALSHA, EVAL on NOSCRIPT).
//
//   node redlock5.js --port P --check-port C

const { expect, Plain, ServerError, Harness, parseArgs, unique, sleep, versionOf, staleText, infoToken } = require('./harness');

const args = parseArgs(process.argv);
const Redis = require('ioredis5');
const redlockModule = require('redlock5');
const Redlock = redlockModule.default;
const { ExecutionError } = redlockModule;

async function main() {
  const h = new Harness(`redlock ${versionOf('redlock5')}`);
  const plain = await Plain.connect(args['check-port']);
  const client = new Redis({
    host: '127.0.0.1', port: args.port, connectTimeout: 5000, commandTimeout: 15000,
    maxRetriesPerRequest: 1, retryStrategy: (times) => (times > 3 ? null : 200),
  });
  client.on('error', () => {});
  const redlock = new Redlock([client], { retryCount: 3, retryDelay: 200, retryJitter: 100 });
  // redlock emits every failed vote as an 'error' event (its README's pattern).
  const errors = [];
  redlock.on('error', (e) => errors.push(e));
  const state = {};

  await h.case('acquire', async () => {
    const key = unique(args.prefix, 'redlock');
    const lock = await redlock.acquire([key], 10000);
    Object.assign(state, { key, lock });
    await plain.expectOwner(key, lock.value, 10000);
    expect(lock.expiration > Date.now() + 8000, `lock.expiration is ${lock.expiration - Date.now()} ms away`);
  });

  await h.case('contention', async () => {
    expect(state.lock, 'no lock: acquire failed');
    let err = null;
    try {
      await redlock.acquire([state.key], 10000, { retryCount: 2, retryDelay: 100 });
    } catch (e) { err = e; }
    expect(err instanceof ExecutionError, `acquiring a held lock gave ${err ? err.name + ': ' + err.message : 'success'}`);
    await plain.expectOwner(state.key, state.lock.value, 10000);
  });

  await h.case('extend', async () => {
    expect(state.lock, 'no lock: acquire failed');
    state.lock = await state.lock.extend(20000);
    await plain.expectOwner(state.key, state.lock.value, 20000);
  });

  await h.case('release', async () => {
    expect(state.lock, 'no lock: acquire failed');
    await state.lock.release();
    await plain.expectGone(state.key);
  });

  await h.case('several resources', async () => {
    const keys = [unique(args.prefix, 'redlock-a'), unique(args.prefix, 'redlock-b'), unique(args.prefix, 'redlock-c')];
    await client.set(keys[2], 'taken', 'PX', 10000);
    let err = null;
    try {
      await redlock.acquire(keys, 5000, { retryCount: 1, retryDelay: 50 });
    } catch (e) { err = e; }
    expect(err instanceof ExecutionError, `acquire with one key taken gave ${err ? err.name : 'success'}`);
    expect(await plain.cmd('EXISTS', keys[0], keys[1]) === 0, 'a failed multi-key acquire left keys behind');
    await client.del(keys[2]);
    const lock = await redlock.acquire(keys, 5000);
    for (const k of keys) await plain.expectOwner(k, lock.value, 5000);
    await lock.release();
    for (const k of keys) await plain.expectGone(k);
  });

  await h.case('using() auto-extension', async () => {
    const key = unique(args.prefix, 'redlock-using');
    const duration = 2000;
    const seen = new Set();
    let maxPttl = 0;
    let samples = 0;
    let lastSample = 0;
    const t0 = Date.now();
    await redlock.using([key], duration, { automaticExtensionThreshold: 500 }, async (signal) => {
      // Hold the lock 2.5 times its duration; only the automatic extensions keep it.
      while (Date.now() - t0 < 5000) {
        await sleep(250);
        if (signal.aborted) throw signal.error;
        const v = await plain.cmd('GET', key);
        const pttl = await plain.cmd('PTTL', key);
        expect(v !== null && pttl > 0, `at ${Date.now() - t0} ms the lock is gone on the server (GET=${v}, PTTL=${pttl})`);
        seen.add(v);
        maxPttl = Math.max(maxPttl, pttl);
        samples += 1;
        lastSample = Date.now() - t0;
      }
      expect(!signal.aborted, `using() aborted: ${signal.error}`);
    });
    // The server still had the lock well past its first duration (however few
    // samples a loaded machine managed to take).
    expect(lastSample >= 2 * duration, `the last check of the held lock was at ${lastSample} ms (${samples} samples)`);
    expect(seen.size === 1, `the lock's value changed while held: ${[...seen].join(', ')}`);
    expect(maxPttl <= duration, `PTTL rose to ${maxPttl}, above the ${duration} ms duration`);
    await plain.expectGone(key);
  });

  await h.case('crashed holder expires', async () => {
    // The holder takes a 2 s lock and never releases it (it crashed). A second
    // acquire, retrying, gets it once the lease has run out, and not before; the
    // crashed holder's late release cannot take it away.
    const key = unique(args.prefix, 'redlock-crash');
    const since = Date.now();
    const dead = await redlock.acquire([key], 2000);
    const oldToken = await plain.expectTokenOwner(key, dead.value);
    const lock = await redlock.acquire([key], 10000, { retryCount: 150, retryDelay: 100, retryJitter: 50 });
    const at = Date.now();
    expect(at >= since + 2000 - 5, `the second acquire succeeded ${at - since} ms after the crashed holder's 2000 ms lock was requested`);
    await plain.expectOwner(key, lock.value, 10000);
    const newToken = await plain.expectTokenOwner(key, lock.value);
    expect(newToken > oldToken, `token after the expiry ${newToken}, not above the crashed holder's ${oldToken}`);
    let err = null;
    try {
      await dead.release();
    } catch (e) { err = e; }
    expect(err instanceof ExecutionError, `release() by the expired holder gave ${err ? err.name + ': ' + err.message : 'success'}`);
    await plain.expectOwner(key, lock.value, 10000);
    await lock.release();
    await plain.expectGone(key);
  });

  await h.case('fenced write', async () => {
    // Tokens from LOCK.INFO through redlock's own ioredis client; the resource
    // honours each holder's token and then refuses the earlier, lower one.
    const key = unique(args.prefix, 'redlock-fence');
    const resource = unique(args.prefix, 'redlock-resource');
    const fence = async (t) => {
      try {
        return await client.call('LOCK.FENCE', resource, String(t));
      } catch (e) {
        return new ServerError(e.message);
      }
    };
    const first = await redlock.acquire([key], 10000);
    const i1 = infoToken(await client.call('LOCK.INFO', key));
    expect(i1.owner === first.value, `LOCK.INFO owner ${i1.owner}, expected ${first.value}`);
    expect(await plain.expectTokenOwner(key, first.value) === i1.token, 'plain LOCK.INFO disagrees on the token');
    const t1 = i1.token;
    expect(await fence(t1) === t1, `LOCK.FENCE with the holder's token ${t1} refused`);
    await first.release();
    const second = await redlock.acquire([key], 10000);
    const i2 = infoToken(await client.call('LOCK.INFO', key));
    const t2 = i2.token;
    expect(i2.owner === second.value && t2 > t1, `second holder: owner ${i2.owner} token ${t2} (first token ${t1})`);
    expect(await fence(t2) === t2, `LOCK.FENCE with the second holder's token ${t2} refused`);
    const got = await fence(t1);
    expect(got instanceof ServerError && got.message === staleText(t1, t2),
      `LOCK.FENCE with the first holder's lower token gave ${got instanceof Error ? '-' + got.message : JSON.stringify(got)}, expected -${staleText(t1, t2)}`);
    await plain.expectFence(resource, t1, t2);
    await plain.expectFence(resource, t2, t2);
    await second.release();
    await plain.expectGone(key);
  });

  const unexpected = errors.filter((e) => !(e instanceof redlockModule.ResourceLockedError));
  await h.case('no unexpected redis errors', async () => {
    expect(unexpected.length === 0, `redlock emitted: ${unexpected.map((e) => e.message).join(' | ')}`);
  });

  client.disconnect();
  plain.close();
  process.exit(h.failed ? 1 : 0);
}

main().catch((e) => { console.error(e); process.exit(2); });
