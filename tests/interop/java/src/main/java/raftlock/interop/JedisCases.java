package raftlock.interop;

import static raftlock.interop.Main.expect;
import static raftlock.interop.Main.randomHex;
import static raftlock.interop.Main.unique;
import static raftlock.interop.Plain.show;

import java.util.List;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.RedisProtocol;
import redis.clients.jedis.Transaction;
import redis.clients.jedis.exceptions.JedisNoScriptException;
import redis.clients.jedis.params.SetParams;

/** Jedis (the Jedis class) as applications use it for a lock; see Main. */
final class JedisCases {

    /** The lease of a lock that the case releases itself. */
    static final long LEASE_MS = 5000;
    /** The lease a WATCH/MULTI/EXEC extension sets; well above LEASE_MS, so PTTL shows it. */
    static final long EXTENDED_MS = 15000;
    /** A crashed holder's lease: short, so the case waits little. */
    static final long SHORT_MS = 800;
    /** PTTL read back within (ttl - SLACK_MS, ttl]. */
    static final long SLACK_MS = 1000;

    private final Main.Args a;
    private final DefaultJedisClientConfig config;
    private final String library;
    private final String tag;

    private JedisCases(Main.Args a) {
        this.a = a;
        this.tag = a.tag();
        this.library = "jedis " + Main.version("redis.clients", "jedis");
        this.config = DefaultJedisClientConfig.builder()
                .protocol(a.protocol() == 3 ? RedisProtocol.RESP3 : RedisProtocol.RESP2)
                .connectionTimeoutMillis(5000)
                .socketTimeoutMillis(15000)
                .build();
    }

    Jedis connect() {
        return new Jedis(new HostAndPort("127.0.0.1", a.port()), config);
    }

    private String name(String s) {
        return tag + " " + s;
    }

    /** Which way a release went. */
    record Released(long deleted, boolean fellBack) {
    }

    /**
     * The release as applications write it: EVALSHA of the loaded script's SHA1, and
     * on NOSCRIPT (a restarted or failed-over server, or a script never loaded) EVAL
     * of its text.
     */
    static Released release(Jedis j, String sha, String src, String key, String token) {
        Object r;
        boolean fellBack = false;
        try {
            r = j.evalsha(sha, List.of(key), List.of(token));
        } catch (JedisNoScriptException e) {
            fellBack = true;
            r = j.eval(src, List.of(key), List.of(token));
        }
        if (!(r instanceof Long n)) {
            throw new CaseFail("the release script returned " + show(r) + ", expected an integer");
        }
        return new Released(n, fellBack);
    }

    static void run(Main.Harness h, Main.Args a) {
        new JedisCases(a).run(h);
    }

