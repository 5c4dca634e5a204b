package raftlock.interop;

import static raftlock.interop.JedisCases.LEASE_MS;
import static raftlock.interop.JedisCases.SLACK_MS;
import static raftlock.interop.Main.expect;
import static raftlock.interop.Main.unique;
import static raftlock.interop.Plain.show;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.redisson.Redisson;
import org.redisson.api.RCountDownLatch;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.api.redisnode.RedisNodes;
import org.redisson.config.Config;
import org.redisson.config.Protocol;

/**
 * Redisson's lock objects as applications use them (RLock, RFairLock, RReadWriteLock,
 * RSemaphore, RPermitExpirableSemaphore, RCountDownLatch, RFencedLock), through its own
 * API with its default codec and a single-server configuration; see Main.
 *
 * <p>Redisson keeps a lock in a hash: one field {@code <client id>:<thread id>} whose
 * value is the hold count, with a PEXPIRE for the lease; the plain checker reads it
 * with HGETALL and PTTL. A waiter subscribes to {@code redisson_lock__channel:{key}}
 * and is woken by the PUBLISH in the unlock script. Each lock object is used from the
 * thread that holds it (an {@link Actor}: a one-thread executor), as Redisson ties a
 * lock to its thread.
 */
final class RedissonCases {

    /** lockWatchdogTimeout: a lock taken without a lease is renewed every third of it. */
    static final long WATCHDOG_MS = 3000;
    /** The lease of a paused holder (the SIGSTOP case). */
    static final long PAUSED_LEASE_MS = 2000;
    /** A holder's lease well beyond any wait in the case. */
    static final long LONG_LEASE_MS = 15000;

    private final Main.Args a;
    private final String library;
    private final String tag;
    private final String clientName;
    private TraceProxy trace;
    private RedissonClient redisson;
    /** The raftlock extensions (LOCK.INFO) answer; false against a real Redis. */
    private boolean raftlock;

    private RedissonCases(Main.Args a) {
        this.a = a;
        this.tag = a.tag();
        this.library = "redisson " + Main.version("org.redisson", "redisson");
        this.clientName = a.prefix() + "-redisson-" + tag;
    }

    /** Redisson's configuration: single server, default codec, the protocol asked for. */
    static Config config(int port, int protocol, String clientName) {
        Config cfg = new Config();
        cfg.setProtocol(protocol == 3 ? Protocol.RESP3 : Protocol.RESP2);
        cfg.setLockWatchdogTimeout(WATCHDOG_MS);
        // A 2-core machine: fewer threads and idle connections than the defaults (16, 32, 24).
        cfg.setThreads(4);
        cfg.setNettyThreads(8);
        cfg.useSingleServer()
                .setAddress("redis://127.0.0.1:" + port)
                .setClientName(clientName)
                .setConnectionMinimumIdleSize(2)
                .setConnectionPoolSize(16)
                .setTimeout(5000)
                // one retry: a command the server refuses or never answers fails the case
                // in seconds rather than after Redisson's four
                .setRetryAttempts(1);
        return cfg;
    }

    static void run(Main.Harness h, Main.Args a) {
        new RedissonCases(a).run(h);
    }

    private String name(String s) {
        return tag + " " + s;
    }

    /** The hash field Redisson writes for a lock held by thread tid of this client. */
    private String field(long tid) {
        return redisson.getId() + ":" + tid;
    }

    private void run(Main.Harness h) {
        long t0 = System.nanoTime();
        try (Plain plain = new Plain(a.checkPort()); Plain local = new Plain(a.port())) {
            int port = a.port();
            if (a.trace() != null) {
                trace = new TraceProxy(a.port(), a.trace());
                trace.note("redisson " + tag + " -> 127.0.0.1:" + a.port());
                port = trace.port();
            }
            Object info = plain.raw("LOCK.INFO", a.prefix() + ":redisson-probe");
            raftlock = !(info instanceof Plain.ServerError e && e.text().toLowerCase().contains("unknown command"));
            int p = port;
            h.check(library, name("connect (" + (a.protocol() == 3 ? "RESP3" : "RESP2") + ")"), () -> {
                redisson = Redisson.create(config(p, a.protocol(), clientName));
                expect(redisson.getRedisNodes(RedisNodes.SINGLE).pingAll(), "pingAll() answered false");
                // Redisson's connections, on the node it talks to, in the protocol asked for.
                Object list = local.cmd("CLIENT", "LIST");
                expect(list instanceof byte[], "CLIENT LIST answered " + show(list));
                int mine = 0;
                for (String l : new String((byte[]) list, StandardCharsets.UTF_8).split("\n")) {
                    List<String> f = List.of(l.trim().split("\\s+"));
                    if (f.contains("name=" + clientName)) {
                        mine++;
                        expect(f.contains("resp=" + a.protocol()), "a Redisson connection is not resp=" + a.protocol() + ": " + l);
                    }
                }
                expect(mine >= 2, "CLIENT LIST shows " + mine + " connections named " + clientName + ", expected at least 2");
            });
            if (redisson != null) {
                cases(h, plain, local);
            }
        } catch (Exception e) {
            h.report(library, name("(connection)"), t0, e);
        } finally {
            if (redisson != null) {
                redisson.shutdown(0, 2, TimeUnit.SECONDS);
            }
            if (trace != null) {
                trace.close();
            }
        }
    }

