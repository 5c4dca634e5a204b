'use strict';
// Shared helpers for the Node interop cases.
//
// `Plain` is a minimal RESP2 client on a raw socket, independent of every library
// under test: a case passes only if the library reports success AND what `Plain`
// reads from the server afterwards (GET, PTTL, EXISTS) agrees with what the
// library believes. Each case prints one line
// `RESULT<TAB>library<TAB>case<TAB>PASS|FAIL<TAB>detail` for tests/interop/run.sh.

const net = require('net');
const crypto = require('crypto');

class CaseFail extends Error {}

function expect(cond, msg) {
  if (!cond) throw new CaseFail(msg);
}

class ServerError extends Error {}

class Plain {
  static connect(port, host = '127.0.0.1', timeoutMs = 10000) {
    return new Promise((resolve, reject) => {
      const sock = net.createConnection({ port, host });
      const timer = setTimeout(() => { sock.destroy(); reject(new Error('plain: connect timeout')); }, timeoutMs);
      sock.once('error', (e) => { clearTimeout(timer); reject(e); });
      sock.once('connect', () => { clearTimeout(timer); resolve(new Plain(sock, timeoutMs)); });
    });
  }

  constructor(sock, timeoutMs) {
    this.sock = sock;
    this.timeoutMs = timeoutMs;
    this.buf = Buffer.alloc(0);
    this.waiting = [];
    this.closed = null;
    sock.on('data', (d) => { this.buf = Buffer.concat([this.buf, d]); this._drain(); });
    sock.on('error', (e) => { this.closed = e; this._fail(e); });
    sock.on('close', () => { this.closed = this.closed || new Error('plain: connection closed'); this._fail(this.closed); });
  }

  close() { this.sock.destroy(); }

  _fail(e) { while (this.waiting.length) this.waiting.shift().reject(e); }

  // Parse one reply at `pos`; returns [value, nextPos] or null if incomplete.
  _parse(pos) {
    const eol = this.buf.indexOf('\r\n', pos);
    if (eol < 0) return null;
    const kind = String.fromCharCode(this.buf[pos]);
    const rest = this.buf.toString('utf8', pos + 1, eol);
    const next = eol + 2;
    switch (kind) {
      case '+': return [rest, next];
      case '-': return [new ServerError(rest), next];
      case ':': return [parseInt(rest, 10), next];
      case '$': {
        const n = parseInt(rest, 10);
        if (n < 0) return [null, next];
        if (this.buf.length < next + n + 2) return null;
        return [this.buf.toString('utf8', next, next + n), next + n + 2];
      }
      case '*': {
        const n = parseInt(rest, 10);
        if (n < 0) return [null, next];
        const out = [];
        let p = next;
        for (let i = 0; i < n; i++) {
          const r = this._parse(p);
          if (!r) return null;
          out.push(r[0]);
          p = r[1];
        }
        return [out, p];
      }
      default: throw new Error('plain: unexpected reply type ' + kind);
    }
  }

  _drain() {
    while (this.waiting.length) {
      const r = this._parse(0);
      if (!r) return;
      this.buf = this.buf.subarray(r[1]);
      const w = this.waiting.shift();
      clearTimeout(w.timer);
      w.resolve(r[0]);
    }
  }