    private void run(Main.Harness h) {
        long t0 = System.nanoTime();
        Plain plain;
        try {
            plain = new Plain(a.checkPort());
        } catch (Exception e) {
            h.report(library, name("connect"), t0, e);
            return;
        }
        String src = Main.unlockScript(a.prefix(), "jedis " + tag);
        String sha = Main.sha1Hex(src);
        try (plain; Jedis jedis = connect()) {
            h.check(library, name("connect (HELLO " + a.protocol() + ")"), () -> {
                String pong = jedis.ping();
                expect("PONG".equals(pong), "PING answered " + show(pong));
                RedisProtocol p = jedis.getConnection().getRedisProtocol();
                expect(p != null && p.version().equals(String.valueOf(a.protocol())),
                        "Jedis's connection reports protocol " + p + ", asked for RESP" + a.protocol());
                // The server agrees about the protocol of this connection.
                String info = jedis.clientInfo();
                expect(List.of(info.trim().split("\\s+")).contains("resp=" + a.protocol()),
                        "CLIENT INFO does not show resp=" + a.protocol() + ": " + info);
            });

            // SET key token NX PX through SetParams; a second SET NX from another client
            // on the held key answers null and changes nothing.
            String key = unique(a.prefix(), "jedis-" + tag);
            String tok = randomHex(16);
            boolean acquired = h.check(library, name("acquire (SET NX PX)"), () -> {
                String ok = jedis.set(key, tok, SetParams.setParams().nx().px(LEASE_MS));
                expect("OK".equals(ok), "SET NX PX on a free key answered " + show(ok));
                plain.expectOwner(key, tok, LEASE_MS, SLACK_MS);
                plain.expectTokenOwner(key, tok);
                try (Jedis other = connect()) {
                    String again = other.set(key, randomHex(16), SetParams.setParams().nx().px(LEASE_MS));
                    expect(again == null, "a second SET NX PX on a held key answered " + show(again) + ", expected null");
                }
                plain.expectOwner(key, tok, LEASE_MS, SLACK_MS);
            });

            // The release: EVALSHA of a script the server has never seen meets NOSCRIPT,
            // the recipe falls back to EVAL; a non-owner's release does nothing. Then
            // scriptLoad answers the SHA1 computed here, and the owner's release runs
            // through EVALSHA alone and deletes the key.
            h.check(library, name("release (EVALSHA, NOSCRIPT->EVAL, scriptLoad)"), () -> {
                expect(acquired, "no lock: acquire failed");
                expect(!plain.scriptCached(sha), "server: SCRIPT EXISTS finds a script unique to this run before it was sent");
                Released r = release(jedis, sha, src, key, "not-the-owner");
                expect(r.fellBack(), "EVALSHA of a script never sent did not meet NOSCRIPT");
                expect(r.deleted() == 0, "release by a non-owner (EVAL) returned " + r.deleted() + ", expected 0");
                plain.expectOwner(key, tok, LEASE_MS, SLACK_MS);
                String loaded = jedis.scriptLoad(src);
                expect(sha.equals(loaded), "scriptLoad answered " + show(loaded) + ", the script's SHA1 is " + sha);
                expect(plain.scriptCached(sha), "server: SCRIPT EXISTS " + sha + " = 0 after scriptLoad");
                r = release(jedis, sha, src, key, tok);
                expect(!r.fellBack(), "EVALSHA of a loaded script met NOSCRIPT");
                expect(r.deleted() == 1, "release by the owner (EVALSHA) returned " + r.deleted() + ", expected 1");
                plain.expectGone(key);
                r = release(jedis, sha, src, key, tok);
                expect(r.deleted() == 0 && !r.fellBack(), "a second release returned " + r + ", expected 0 through EVALSHA");
            });

            // Extending a held lock the optimistic way: WATCH, GET (still mine), MULTI,
            // PEXPIRE, EXEC; EXEC answers PEXPIRE's 1 and the server's PTTL is the new lease.
            h.check(library, name("WATCH/MULTI/EXEC extends a held lock"), () -> {
                String k = unique(a.prefix(), "jedis-watch-" + tag);
                String me = randomHex(16);
                expect("OK".equals(jedis.set(k, me, SetParams.setParams().nx().px(LEASE_MS))), "SET NX PX failed");
                plain.expectOwner(k, me, LEASE_MS, SLACK_MS);
                expect("OK".equals(jedis.watch(k)), "WATCH did not answer OK");
                String cur = jedis.get(k);
                expect(me.equals(cur), "GET of the watched lock answered " + show(cur));
                Transaction t = jedis.multi();
                t.pexpire(k, EXTENDED_MS);
                List<Object> res = t.exec();
                expect(res != null && res.size() == 1 && Long.valueOf(1).equals(res.get(0)),
                        "EXEC answered " + show(res) + ", expected [1]");
                plain.expectOwner(k, me, EXTENDED_MS, SLACK_MS);
                Released r = release(jedis, sha, src, k, me);
                expect(r.deleted() == 1, "release after the extension returned " + r.deleted());
                plain.expectGone(k);
            });

            // The same transaction aborted: after WATCH and the GET, the key is changed
            // (the lease ran out and someone else took it): first by another Jedis
            // connection, then by the plain checker (on the leader, against a follower).
            // EXEC answers null, the queued DEL never runs, the other's value and TTL
            // stay, and the connection works on (the WATCH is gone).
            h.check(library, name("WATCH/MULTI/EXEC aborted by another write"), () -> {
                String k = unique(a.prefix(), "jedis-watch-abort-" + tag);
                String me = randomHex(16);
                expect("OK".equals(jedis.set(k, me, SetParams.setParams().nx().px(LEASE_MS))), "SET NX PX failed");
                String[] writers = {"another Jedis connection", "the plain checker"};
                for (String writer : writers) {
                    expect("OK".equals(jedis.watch(k)), "WATCH did not answer OK");
                    String cur = jedis.get(k);
                    expect(me.equals(cur), "GET of the watched lock answered " + show(cur));
                    String theirs = randomHex(16);
                    if (writer.equals(writers[0])) {
                        try (Jedis other = connect()) {
                            String ok = other.set(k, theirs, SetParams.setParams().px(EXTENDED_MS));
                            expect("OK".equals(ok), "the other client's SET answered " + show(ok));
                        }
                    } else {
                        Object ok = plain.cmd("SET", k, theirs, "PX", EXTENDED_MS);
                        expect(ok instanceof Plain.Status s && s.text().equals("OK"), "plain SET answered " + show(ok));
                    }
                    Transaction t = jedis.multi();
                    t.del(k);
                    List<Object> res = t.exec();
                    expect(res == null, "EXEC after " + writer + " changed the watched key answered " + show(res)
                            + "; expected null (aborted)");
                    plain.expectOwner(k, theirs, EXTENDED_MS, SLACK_MS);
                    cur = jedis.get(k);
                    expect(theirs.equals(cur), "GET after the aborted EXEC answered " + show(cur));
                    me = theirs;
                }
                plain.cmd("DEL", k);
            });

            // A holder takes an 800 ms lease and never releases it; another client
            // retrying SET NX PX is refused until the lease has run out, then gets the
            // lock with a higher token; the old holder's late release does nothing.
            h.check(library, name("expiry (crashed holder, " + SHORT_MS + " ms lease)"), () -> {
                String k = unique(a.prefix(), "jedis-expiry-" + tag);
                String dead = randomHex(16);
                long since = System.nanoTime();
                try (Jedis holder = connect()) {
                    String ok = holder.set(k, dead, SetParams.setParams().nx().px(SHORT_MS));
                    expect("OK".equals(ok), "holder SET NX PX answered " + show(ok));
                }
                long oldToken = plain.expectTokenOwner(k, dead);
                String me = randomHex(16);
                int tries = 0;
                long acquiredAt;
                try (Jedis other = connect()) {
                    while (true) {
                        String ok = other.set(k, me, SetParams.setParams().nx().px(LEASE_MS));
                        tries++;
                        if ("OK".equals(ok)) {
                            acquiredAt = System.nanoTime();
                            break;
                        }
                        expect(ok == null, "SET NX PX on a held lock answered " + show(ok));
                        expect(System.nanoTime() - since < 10_000_000_000L,
                                "no one got the lock within 10 s of an " + SHORT_MS + " ms lease");
                        Main.sleep(50);
                    }
                }
                long after = (acquiredAt - since) / 1_000_000;
                expect(after + 5 >= SHORT_MS, "the lock was taken " + after + " ms after the holder's " + SHORT_MS + " ms lease was requested");
                expect(tries >= 2, "the first SET NX on a held lock succeeded");
                plain.expectOwner(k, me, LEASE_MS, SLACK_MS);
                long newToken = plain.expectTokenOwner(k, me);
                expect(newToken > oldToken, "token after the expiry " + newToken + ", not above the crashed holder's " + oldToken);
                Released r = release(jedis, sha, src, k, dead);
                expect(r.deleted() == 0, "the expired holder's release returned " + r.deleted() + ", expected 0");
                plain.expectOwner(k, me, LEASE_MS, SLACK_MS);
                r = release(jedis, sha, src, k, me);
                expect(r.deleted() == 1, "release returned " + r.deleted() + ", expected 1");
                plain.expectGone(k);
            });
        } catch (Exception e) {
            h.report(library, name("(connection)"), t0, e);
        }
    }
}