    /** Runs a case; a failure names the last command the server refused, if traced. */
    private boolean check(Main.Harness h, String name, Main.Body fn) {
        if (trace != null) {
            trace.clearLastError();
            trace.note("case: " + name);
        }
        return h.check(library, name(name), () -> {
            try {
                fn.run();
            } catch (Throwable e) {
                String last = trace == null ? null : trace.lastError();
                if (last != null) {
                    if (!(e instanceof CaseFail)) {
                        e.printStackTrace();
                    }
                    throw new CaseFail(Main.Harness.describe(e) + " [last error reply: " + last + "]");
                }
                throw e;
            }
        });
    }

    private void cases(Main.Harness h, Plain plain, Plain local) {
        // lock(leaseTime): the hash holds this thread's field with count 1 and the lease;
        // isLocked, isHeldByCurrentThread, getHoldCount; another thread is not the holder
        // and its tryLock() fails; unlock deletes the key.
        check(h, "RLock lock(leaseTime), isHeldByCurrentThread, unlock", () -> {
            String k = unique(a.prefix(), "redisson-lock");
            RLock l = redisson.getLock(k);
            long me = Thread.currentThread().getId();
            l.lock(LEASE_MS, TimeUnit.MILLISECONDS);
            expect(l.isLocked(), "isLocked() is false after lock()");
            expect(l.isHeldByCurrentThread(), "isHeldByCurrentThread() is false after lock()");
            expect(l.getHoldCount() == 1, "getHoldCount() = " + l.getHoldCount() + ", expected 1");
            expectHash(plain, k, Map.of(field(me), "1"));
            expectPttl(plain, k, LEASE_MS);
            try (Actor other = new Actor("other")) {
                expect(!other.call(l::isHeldByCurrentThread), "isHeldByCurrentThread() is true in another thread");
                expect(!other.call(() -> l.tryLock()), "tryLock() in another thread succeeded on a held lock");
                expect(other.call(l::isLocked), "isLocked() is false in another thread");
            }
            expectHash(plain, k, Map.of(field(me), "1"));
            l.unlock();
            plain.expectGone(k);
            expect(!l.isLocked(), "isLocked() is true after unlock()");
        });

        // tryLock(waitTime, leaseTime) contended: while another thread holds the lock a
        // 300 ms tryLock times out (false, after about 300 ms); a tryLock with an 8 s wait
        // started then gets the lock once the holder unlocks, not before.
        check(h, "RLock tryLock(waitTime) contended, acquired after unlock", () -> {
            String k = unique(a.prefix(), "redisson-trylock");
            RLock l = redisson.getLock(k);
            try (Actor holder = new Actor("holder"); Actor waiter = new Actor("waiter")) {
                holder.call(() -> {
                    l.lock(LONG_LEASE_MS, TimeUnit.MILLISECONDS);
                    return null;
                });
                expectHash(plain, k, Map.of(field(holder.tid), "1"));
                long t = System.nanoTime();
                expect(!waiter.call(() -> l.tryLock(300, LEASE_MS, TimeUnit.MILLISECONDS)),
                        "tryLock(300 ms) succeeded on a lock another thread holds");
                long waited = ms(System.nanoTime() - t);
                expect(waited >= 290, "tryLock(300 ms) gave up after " + waited + " ms");
                Future<Long> got = waiter.submit(() -> l.tryLock(8000, LEASE_MS, TimeUnit.MILLISECONDS) ? System.nanoTime() : -1L);
                Main.sleep(500);
                expect(!got.isDone(), "the waiter's tryLock returned while the lock was held: " + Actor.peek(got));
                expectHash(plain, k, Map.of(field(holder.tid), "1"));
                long released = System.nanoTime();
                holder.call(() -> {
                    l.unlock();
                    return null;
                });
                long at = Actor.get(got, 10_000);
                expect(at > 0, "the waiter's tryLock(8 s) returned false after the holder unlocked");
                expect(at >= released, "the waiter got the lock before the holder unlocked");
                expectHash(plain, k, Map.of(field(waiter.tid), "1"));
                expectPttl(plain, k, LEASE_MS);
                waiter.call(() -> {
                    l.unlock();
                    return null;
                });
                plain.expectGone(k);
            }
        });

        // lock() without a lease: the watchdog's lease (lockWatchdogTimeout, 3 s) renewed
        // every second; held for 5.5 s, the key never expires and its PTTL goes back up.
        // Each PTTL follows a write to another key: raftlock's PTTL counts from the last
        // applied log entry, so on an otherwise idle server it reads the full lease right
        // after every renewal and a renewal could not be told from a frozen clock.
        check(h, "RLock watchdog renews a lock taken without a lease", () -> {
            String k = unique(a.prefix(), "redisson-watchdog");
            String clock = unique(a.prefix(), "redisson-clock");
            RLock l = redisson.getLock(k);
            long me = Thread.currentThread().getId();
            l.lock();
            expectHash(plain, k, Map.of(field(me), "1"));
            expectPttl(plain, k, WATCHDOG_MS);
            long t = System.nanoTime();
            long prev = WATCHDOG_MS;
            int renewals = 0;
            List<Long> seen = new ArrayList<>();
            while (System.nanoTime() - t < (WATCHDOG_MS + 2500) * 1_000_000) {
                Main.sleep(250);
                plain.cmd("SET", clock, String.valueOf(seen.size()));
                long pttl = plain.integer("PTTL", k);
                seen.add(pttl);
                expect(pttl > 0, "server: PTTL " + k + " = " + pttl + " after " + ms(System.nanoTime() - t)
                        + " ms under the watchdog; PTTLs seen: " + seen);
                if (pttl > prev + 100) {
                    renewals++;
                }
                prev = pttl;
            }
            expect(renewals >= 3, "the PTTL went back up " + renewals + " times in 5.5 s, expected a renewal every second: " + seen);
            expectHash(plain, k, Map.of(field(me), "1"));
            expect(l.isHeldByCurrentThread(), "isHeldByCurrentThread() is false after 5.5 s under the watchdog");
            l.unlock();
            plain.expectGone(k);
            plain.cmd("DEL", clock);
        });

        // forceUnlock from a thread that does not hold the lock: true, the key is gone;
        // the holder's own unlock then throws IllegalMonitorStateException; a second
        // forceUnlock answers false.
        check(h, "RLock forceUnlock", () -> {
            String k = unique(a.prefix(), "redisson-force");
            RLock l = redisson.getLock(k);
            try (Actor holder = new Actor("holder")) {
                holder.call(() -> {
                    l.lock(LEASE_MS, TimeUnit.MILLISECONDS);
                    return null;
                });
                expectHash(plain, k, Map.of(field(holder.tid), "1"));
                expect(!l.isHeldByCurrentThread(), "isHeldByCurrentThread() is true in a thread that does not hold it");
                expect(l.forceUnlock(), "forceUnlock() of a held lock answered false");
                plain.expectGone(k);
                expect(!l.isLocked(), "isLocked() is true after forceUnlock()");
                String late = holder.call(() -> {
                    try {
                        l.unlock();
                        return "unlock() returned";
                    } catch (IllegalMonitorStateException e) {
                        return null;
                    }
                });
                expect(late == null, "the old holder's " + late + " after forceUnlock(), expected IllegalMonitorStateException");
                expect(!l.forceUnlock(), "a second forceUnlock() answered true");
                plain.expectGone(k);
            }
        });

        // Reentrancy: lock twice (getHoldCount 2, the field's count 2), unlock (1, the
        // lease set again), unlock (the key gone).
        check(h, "RLock reentrancy (count 2 -> 1 -> gone)", () -> {
            String k = unique(a.prefix(), "redisson-reentrant");
            RLock l = redisson.getLock(k);
            String f = field(Thread.currentThread().getId());
            l.lock(LEASE_MS, TimeUnit.MILLISECONDS);
            l.lock(LEASE_MS, TimeUnit.MILLISECONDS);
            expect(l.getHoldCount() == 2, "getHoldCount() = " + l.getHoldCount() + " after two lock(), expected 2");
            expectHash(plain, k, Map.of(f, "2"));
            expectPttl(plain, k, LEASE_MS);
            l.unlock();
            expect(l.getHoldCount() == 1, "getHoldCount() = " + l.getHoldCount() + " after one unlock(), expected 1");
            expect(l.isHeldByCurrentThread(), "isHeldByCurrentThread() is false with one hold left");
            expectHash(plain, k, Map.of(f, "1"));
            expectPttl(plain, k, LEASE_MS);
            l.unlock();
            plain.expectGone(k);
            expect(!l.isLocked(), "isLocked() is true after the second unlock()");
        });

        // Woken by the unlock message: a holder with a 15 s lease; a waiter's tryLock
        // (10 s wait) subscribes to redisson_lock__channel:{key} (PUBSUB NUMSUB on the
        // node Redisson talks to shows it); the holder unlocks; the waiter has the lock
        // within 2 s. Without the PUBLISH it would sleep for the lock's PTTL (or its own
        // 10 s wait) and fail.
        check(h, "RLock waiter woken by the unlock PUBLISH", () -> {
            String k = unique(a.prefix(), "redisson-pubsub");
            String channel = "redisson_lock__channel:{" + k + "}";
            RLock l = redisson.getLock(k);
            try (Actor holder = new Actor("holder"); Actor waiter = new Actor("waiter")) {
                holder.call(() -> {
                    l.lock(LONG_LEASE_MS, TimeUnit.MILLISECONDS);
                    return null;
                });
                long start = System.nanoTime();
                Future<Long> got = waiter.submit(() -> l.tryLock(10_000, LEASE_MS, TimeUnit.MILLISECONDS) ? System.nanoTime() : -1L);
                long subs = 0;
                while (subs < 1 && System.nanoTime() - start < 5_000_000_000L) {
                    Main.sleep(50);
                    subs = numsub(local, channel);
                }
                expect(subs == 1, "server: PUBSUB NUMSUB " + channel + " = " + subs + " 5 s after the waiter's tryLock, expected 1");
                expect(!got.isDone(), "the waiter's tryLock returned while the lock was held: " + Actor.peek(got));
                long released = System.nanoTime();
                holder.call(() -> {
                    l.unlock();
                    return null;
                });
                long at = Actor.get(got, 12_000);
                expect(at > 0, "the waiter's tryLock(10 s) returned false after "
                        + ms(System.nanoTime() - start) + " ms; the unlock message did not wake it");
                long after = ms(at - released);
                expect(after < 2000, "the waiter got the lock " + after + " ms after the unlock, not woken by the unlock message");
                expectHash(plain, k, Map.of(field(waiter.tid), "1"));
                waiter.call(() -> {
                    l.unlock();
                    return null;
                });
                plain.expectGone(k);
            }
        });

        // RFairLock: the main thread holds it; four threads call tryLock(15 s) 300 ms
        // apart; the queue (redisson_lock_queue:{key}) lists them in that order; after
        // the unlock each gets the lock in turn, holds it 100 ms and unlocks.
        check(h, "RFairLock FIFO order across 4 threads", () -> {
            String k = unique(a.prefix(), "redisson-fair");
            String queue = "redisson_lock_queue:{" + k + "}";
            RLock l = redisson.getFairLock(k);
            l.lock(LONG_LEASE_MS, TimeUnit.MILLISECONDS);
            expectHash(plain, k, Map.of(field(Thread.currentThread().getId()), "1"));
            List<Actor> actors = new ArrayList<>();
            List<Integer> order = Collections.synchronizedList(new ArrayList<>());
            List<Future<Boolean>> done = new ArrayList<>();
            try {
                for (int i = 1; i <= 4; i++) {
                    Actor w = new Actor("fair-" + i);
                    actors.add(w);
                    int n = i;
                    done.add(w.submit(() -> {
                        if (!l.tryLock(15_000, LEASE_MS, TimeUnit.MILLISECONDS)) {
                            return false;
                        }
                        order.add(n);
                        Main.sleep(100);
                        l.unlock();
                        return true;
                    }));
                    Main.sleep(300);
                }
                List<String> want = new ArrayList<>();
                for (Actor w : actors) {
                    want.add(field(w.tid));
                }
                List<String> q = strings(plain.cmd("LRANGE", queue, 0, -1));
                expect(q.equals(want), "server: LRANGE " + queue + " = " + q + ", expected the waiters in order " + want);
                expect(order.isEmpty(), "a waiter got the fair lock while it was held: " + order);
                l.unlock();
                for (int i = 0; i < done.size(); i++) {
                    expect(Actor.get(done.get(i), 10_000), "waiter " + (i + 1) + "'s tryLock(15 s) returned false");
                }
            } finally {
                for (Actor w : actors) {
                    w.close();
                }
            }
            expect(order.equals(List.of(1, 2, 3, 4)), "the fair lock was granted in the order " + order + ", expected [1, 2, 3, 4]");
            plain.expectGone(k);
            plain.expectGone(queue);
        });

        // RReadWriteLock: two readers hold the read lock at once (mode=read, a field
        // each); a writer's tryLock(300 ms) fails; a writer's tryLock(8 s) waits through
        // the first reader's unlock and gets it after the second's (mode=write); a
        // reader's tryLock() then fails; the writer's unlock deletes the key.
        check(h, "RReadWriteLock two readers, writer excluded", () -> {
            String k = unique(a.prefix(), "redisson-rw");
            RReadWriteLock rw = redisson.getReadWriteLock(k);
            try (Actor r1 = new Actor("reader-1"); Actor r2 = new Actor("reader-2"); Actor w = new Actor("writer")) {
                r1.call(() -> {
                    rw.readLock().lock(LEASE_MS, TimeUnit.MILLISECONDS);
                    return null;
                });
                expect(r2.call(() -> rw.readLock().tryLock(1000, LEASE_MS, TimeUnit.MILLISECONDS)),
                        "a second reader's tryLock(1 s) failed while one reader holds the read lock");
                Map<String, String> both = new LinkedHashMap<>();
                both.put("mode", "read");
                both.put(field(r1.tid), "1");
                both.put(field(r2.tid), "1");
                expectHash(plain, k, both);
                expect(!w.call(() -> rw.writeLock().tryLock(300, LEASE_MS, TimeUnit.MILLISECONDS)),
                        "the writer's tryLock(300 ms) succeeded while two readers hold the read lock");
                expectHash(plain, k, both);
                Future<Boolean> wf = w.submit(() -> rw.writeLock().tryLock(8000, LEASE_MS, TimeUnit.MILLISECONDS));
                Main.sleep(300);
                r1.call(() -> {
                    rw.readLock().unlock();
                    return null;
                });
                Main.sleep(500);
                expect(!wf.isDone(), "the writer's tryLock returned with a reader still holding the read lock: " + Actor.peek(wf));
                expectHash(plain, k, Map.of("mode", "read", field(r2.tid), "1"));
                r2.call(() -> {
                    rw.readLock().unlock();
                    return null;
                });
                expect(Actor.get(wf, 10_000), "the writer's tryLock(8 s) returned false after both readers unlocked");
                expectHash(plain, k, Map.of("mode", "write", field(w.tid) + ":write", "1"));
                expect(!r1.call(() -> rw.readLock().tryLock()), "a reader's tryLock() succeeded while the writer holds the lock");
                w.call(() -> {
                    rw.writeLock().unlock();
                    return null;
                });
                plain.expectGone(k);
            }
        });

        // RSemaphore: trySetPermits(2) (the key holds "2"; a second trySetPermits is
        // refused), acquire and tryAcquire take both ("0"), tryAcquire(300 ms) fails, a
        // tryAcquire(8 s) in another thread is woken by a release, two releases give "2".
        check(h, "RSemaphore trySetPermits, acquire, release", () -> {
            String k = unique(a.prefix(), "redisson-semaphore");
            RSemaphore s = redisson.getSemaphore(k);
            expect(s.trySetPermits(2), "trySetPermits(2) on a new semaphore answered false");
            expect("2".equals(plain.get(k)), "server: GET " + k + " = " + show(plain.get(k)) + " after trySetPermits(2)");
            expect(!s.trySetPermits(5), "a second trySetPermits(5) answered true");
            s.acquire();
            expect(s.tryAcquire(), "tryAcquire() with one permit left answered false");
            expect("0".equals(plain.get(k)), "server: GET " + k + " = " + show(plain.get(k)) + " with both permits taken");
            expect(s.availablePermits() == 0, "availablePermits() = " + s.availablePermits() + ", expected 0");
            expect(!s.tryAcquire(Duration.ofMillis(300)), "tryAcquire(300 ms) with no permit left answered true");
            try (Actor other = new Actor("other")) {
                Future<Boolean> got = other.submit(() -> s.tryAcquire(Duration.ofMillis(8000)));
                Main.sleep(500);
                expect(!got.isDone(), "tryAcquire(8 s) returned with no permit free: " + Actor.peek(got));
                long released = System.nanoTime();
                s.release();
                expect(Actor.get(got, 10_000), "tryAcquire(8 s) returned false after a release");
                long after = ms(System.nanoTime() - released);
                expect(after < 4000, "the waiting tryAcquire took " + after + " ms after the release");
                expect("0".equals(plain.get(k)), "server: GET " + k + " = " + show(plain.get(k)) + " after the waiter took the released permit");
                other.call(() -> {
                    s.release();
                    return null;
                });
            }
            s.release();
            expect("2".equals(plain.get(k)), "server: GET " + k + " = " + show(plain.get(k)) + " after both permits were released");
            expect(s.availablePermits() == 2, "availablePermits() = " + s.availablePermits() + ", expected 2");
            expect(s.delete(), "delete() answered false");
            plain.expectGone(k);
        });

        // RPermitExpirableSemaphore: one permit; tryAcquire with a 1 s lease answers an
        // id (a member of {key}:timeout, scored with its expiry); a second tryAcquire()
        // answers null; once the lease has run out, tryAcquire(3 s wait) gets a new id;
        // the expired permit's tryRelease answers false, the new one's true.
        check(h, "RPermitExpirableSemaphore permit lease expires", () -> {
            String k = unique(a.prefix(), "redisson-pes");
            String timeouts = "{" + k + "}:timeout";
            RPermitExpirableSemaphore s = redisson.getPermitExpirableSemaphore(k);
            expect(s.trySetPermits(1), "trySetPermits(1) answered false");
            long before = System.currentTimeMillis();
            String id = s.tryAcquire(0, 1000, TimeUnit.MILLISECONDS);
            expect(id != null, "tryAcquire(lease 1 s) of a free permit answered null");
            expect("0".equals(plain.get(k)), "server: GET " + k + " = " + show(plain.get(k)) + " with the permit taken");
            Object score = plain.cmd("ZSCORE", timeouts, HexFormat.of().parseHex(id));
            long expires = score instanceof byte[] b ? (long) Double.parseDouble(new String(b, StandardCharsets.UTF_8)) : -1;
            expect(expires >= before + 1000 && expires <= System.currentTimeMillis() + 1000,
                    "server: ZSCORE " + timeouts + " <permit " + id + "> = " + show(score) + ", expected its expiry about 1 s from now");
            expect(s.tryAcquire() == null, "tryAcquire() with the only permit taken answered an id");
            long t = System.nanoTime();
            String id2 = s.tryAcquire(3000, 5000, TimeUnit.MILLISECONDS);
            long at = System.currentTimeMillis();
            expect(id2 != null, "tryAcquire(3 s wait) answered null " + ms(System.nanoTime() - t) + " ms after a 1 s lease was granted");
            expect(at >= before + 1000, "a new permit was granted " + (at - before) + " ms after a 1 s lease");
            expect(!id2.equals(id), "the new permit has the expired one's id");
            expect(!s.tryRelease(id), "tryRelease of the expired permit answered true");
            expect(plain.integer("ZCARD", timeouts) == 1, "server: ZCARD " + timeouts + " = " + plain.integer("ZCARD", timeouts) + ", expected 1");
            expect(s.tryRelease(id2), "tryRelease of the held permit answered false");
            expect("1".equals(plain.get(k)), "server: GET " + k + " = " + show(plain.get(k)) + " after the release");
            expect(s.availablePermits() == 1, "availablePermits() = " + s.availablePermits() + ", expected 1");
            s.delete();
            plain.expectGone(k);
            plain.expectGone(timeouts);
        });

        // RCountDownLatch: trySetCount(1) (the key holds "1"), await(10 s) in another
        // thread, countDown from this one: the waiter returns true within 2 s, the key is
        // gone, getCount() is 0.
        check(h, "RCountDownLatch await woken by countDown", () -> {
            String k = unique(a.prefix(), "redisson-latch");
            RCountDownLatch latch = redisson.getCountDownLatch(k);
            expect(latch.trySetCount(1), "trySetCount(1) answered false");
            expect("1".equals(plain.get(k)), "server: GET " + k + " = " + show(plain.get(k)) + " after trySetCount(1)");
            expect(!latch.trySetCount(3), "a second trySetCount answered true");
            try (Actor other = new Actor("awaiter")) {
                Future<Long> woke = other.submit(() -> latch.await(10_000, TimeUnit.MILLISECONDS) ? System.nanoTime() : -1L);
                Main.sleep(500);
                expect(!woke.isDone(), "await() returned before the countDown: " + Actor.peek(woke));
                long counted = System.nanoTime();
                latch.countDown();
                long at = Actor.get(woke, 12_000);
                expect(at > 0, "await(10 s) returned false after the countDown");
                expect(ms(at - counted) < 2000, "await returned " + ms(at - counted) + " ms after the countDown");
            }
            plain.expectGone(k);
            expect(latch.getCount() == 0, "getCount() = " + latch.getCount() + ", expected 0");
        });

        // RFencedLock: three lock/unlock cycles; each token is higher than the last and
        // equals the counter redisson_lock_token:{key} the server holds; getToken()
        // answers the last.
        check(h, "RFencedLock tokens increase across lock/unlock", () -> {
            String k = unique(a.prefix(), "redisson-fenced");
            String tokens = "redisson_lock_token:{" + k + "}";
            RFencedLock l = redisson.getFencedLock(k);
            List<Long> seen = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                Long tok = i == 1 ? l.lockAndGetToken() : l.tryLockAndGetToken(5000, LEASE_MS, TimeUnit.MILLISECONDS);
                expect(tok != null, "lock cycle " + (i + 1) + " answered no token");
                expect(seen.isEmpty() || tok > seen.get(seen.size() - 1), "token " + tok + " after " + seen + " is not higher");
                seen.add(tok);
                expectHash(plain, k, Map.of(field(Thread.currentThread().getId()), "1"));
                String held = plain.get(tokens);
                expect(String.valueOf(tok).equals(held), "server: GET " + tokens + " = " + show(held) + ", Redisson's token is " + tok);
                l.unlock();
                plain.expectGone(k);
            }
            expect(seen.get(2).equals(l.getToken()), "getToken() = " + l.getToken() + ", the last token was " + seen.get(2));
            plain.cmd("DEL", tokens); // RFencedLock has no delete(): the counter outlives the lock
        });