  // Send a command; an error reply comes back as a ServerError value.
  raw(...args) {
    if (this.closed) return Promise.reject(this.closed);
    const parts = [`*${args.length}\r\n`];
    for (const a of args) {
      const b = Buffer.from(String(a));
      parts.push(`$${b.length}\r\n`, b, '\r\n');
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`plain: no reply to ${args[0]} within ${this.timeoutMs} ms`)), this.timeoutMs);
      this.waiting.push({ resolve, reject, timer });
      this.sock.write(Buffer.concat(parts.map((p) => (Buffer.isBuffer(p) ? p : Buffer.from(p)))));
    });
  }

  async cmd(...args) {
    const r = await this.raw(...args);
    if (r instanceof ServerError) throw r;
    return r;
  }

  // key holds exactly `owner`, with a PTTL within (ttlMs - slack, ttlMs].
  async expectOwner(key, owner, ttlMs, slackMs = 2000) {
    const got = await this.cmd('GET', key);
    expect(got === String(owner), `server: GET ${key} = ${JSON.stringify(got)}, library believes the owner is ${JSON.stringify(String(owner))}`);
    const pttl = await this.cmd('PTTL', key);
    expect(pttl > ttlMs - slackMs && pttl <= ttlMs, `server: PTTL ${key} = ${pttl}, expected about ${ttlMs} ms`);
    return pttl;
  }

  // key expires: not before its TTL, and (bounded wait) some time after it.
  // `since` is Date.now() taken before the command that set the TTL was sent: the
  // lease began (in log time, which never runs ahead of real time) after it, so any
  // EXISTS answered before since + ttlMs must still find the key (log time is whole
  // milliseconds: 5 ms of slack). How soon after the TTL it goes is bounded by
  // `withinMs` only: speed is for the benchmarks.
  async expectExpires(key, ttlMs, since, withinMs = 30000) {
    expect(typeof since === 'number', 'expectExpires needs the time the lease was requested');
    const ends = since + ttlMs;
    for (;;) {
      const exists = await this.cmd('EXISTS', key);
      const replied = Date.now();
      if (exists === 0) {
        expect(replied >= ends - 5, `server: ${key} gone ${replied - since} ms after its ${ttlMs} ms lease was requested, before its TTL`);
        return;
      }
      expect(replied < ends + withinMs, `server: ${key} still exists ${replied - since} ms after a ${ttlMs} ms lease was requested`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  // LOCK.INFO as {owner, token, 'ttl-ms', waiters, 'next-waiter'}, or null if free.
  async lockInfo(key) {
    const r = await this.cmd('LOCK.INFO', key);
    if (r === null) return null;
    expect(Array.isArray(r) && r.length === 10 && r[0] === 'owner' && r[2] === 'token' && r[4] === 'ttl-ms' && r[6] === 'waiters' && r[8] === 'next-waiter',
      `server: LOCK.INFO ${key} = ${JSON.stringify(r)}`);
    return { owner: r[1], token: r[3], 'ttl-ms': r[5], waiters: r[7], 'next-waiter': r[9] };
  }

  // LOCK.INFO shows `owner`; returns its token.
  async expectTokenOwner(key, owner) {
    const info = await this.lockInfo(key);
    expect(info && info.owner === String(owner) && Number.isInteger(info.token) && info.token > 0,
      `server: LOCK.INFO ${key} = ${JSON.stringify(info)}, expected owner ${JSON.stringify(String(owner))}`);
    return info.token;
  }

  // LOCK.FENCE resource token: honoured if token >= highest, else exactly the STALE error.
  async expectFence(resource, token, highest) {
    const r = await this.raw('LOCK.FENCE', resource, token);
    if (token >= highest) {
      expect(r === token, `server: LOCK.FENCE ${resource} ${token} = ${r instanceof Error ? '-' + r.message : JSON.stringify(r)}, expected ${token}`);
    } else {
      expect(r instanceof ServerError && r.message === staleText(token, highest),
        `server: LOCK.FENCE ${resource} ${token} = ${r instanceof Error ? '-' + r.message : JSON.stringify(r)}, expected -${staleText(token, highest)}`);
    }
  }

  async expectGone(key) {
    const n = await this.cmd('EXISTS', key);
    expect(n === 0, `server: EXISTS ${key} = ${n} after release, expected 0 (GET=${JSON.stringify(await this.cmd('GET', key))})`);
  }
}

// The exact error (without the leading '-') for a fence below the highest token.
function staleText(token, highest) {
  return `STALE token ${token} is lower than ${highest}, the highest honored for this resource`;
}

// (owner, token) from a LOCK.INFO reply as a library returns it: a flat array
// (RESP2) or a map/object (RESP3).
function infoToken(reply) {
  let d;
  if (reply instanceof Map) d = Object.fromEntries([...reply].map(([k, v]) => [String(k), v]));
  else if (Array.isArray(reply)) {
    expect(reply.length % 2 === 0, `LOCK.INFO replied ${JSON.stringify(reply)}`);
    d = {};
    for (let i = 0; i < reply.length; i += 2) d[String(reply[i])] = reply[i + 1];
  } else if (reply && typeof reply === 'object') d = reply;
  else throw new CaseFail(`LOCK.INFO replied ${JSON.stringify(reply)}`);
  expect(['owner', 'token', 'ttl-ms', 'waiters', 'next-waiter'].every((k) => k in d) && Object.keys(d).length === 5,
    `LOCK.INFO replied ${JSON.stringify(d)}`);
  const token = Number(d.token);
  expect(Number.isInteger(token) && token > 0, `LOCK.INFO token ${JSON.stringify(d.token)}`);
  return { owner: String(d.owner), token };
}

class Harness {
  constructor(library) {
    this.library = library;
    this.failed = 0;
  }

  async case(name, fn, timeoutMs = 30000) {
    const t0 = Date.now();
    let timer;
    try {
      await Promise.race([
        fn(),
        new Promise((_, reject) => { timer = setTimeout(() => reject(new CaseFail(`case timed out after ${timeoutMs} ms`)), timeoutMs); }),
      ]);
      this.report(name, true, '', t0);
      return true;
    } catch (e) {
      const detail = e instanceof CaseFail ? e.message : `${e && e.name}: ${e && e.message}`;
      this.report(name, false, detail, t0);
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  report(name, ok, detail, t0) {
    if (!ok) this.failed += 1;
    const d = String(detail).replace(/\s+/g, ' ').slice(0, 400);
    const took = ((Date.now() - t0) / 1000).toFixed(1) + 's';
    process.stdout.write(`RESULT\t${this.library}\t${name}\t${ok ? 'PASS' : 'FAIL'}\t${took}${d ? ' ' + d : ''}\n`);
  }
}

function parseArgs(argv) {
  const out = {};
  for (let i = 2; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--')) throw new Error('bad argument ' + argv[i]);
    out[argv[i].slice(2)] = argv[i + 1];
  }
  for (const k of ['port', 'check-port']) {
    if (!out[k]) throw new Error(`--${k} is required`);
    out[k] = parseInt(out[k], 10);
  }
  out.prefix = out.prefix || 'interop';
  return out;
}

function unique(prefix, name) {
  return `${prefix}:${name}:${crypto.randomBytes(4).toString('hex')}`;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The version of an installed package (alias directory under node_modules).
function versionOf(alias) {
  const path = require('path');
  const fs = require('fs');
  for (const dir of (process.env.NODE_PATH || '').split(path.delimiter).filter(Boolean)) {
    const f = path.join(dir, alias, 'package.json');
    if (fs.existsSync(f)) return JSON.parse(fs.readFileSync(f, 'utf8')).version.replace(/^v/, '');
  }
  return '?';
}

module.exports = { CaseFail, expect, Plain, ServerError, Harness, parseArgs, unique, sleep, versionOf, staleText, infoToken };
