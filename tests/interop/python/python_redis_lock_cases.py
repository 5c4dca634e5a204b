"""python-redis-lock (`redis_lock.Lock`), unchanged, against raftlock.

Its acquire is `SET lock:NAME id NX EX s`; release and extend are Lua scripts
(EVALSHA, EVAL on NOSCRIPT); release also pushes to the list `lock-signal:NAME`
from inside the script, and a blocked acquire waits on that list with BLPOP.
"""

import sys
import time

import redis
import redis_lock

from harness import (Background, CaseFail, Harness, Plain, ServerError, common_args, expect, info_token,
                     stale_text, unique)

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
        bg = Background(lambda: waiter.acquire(blocking=True, timeout=EXPIRE))
        time.sleep(1.0)
        expect(bg.done_at is None, "waiter returned while the lock was held: %s" % bg.outcome())
        released_at = time.monotonic()
        holder.release()
        got = bg.join(EXPIRE + 5)
        # True within its own 10 s timeout, which ends long before the holder's 30 s
        # lease: only the release (its LPUSH waking the BLPOP) can have let it in.
        expect(got is True, "blocking acquire returned %r" % got)
        expect(bg.done_at >= released_at, "waiter acquired %.2f s before the release"
               % (released_at - bg.done_at))
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
        # Not before its timeout; that it returns at all is bounded by the socket timeout.
        expect(waited >= 0.9, "gave up after %.2f s, before its 1 s timeout" % waited)
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

    def crashed_holder_expires():
        # The holder takes a 2 s lock and crashes: no release (so no wake-up signal),
        # no renewal, its connection gone. A blocked waiter gets the lock once the
        # lease has run out, and not before.
        name = unique(args.prefix, "prl-crash")
        holder_conn = client()
        since = time.monotonic()
        holder = redis_lock.Lock(holder_conn, name, expire=2)
        expect(holder.acquire(blocking=False), "holder could not acquire")
        old_token = plain.expect_token_owner("lock:" + name, holder.id)
        holder_conn.close()
        waiter = redis_lock.Lock(client(), name, expire=3)
        bg = Background(lambda: waiter.acquire(blocking=True))  # BLPOPs 3 s at a time
        got = bg.join(30)
        expect(got is True, "blocking acquire after the holder crashed returned %r" % got)
        expect(bg.done_at >= since + 2.0 - 0.005, "waiter acquired %.3f s after the crashed holder's 2 s lock "
               "was requested, before its TTL" % (bg.done_at - since))
        waiter.extend(expire=EXPIRE)
        plain.expect_owner("lock:" + name, waiter.id, EXPIRE * 1000)
        new_token = plain.expect_token_owner("lock:" + name, waiter.id)
        expect(new_token > old_token, "token after the expiry %d, not above the crashed holder's %d"
               % (new_token, old_token))
        # The crashed holder coming back cannot release the new holder's lock.
        try:
            holder.release()
        except redis_lock.NotAcquired:
            pass
        else:
            raise CaseFail("release() by the expired holder did not raise NotAcquired")
        plain.expect_owner("lock:" + name, waiter.id, EXPIRE * 1000)
        waiter.release()
        plain.expect_gone("lock:" + name)

    def fenced_write():
        # Tokens from LOCK.INFO through the library's own client; the resource honours
        # each holder's token and then refuses the earlier, lower one.
        name = unique(args.prefix, "prl-fence")
        resource = unique(args.prefix, "prl-resource")

        def fence(c, token):
            try:
                return c.execute_command("LOCK.FENCE", resource, token)
            except redis.ResponseError as e:
                return ServerError(str(e))

        first = redis_lock.Lock(conn, name, expire=EXPIRE)
        expect(first.acquire(blocking=False), "first holder could not acquire")
        owner, t1 = info_token(conn.execute_command("LOCK.INFO", "lock:" + name))
        expect(owner == first.id, "LOCK.INFO owner %r, expected %r" % (owner, first.id))
        expect(plain.expect_token_owner("lock:" + name, first.id) == t1, "plain LOCK.INFO disagrees on the token")
        expect(fence(conn, t1) == t1, "LOCK.FENCE with the holder's token %d refused" % t1)
        conn.set(resource + ":data", "written under token %d" % t1)
        first.release()
        other = client()
        second = redis_lock.Lock(other, name, expire=EXPIRE)
        expect(second.acquire(blocking=False), "second holder could not acquire")
        owner, t2 = info_token(other.execute_command("LOCK.INFO", "lock:" + name))
        expect(owner == second.id and t2 > t1, "second holder: owner %r token %d (first token %d)" % (owner, t2, t1))
        expect(fence(other, t2) == t2, "LOCK.FENCE with the second holder's token %d refused" % t2)
        got = fence(conn, t1)
        expect(isinstance(got, ServerError) and str(got) == stale_text(t1, t2),
               "LOCK.FENCE with the first holder's lower token gave %r, expected -%s" % (got, stale_text(t1, t2)))
        plain.expect_fence(resource, t1, t2)
        plain.expect_fence(resource, t2, t2)
        second.release()
        plain.expect_gone("lock:" + name)

    for cname, fn in [("acquire", acquire), ("extend", extend), ("release", release),
                      ("context manager", context_manager), ("blocking acquire (BLPOP)", blocking_acquire),
                      ("acquire timeout (BLPOP)", acquire_timeout), ("auto renewal", auto_renewal),
                      ("crashed holder expires", crashed_holder_expires), ("fenced write", fenced_write)]:
        if cname in ("extend", "release") and "lock" not in state:
            h.report(cname, False, "no lock: acquire failed", time.monotonic())
            continue
        h.case(cname, fn)
    return 1 if h.failed else 0


if __name__ == "__main__":
    sys.exit(main())