        pausedHolder(h, plain);
    }

    // --- the paused holder ----------------------------------------------------

    /** What the paused-holder case learned, for the token case after it. */
    private static final class Paused {
        String holderToken;
        Object waiterInfo;
    }

    /**
     * A second JVM (this jar's --holder mode) takes the lock with a 2 s lease and reports
     * its LOCK.INFO token; it is stopped (SIGSTOP) while it holds the lock; a tryLock here
     * gets the lock once the lease has run out, never before; the holder, continued
     * (SIGCONT), no longer holds it and its unlock throws IllegalMonitorStateException.
     * Then, on raftlock, LOCK.INFO of the key shows a token above the paused holder's.
     */
    private void pausedHolder(Main.Harness h, Plain plain) {
        String k = unique(a.prefix(), "redisson-paused");
        Paused p = new Paused();
        check(h, "RLock held by a paused JVM (SIGSTOP) past its lease passes to a waiter", () -> {
            String java = ProcessHandle.current().info().command().orElse("java");
            ProcessBuilder pb = new ProcessBuilder(java, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                    "-cp", System.getProperty("java.class.path"), Main.class.getName(), "--holder",
                    "--port", String.valueOf(trace != null ? trace.port() : a.port()),
                    "--check-port", String.valueOf(a.checkPort()), "--protocol", String.valueOf(a.protocol()),
                    "--key", k, "--lease-ms", String.valueOf(PAUSED_LEASE_MS), "--name", clientName + "-holder");
            pb.redirectError(ProcessBuilder.Redirect.INHERIT);
            Process child = pb.start();
            // Killed by run.sh's time-out, this JVM must not leave a stopped child behind.
            Thread reaper = new Thread(() -> {
                if (child.isAlive()) {
                    try {
                        exec("kill", "-CONT", String.valueOf(child.pid()));
                    } catch (Exception ignored) {
                        // destroyed below all the same
                    }
                    child.destroyForcibly();
                }
            }, "holder-reaper");
            Runtime.getRuntime().addShutdownHook(reaper);
            boolean stopped = false;
            try {
                BlockingQueue<String> lines = new LinkedBlockingQueue<>();
                Thread reader = new Thread(() -> {
                    try (BufferedReader r = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8))) {
                        for (String l; (l = r.readLine()) != null; ) {
                            lines.add(l);
                        }
                    } catch (IOException ignored) {
                        // the child is gone
                    }
                }, "holder-stdout");
                reader.setDaemon(true);
                reader.start();
                String[] held = expectLine(lines, "HOLDING", 20_000, child);
                // HOLDING field before-ms LOCK.INFO-reply
                String holderField = held[1];
                long before = Long.parseLong(held[2]);
                p.holderToken = held[3];
                expectHash(plain, k, Map.of(holderField, "1"));
                expectPttl(plain, k, PAUSED_LEASE_MS);
                exec("kill", "-STOP", String.valueOf(child.pid()));
                stopped = true;
                RLock l = redisson.getLock(k);
                long t = System.nanoTime();
                boolean got = l.tryLock(PAUSED_LEASE_MS + 8000, LEASE_MS, TimeUnit.MILLISECONDS);
                long at = System.currentTimeMillis();
                expect(got, "tryLock(" + (PAUSED_LEASE_MS + 8000) + " ms) answered false " + ms(System.nanoTime() - t)
                        + " ms after the holder was paused");
                expect(at + 5 >= before + PAUSED_LEASE_MS, "the waiter got the lock " + (at - before)
                        + " ms after the paused holder asked for a " + PAUSED_LEASE_MS + " ms lease");
                String mine = field(Thread.currentThread().getId());
                expectHash(plain, k, Map.of(mine, "1"));
                p.waiterInfo = plain.raw("LOCK.INFO", k);
                exec("kill", "-CONT", String.valueOf(child.pid()));
                stopped = false;
                OutputStream in = child.getOutputStream();
                in.write("check\n".getBytes(StandardCharsets.UTF_8));
                in.flush();
                String[] after = expectLine(lines, "AFTER", 10_000, child);
                expect(after[1].equals("false"), "the continued holder's isHeldByCurrentThread() is " + after[1]);
                expect(after[2].equals("IllegalMonitorStateException"),
                        "the continued holder's unlock(): " + after[2] + ", expected IllegalMonitorStateException");
                expectHash(plain, k, Map.of(mine, "1"));
                l.unlock();
                plain.expectGone(k);
            } finally {
                if (stopped) {
                    exec("kill", "-CONT", String.valueOf(child.pid()));
                }
                child.destroy();
                if (!child.waitFor(5, TimeUnit.SECONDS)) {
                    child.destroyForcibly();
                }
                Runtime.getRuntime().removeShutdownHook(reaper);
            }
        });
        check(h, "LOCK.INFO token of the waiter above the paused holder's", () -> {
            expect(p.holderToken != null, "no token: the paused-holder case failed before the holder reported it");
            long old;
            try {
                old = Long.parseLong(p.holderToken);
            } catch (NumberFormatException e) {
                throw new CaseFail("the holder's LOCK.INFO " + k + " (a Redisson lock hash) answered " + p.holderToken);
            }
            expect(p.waiterInfo != null, "no LOCK.INFO of the waiter: the paused-holder case failed before it");
            Long tok = lockInfoToken(p.waiterInfo);
            expect(tok != null, "the waiter's LOCK.INFO " + k + " answered " + show(p.waiterInfo));
            expect(tok > old, "the waiter's token " + tok + " is not above the paused holder's " + old);
        });
    }

    /** The token in a LOCK.INFO reply (a flat array in RESP2), or null. */
    static Long lockInfoToken(Object r) {
        if (r instanceof List<?> l) {
            for (int i = 0; i + 1 < l.size(); i += 2) {
                if (l.get(i) instanceof byte[] b && "token".equals(new String(b, StandardCharsets.UTF_8)) && l.get(i + 1) instanceof Long t) {
                    return t;
                }
            }
        }
        return null;
    }

    /**
     * The --holder mode: takes the RLock key with a lease, prints
     * HOLDING&lt;TAB&gt;field&lt;TAB&gt;ms-before-the-lock&lt;TAB&gt;LOCK.INFO token or reply, then waits
     * for a line on stdin; then prints AFTER&lt;TAB&gt;isHeldByCurrentThread&lt;TAB&gt;what unlock()
     * did, and exits. It exits by itself after 60 s of waiting.
     */
    static void holder(String[] argv) {
        int port = 0, checkPort = 0, protocol = 3;
        long lease = PAUSED_LEASE_MS;
        String key = null, name = "raftlock-interop-holder";
        for (int i = 0; i + 1 < argv.length; i += 2) {
            String v = argv[i + 1];
            switch (argv[i]) {
                case "--port" -> port = Integer.parseInt(v);
                case "--check-port" -> checkPort = Integer.parseInt(v);
                case "--protocol" -> protocol = Integer.parseInt(v);
                case "--key" -> key = v;
                case "--lease-ms" -> lease = Long.parseLong(v);
                case "--name" -> name = v;
                default -> throw new IllegalArgumentException("unknown holder flag " + argv[i]);
            }
        }
        PrintStream out = System.out;
        Thread guard = new Thread(() -> {
            Main.sleep(60_000);
            System.exit(3);
        }, "holder-guard");
        guard.setDaemon(true);
        guard.start();
        RedissonClient r = Redisson.create(config(port, protocol, name));
        int rc = 0;
        try (Plain plain = new Plain(checkPort)) {
            RLock l = r.getLock(key);
            long before = System.currentTimeMillis();
            if (!l.tryLock(0, lease, TimeUnit.MILLISECONDS)) {
                out.println("FAILED\tthe lock was held");
                rc = 1;
                return;
            }
            Object info = plain.raw("LOCK.INFO", key);
            Long tok = lockInfoToken(info);
            out.println("HOLDING\t" + r.getId() + ":" + Thread.currentThread().getId() + "\t" + before + "\t"
                    + (tok != null ? tok.toString() : show(info)));
            out.flush();
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
            String unlocked;
            boolean heldNow = l.isHeldByCurrentThread();
            try {
                l.unlock();
                unlocked = "unlock() returned";
            } catch (IllegalMonitorStateException e) {
                unlocked = "IllegalMonitorStateException";
            }
            out.println("AFTER\t" + heldNow + "\t" + unlocked);
            out.flush();
        } catch (Exception e) {
            out.println("FAILED\t" + e);
            rc = 1;
        } finally {
            r.shutdown(0, 2, TimeUnit.SECONDS);
            out.flush();
            System.exit(rc);
        }
    }

    /** The next line from the holder that starts with word, split at tabs. */
    private static String[] expectLine(BlockingQueue<String> lines, String word, long ms, Process child) throws InterruptedException {
        long deadline = System.nanoTime() + ms * 1_000_000;
        while (true) {
            long left = deadline - System.nanoTime();
            String l = left > 0 ? lines.poll(left, TimeUnit.NANOSECONDS) : null;
            if (l == null) {
                throw new CaseFail("the holder JVM printed no " + word + " line within " + ms + " ms"
                        + (child.isAlive() ? "" : " (it exited with " + child.exitValue() + ")"));
            }
            if (l.startsWith("FAILED\t")) {
                throw new CaseFail("the holder JVM: " + l.substring(7));
            }
            if (l.startsWith(word + "\t")) {
                return l.split("\t", -1);
            }
        }
    }

    private static void exec(String... cmd) throws IOException, InterruptedException {
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
        if (!p.waitFor(5, TimeUnit.SECONDS) || p.exitValue() != 0) {
            throw new CaseFail(String.join(" ", cmd) + " failed: " + out);
        }
    }

    // --- plain checks ----------------------------------------------------------

    static long ms(long nanos) {
        return nanos / 1_000_000;
    }

    /** A reply's elements as strings (an array of bulk strings). */
    static List<String> strings(Object r) {
        if (!(r instanceof List<?> l)) {
            throw new CaseFail("server: expected an array, got " + show(r));
        }
        List<String> s = new ArrayList<>();
        for (Object o : l) {
            s.add(o instanceof byte[] b ? new String(b, StandardCharsets.UTF_8) : String.valueOf(o));
        }
        return s;
    }

    /** The hash exactly as Redisson believes it (HGETALL). */
    static void expectHash(Plain plain, String key, Map<String, String> want) throws IOException {
        List<String> kv = strings(plain.cmd("HGETALL", key));
        Map<String, String> got = new LinkedHashMap<>();
        for (int i = 0; i + 1 < kv.size(); i += 2) {
            got.put(kv.get(i), kv.get(i + 1));
        }
        if (!got.equals(want)) {
            throw new CaseFail("server: HGETALL " + key + " = " + got + ", Redisson believes " + want);
        }
    }

    /** PTTL within (ttl - SLACK_MS, ttl]. */
    static void expectPttl(Plain plain, String key, long ttl) throws IOException {
        long pttl = plain.integer("PTTL", key);
        if (!(pttl > ttl - SLACK_MS && pttl <= ttl)) {
            throw new CaseFail("server: PTTL " + key + " = " + pttl + ", expected about " + ttl + " ms");
        }
    }

    static long numsub(Plain local, String channel) throws IOException {
        Object r = local.cmd("PUBSUB", "NUMSUB", channel);
        if (r instanceof List<?> l && l.size() == 2 && l.get(1) instanceof Long n) {
            return n;
        }
        throw new CaseFail("server: PUBSUB NUMSUB " + channel + " answered " + show(r));
    }

    // --- threads ---------------------------------------------------------------

    /** One thread that runs what it is given: a lock's owner, as Redisson sees it. */
    static final class Actor implements AutoCloseable {
        final ExecutorService ex;
        final long tid;

        Actor(String name) throws Exception {
            ex = Executors.newSingleThreadExecutor(r -> {
                Thread t = new Thread(r, "redisson-case-" + name);
                t.setDaemon(true);
                return t;
            });
            tid = call(() -> Thread.currentThread().getId());
        }

        <T> Future<T> submit(Callable<T> c) {
            return ex.submit(c);
        }

        /** Runs c on this thread and waits for it (at most 15 s). */
        <T> T call(Callable<T> c) throws Exception {
            return get(ex.submit(c), 15_000);
        }

        static <T> T get(Future<T> f, long ms) throws Exception {
            try {
                return f.get(ms, TimeUnit.MILLISECONDS);
            } catch (ExecutionException e) {
                if (e.getCause() instanceof Exception x) {
                    throw x;
                }
                throw e;
            } catch (TimeoutException e) {
                f.cancel(true);
                throw new CaseFail("a call in another thread did not return within " + ms + " ms");
            }
        }

        /** A finished future's outcome, for a message. */
        static String peek(Future<?> f) {
            try {
                return String.valueOf(f.get(0, TimeUnit.MILLISECONDS));
            } catch (ExecutionException e) {
                return "threw " + e.getCause();
            } catch (Exception e) {
                return e.toString();
            }
        }

        @Override
        public void close() {
            ex.shutdownNow();
        }
    }
}
