"""python-redis-lock (`redis_lock.Lock`), unchanged, against raftlock.

Its acquire is `SET lock:NAME id NX EX s`; release and extend are Lua scripts
(EVALSHA, EVAL on NOSCRIPT); release also pushes to the list `lock-signal:NAME`
from inside the script, and a blocked acquire waits on that list with BLPOP.
"""

import sys
import time

import redis
import redis_lock

from harness import Background, CaseFail, Harness, Plain, common_args, expect, unique

EXPIRE = 10


def main():
    args = common_args(__doc__).parse_args()
    version = getattr(redis_lock, "__version__", "?")
    h = Harness("python-redis-lock %s" % version)
    plain = Plain(args.check_port)

    def client():
        # The library's documented setup: a plain redis.Redis (StrictRedis) client.
        return redis.Redis(host="127.0.0.1", port=args.port, socket_timeout=20,
                           socket_connect_timeout=5)

    conn = client()
    state = {}

    def acquire():
        name = unique(args.prefix, "prl")
        lock = redis_lock.Lock(conn, name, expire=EXPIRE)
        expect(lock.acquire(blocking=False) is True, "acquire(blocking=False) returned False")
        state["name"], state["lock"] = name, lock
        plain.expect_owner("lock:" + name, lock.id, EXPIRE * 1000)
        expect(lock.locked() is True, "locked() is not True")
        expect(lock.get_owner_id() == lock.id, "get_owner_id() = %r" % lock.get_owner_id())
        other = redis_lock.Lock(client(), name, expire=EXPIRE)
        expect(other.acquire(blocking=False) is False, "a second Lock acquired a held lock")
        plain.expect_owner("lock:" + name, lock.id, EXPIRE * 1000)

    def extend():
        lock, name = state["lock"], state["name"]
        lock.extend(expire=25)
        plain.expect_owner("lock:" + name, lock.id, 25000)

    def release():
        lock, name = state["lock"], state["name"]
        lock.release()
        plain.expect_gone("lock:" + name)
        # The release script left one wake-up signal, expiring after signal_expire (1 s).
        llen = plain.cmd("LLEN", "lock-signal:" + name)
        expect(llen == 1, "server: LLEN lock-signal:%s = %r after release, expected 1" % (name, llen))
        pttl = plain.cmd("PTTL", "lock-signal:" + name)
        expect(0 < pttl <= 1000, "server: PTTL of the signal list = %r, expected <= 1000" % pttl)
        try:
            lock.release()
        except redis_lock.NotAcquired:
            pass
        else:
            raise CaseFail("a second release() did not raise NotAcquired")

    def context_manager():
        name = unique(args.prefix, "prl-cm")
        lock = redis_lock.Lock(conn, name, expire=EXPIRE)
        with lock:
            plain.expect_owner("lock:" + name, lock.id, EXPIRE * 1000)
        plain.expect_gone("lock:" + name)

    def blocking_acquire():
        # The waiter blocks in BLPOP lock-signal:NAME and is woken by the LPUSH that
        # the holder's release script makes: well before the holder's 30 s lease ends.
        name = unique(args.prefix, "prl-block")
        holder = redis_lock.Lock(conn, name, expire=30)
        expect(holder.acquire(blocking=False), "holder could not acquire")
        waiter = redis_lock.Lock(client(), name, expire=EXPIRE)
        t0 = time.monotonic()
        bg = Background(lambda: waiter.acquire(blocking=True, timeout=EXPIRE))
        time.sleep(1.0)
        expect(bg.done_at is None, "waiter returned while the lock was held: %s" % bg.outcome())
        holder.release()
        got = bg.join(EXPIRE + 5)
        waited = bg.done_at - t0
        expect(got is True, "blocking acquire returned %r" % got)
        expect(0.9 <= waited <= 3.0, "waiter acquired after %.2f s; the release was at 1 s" % waited)
        plain.expect_owner("lock:" + name, waiter.id, EXPIRE * 1000)
        waiter.release()
        plain.expect_gone("lock:" + name)

    def acquire_timeout():
        name = unique(args.prefix, "prl-timeout")
        holder = redis_lock.Lock(conn, name, expire=EXPIRE)
        expect(holder.acquire(blocking=False), "holder could not acquire")
        t0 = time.monotonic()
        got = redis_lock.Lock(client(), name, expire=EXPIRE).acquire(blocking=True, timeout=1)
        waited = time.monotonic() - t0
        expect(got is False, "acquire(timeout=1) on a held lock returned %r" % got)
        expect(0.9 <= waited <= 4.0, "gave up after %.2f s" % waited)
        plain.expect_owner("lock:" + name, holder.id, EXPIRE * 1000)
        holder.release()
        plain.expect_gone("lock:" + name)

    def auto_renewal():
        name = unique(args.prefix, "prl-renew")
        lock = redis_lock.Lock(client(), name, expire=2, auto_renewal=True)
        expect(lock.acquire(blocking=False), "could not acquire")
        try:
            time.sleep(3.5)  # longer than the 2 s lease: only the renewals keep it
            plain.expect_owner("lock:" + name, lock.id, 2000)
        finally:
            lock.release()
        plain.expect_gone("lock:" + name)

    for cname, fn in [("acquire", acquire), ("extend", extend), ("release", release),
                      ("context manager", context_manager), ("blocking acquire (BLPOP)", blocking_acquire),
                      ("acquire timeout (BLPOP)", acquire_timeout), ("auto renewal", auto_renewal)]:
        if cname in ("extend", "release") and "lock" not in state:
            h.report(cname, False, "no lock: acquire failed", time.monotonic())
            continue
        h.case(cname, fn)
    return 1 if h.failed else 0


if __name__ == "__main__":
    sys.exit(main())
