package raftlock.interop;

import static raftlock.interop.JedisCases.EXTENDED_MS;
import static raftlock.interop.JedisCases.LEASE_MS;
import static raftlock.interop.JedisCases.SHORT_MS;
import static raftlock.interop.JedisCases.SLACK_MS;
import static raftlock.interop.Main.expect;
import static raftlock.interop.Main.randomHex;
import static raftlock.interop.Main.unique;
import static raftlock.interop.Plain.show;

import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisNoScriptException;
import io.lettuce.core.RedisURI;
import io.lettuce.core.ScriptOutputType;
import io.lettuce.core.SetArgs;
import io.lettuce.core.TransactionResult;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.api.sync.RedisCommands;
import io.lettuce.core.protocol.ProtocolVersion;
import io.lettuce.core.resource.ClientResources;
import io.lettuce.core.resource.DefaultClientResources;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** Lettuce's sync API as applications use it for a lock; see Main. */
final class LettuceCases {

    private final Main.Args a;
    private final String library;
    private final String tag;
    private final ProtocolVersion protocol;
    private RedisClient client;

    private LettuceCases(Main.Args a) {
        this.a = a;
        this.tag = a.tag();
        this.library = "lettuce " + Main.version("io.lettuce", "lettuce-core");
        this.protocol = a.protocol() == 3 ? ProtocolVersion.RESP3 : ProtocolVersion.RESP2;
    }

    private String name(String s) {
        return tag + " " + s;
    }

    /** A new connection (another client, as far as the server can tell). */
    StatefulRedisConnection<String, String> connect() {
        return client.connect();
    }

    /** Which way a release went. */
    record Released(long deleted, boolean fellBack) {
    }

    /** The release recipe: EVALSHA, and EVAL of the text on NOSCRIPT. */
    static Released release(RedisCommands<String, String> c, String sha, String src, String key, String token) {
        Object r;
        boolean fellBack = false;
        String[] keys = {key};
        try {
            r = c.evalsha(sha, ScriptOutputType.INTEGER, keys, token);
        } catch (RedisNoScriptException e) {
            fellBack = true;
            r = c.eval(src, ScriptOutputType.INTEGER, keys, token);
        }
        if (!(r instanceof Long n)) {
            throw new CaseFail("the release script returned " + show(r) + ", expected an integer");
        }
        return new Released(n, fellBack);
    }

    static void run(Main.Harness h, Main.Args a) {
        new LettuceCases(a).run(h);
    }

    private void run(Main.Harness h) {
        long t0 = System.nanoTime();
        ClientResources resources = DefaultClientResources.builder().ioThreadPoolSize(2).computationThreadPoolSize(2).build();
        try {
            client = RedisClient.create(resources, RedisURI.builder()
                    .withHost("127.0.0.1").withPort(a.port()).withTimeout(Duration.ofSeconds(15)).build());
            client.setOptions(ClientOptions.builder().protocolVersion(protocol).build());
            try (Plain plain = new Plain(a.checkPort()); StatefulRedisConnection<String, String> conn = connect()) {
                cases(h, plain, conn.sync());
            }
        } catch (Exception e) {
            h.report(library, name("(connection)"), t0, e);
        } finally {
            if (client != null) {
                client.shutdown(0, 2, TimeUnit.SECONDS);
            }
            resources.shutdown(0, 2, TimeUnit.SECONDS);
        }
    }

    private void cases(Main.Harness h, Plain plain, RedisCommands<String, String> lettuce) {
        String src = Main.unlockScript(a.prefix(), "lettuce " + tag);
        String sha = Main.sha1Hex(src);

        h.check(library, name("connect (" + protocol + ")"), () -> {
            String pong = lettuce.ping();
            expect("PONG".equals(pong), "PING answered " + show(pong));
            String info = lettuce.clientInfo();
            expect(List.of(info.trim().split("\\s+")).contains("resp=" + a.protocol()),
                    "CLIENT INFO does not show resp=" + a.protocol() + ": " + info);
        });

        // SET key token NX PX through SetArgs; a second SET NX from another connection
        // on the held key answers null and changes nothing.
        String key = unique(a.prefix(), "lettuce-" + tag);
        String tok = randomHex(16);
        boolean acquired = h.check(library, name("acquire (SET NX PX)"), () -> {
            String ok = lettuce.set(key, tok, SetArgs.Builder.nx().px(LEASE_MS));
            expect("OK".equals(ok), "SET NX PX on a free key answered " + show(ok));
            plain.expectOwner(key, tok, LEASE_MS, SLACK_MS);
            plain.expectTokenOwner(key, tok);
            try (StatefulRedisConnection<String, String> other = connect()) {
                String again = other.sync().set(key, randomHex(16), SetArgs.Builder.nx().px(LEASE_MS));
                expect(again == null, "a second SET NX PX on a held key answered " + show(again) + ", expected null");
            }
            plain.expectOwner(key, tok, LEASE_MS, SLACK_MS);
        });

        // The release: EVALSHA (ScriptOutputType.INTEGER) of a script the server has
        // never seen meets NOSCRIPT (RedisNoScriptException), the recipe falls back to
        // EVAL; a non-owner's release does nothing. scriptLoad answers the SHA1 that
        // Lettuce's digest and this program compute; the owner's EVALSHA deletes the key.
        h.check(library, name("release (EVALSHA, NOSCRIPT->EVAL, scriptLoad)"), () -> {
            expect(acquired, "no lock: acquire failed");
            expect(sha.equals(lettuce.digest(src)), "Lettuce's digest " + lettuce.digest(src) + " is not the script's SHA1 " + sha);
            expect(!plain.scriptCached(sha), "server: SCRIPT EXISTS finds a script unique to this run before it was sent");
            Released r = release(lettuce, sha, src, key, "not-the-owner");
            expect(r.fellBack(), "EVALSHA of a script never sent did not meet NOSCRIPT");
            expect(r.deleted() == 0, "release by a non-owner (EVAL) returned " + r.deleted() + ", expected 0");
            plain.expectOwner(key, tok, LEASE_MS, SLACK_MS);
            String loaded = lettuce.scriptLoad(src);
            expect(sha.equals(loaded), "scriptLoad answered " + show(loaded) + ", the script's SHA1 is " + sha);
            expect(plain.scriptCached(sha), "server: SCRIPT EXISTS " + sha + " = 0 after scriptLoad");
            r = release(lettuce, sha, src, key, tok);
            expect(!r.fellBack(), "EVALSHA of a loaded script met NOSCRIPT");
            expect(r.deleted() == 1, "release by the owner (EVALSHA) returned " + r.deleted() + ", expected 1");
            plain.expectGone(key);
            r = release(lettuce, sha, src, key, tok);
            expect(r.deleted() == 0 && !r.fellBack(), "a second release returned " + r + ", expected 0 through EVALSHA");
        });

        // WATCH, GET (still mine), MULTI, PEXPIRE, EXEC: not discarded, PEXPIRE's true,
        // and the server's PTTL is the new lease.
        h.check(library, name("WATCH/MULTI/EXEC extends a held lock"), () -> {
            String k = unique(a.prefix(), "lettuce-watch-" + tag);
            String me = randomHex(16);
            expect("OK".equals(lettuce.set(k, me, SetArgs.Builder.nx().px(LEASE_MS))), "SET NX PX failed");
            plain.expectOwner(k, me, LEASE_MS, SLACK_MS);
            expect("OK".equals(lettuce.watch(k)), "WATCH did not answer OK");
            String cur = lettuce.get(k);
            expect(me.equals(cur), "GET of the watched lock answered " + show(cur));
            expect("OK".equals(lettuce.multi()), "MULTI did not answer OK");
            lettuce.pexpire(k, EXTENDED_MS);
            TransactionResult res = lettuce.exec();
            expect(!res.wasDiscarded(), "EXEC was discarded, nothing changed the watched key");
            expect(res.size() == 1 && Boolean.TRUE.equals(res.get(0)), "EXEC answered " + show(res.stream().toList()) + ", expected [true]");
            plain.expectOwner(k, me, EXTENDED_MS, SLACK_MS);
            Released r = release(lettuce, sha, src, k, me);
            expect(r.deleted() == 1, "release after the extension returned " + r.deleted());
            plain.expectGone(k);
        });

        // Aborted: after WATCH and the GET the key is changed, first by another Lettuce
        // connection, then by the plain checker (on the leader, against a follower);
        // EXEC is discarded, the queued DEL never runs, the other's value and TTL stay,
        // and the connection works on.
        h.check(library, name("WATCH/MULTI/EXEC aborted by another write"), () -> {
            String k = unique(a.prefix(), "lettuce-watch-abort-" + tag);
            String me = randomHex(16);
            expect("OK".equals(lettuce.set(k, me, SetArgs.Builder.nx().px(LEASE_MS))), "SET NX PX failed");
            String[] writers = {"another Lettuce connection", "the plain checker"};
            for (String writer : writers) {
                expect("OK".equals(lettuce.watch(k)), "WATCH did not answer OK");
                String cur = lettuce.get(k);
                expect(me.equals(cur), "GET of the watched lock answered " + show(cur));
                String theirs = randomHex(16);
                if (writer.equals(writers[0])) {
                    try (StatefulRedisConnection<String, String> other = connect()) {
                        String ok = other.sync().set(k, theirs, SetArgs.Builder.px(EXTENDED_MS));
                        expect("OK".equals(ok), "the other client's SET answered " + show(ok));
                    }
                } else {
                    Object ok = plain.cmd("SET", k, theirs, "PX", EXTENDED_MS);
                    expect(ok instanceof Plain.Status s && s.text().equals("OK"), "plain SET answered " + show(ok));
                }
                expect("OK".equals(lettuce.multi()), "MULTI did not answer OK");
                lettuce.del(k);
                TransactionResult res = lettuce.exec();
                expect(res.wasDiscarded(), "EXEC after " + writer + " changed the watched key was not discarded: "
                        + show(res.stream().toList()));
                plain.expectOwner(k, theirs, EXTENDED_MS, SLACK_MS);
                cur = lettuce.get(k);
                expect(theirs.equals(cur), "GET after the discarded EXEC answered " + show(cur));
                me = theirs;
            }
            plain.cmd("DEL", k);
        });

        // A holder takes an 800 ms lease and never releases it; another connection
        // retrying SET NX PX gets the lock only once the lease has run out, with a
        // higher token; the old holder's late release does nothing.
        h.check(library, name("expiry (crashed holder, " + SHORT_MS + " ms lease)"), () -> {
            String k = unique(a.prefix(), "lettuce-expiry-" + tag);
            String dead = randomHex(16);
            long since = System.nanoTime();
            try (StatefulRedisConnection<String, String> holder = connect()) {
                String ok = holder.sync().set(k, dead, SetArgs.Builder.nx().px(SHORT_MS));
                expect("OK".equals(ok), "holder SET NX PX answered " + show(ok));
            }
            long oldToken = plain.expectTokenOwner(k, dead);
            String me = randomHex(16);
            int tries = 0;
            long acquiredAt;
            try (StatefulRedisConnection<String, String> other = connect()) {
                while (true) {
                    String ok = other.sync().set(k, me, SetArgs.Builder.nx().px(LEASE_MS));
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
            Released r = release(lettuce, sha, src, k, dead);
            expect(r.deleted() == 0, "the expired holder's release returned " + r.deleted() + ", expected 0");
            plain.expectOwner(k, me, LEASE_MS, SLACK_MS);
            r = release(lettuce, sha, src, k, me);
            expect(r.deleted() == 1, "release returned " + r.deleted() + ", expected 1");
            plain.expectGone(k);
        });
    }
}
