"""redis-py's own `Redis.lock()` (redis.lock.Lock), unchanged, against raftlock.

Run with the venv of the redis-py version under test:
    python redispy_lock.py --port P --check-port C --protocol 2|3
"""

import sys
import time

import redis
from redis.exceptions import LockError, LockNotOwnedError

from harness import (Background, CaseFail, Harness, Plain, ServerError, common_args, expect, info_token,
                     stale_text, unique)

TTL = 10  # seconds, the lock's timeout


def main():
    p = common_args(__doc__)
    p.add_argument("--protocol", type=int, choices=(2, 3), required=True)
    args = p.parse_args()
    h = Harness("redis-py %s" % redis.__version__)
    resp = "resp%d" % args.protocol
    plain = Plain(args.check_port)

    def client():
        return redis.Redis(host="127.0.0.1", port=args.port, protocol=args.protocol,
                           socket_timeout=15, socket_connect_timeout=5)

    r = client()
    state = {}

    def connect():
        expect(r.ping() is True, "PING did not return True")
        # The connection really speaks the protocol asked for.
        conn = r.connection_pool.get_connection()
        try:
            expect(int(conn.protocol or 2) == args.protocol,
                   "connection negotiated protocol %r" % conn.protocol)
        finally:
            r.connection_pool.release(conn)

    def acquire():
        name = unique(args.prefix, "redispy-" + resp)
        lock = r.lock(name, timeout=TTL)
        expect(lock.acquire(blocking=False) is True, "acquire(blocking=False) returned False")
        state["name"], state["lock"] = name, lock
        token = lock.local.token
        plain.expect_owner(name, token, TTL * 1000)
        # The lock has a fencing token on the server (README: LOCK.INFO on a SET NX PX lock).
        info = plain.cmd("LOCK.INFO", name)
        expect(isinstance(info, list) and info[:2] == [b"owner", token]
               and isinstance(info[3], int) and info[3] > 0,
               "LOCK.INFO %s = %r" % (name, info))
        other = client().lock(name, timeout=TTL)
        expect(other.acquire(blocking=False) is False, "a second Lock acquired a held lock")
        plain.expect_owner(name, token, TTL * 1000)

    def owned():
        lock, name = state["lock"], state["name"]
        expect(lock.owned() is True, "owned() is not True for the holder")
        expect(lock.locked() is True, "locked() is not True")
        other = client().lock(name, timeout=TTL)
        expect(other.owned() is False, "owned() is True for a Lock that never acquired")

    def extend():
        lock, name = state["lock"], state["name"]
        expect(lock.extend(5) is True, "extend(5) did not return True")
        plain.expect_owner(name, lock.local.token, (TTL + 5) * 1000)
        expect(lock.extend(3, replace_ttl=True) is True, "extend(3, replace_ttl=True) failed")
        plain.expect_owner(name, lock.local.token, 3000)

    def reacquire():
        lock, name = state["lock"], state["name"]
        expect(lock.reacquire() is True, "reacquire() did not return True")
        plain.expect_owner(name, lock.local.token, TTL * 1000)

    def release():
        lock, name = state["lock"], state["name"]
        lock.release()
        plain.expect_gone(name)
        expect(lock.owned() is False, "owned() is still True after release")
        try:
            lock.release()
        except LockError:
            pass
        else:
            raise CaseFail("a second release() did not raise LockError")
        try:
            lock.extend(5)
        except LockError:
            pass
        else:
            raise CaseFail("extend() of a released lock did not raise LockError")

    def context_manager():
        name = unique(args.prefix, "redispy-cm-" + resp)
        with r.lock(name, timeout=TTL) as lock:
            plain.expect_owner(name, lock.local.token, TTL * 1000)
        plain.expect_gone(name)

    def blocking_acquire():
        name = unique(args.prefix, "redispy-block-" + resp)
        holder = r.lock(name, timeout=TTL)
        expect(holder.acquire(blocking=False), "holder could not acquire")
        # thread_local=False: the waiter acquires in a thread and releases here.
        waiter = client().lock(name, timeout=TTL, blocking_timeout=8, thread_local=False)
        bg = Background(lambda: waiter.acquire())
        time.sleep(1.0)
        expect(bg.done_at is None, "waiter returned while the lock was held: %s" % bg.outcome())
        released_at = time.monotonic()
        holder.release()
        got = bg.join(20)
        # True within its own 8 s blocking_timeout, which ends before the holder's
        # 10 s lease: only the release can have let it in.
        expect(got is True, "blocking acquire returned %r" % got)
        expect(bg.done_at >= released_at, "waiter acquired %.2f s before the release"
               % (released_at - bg.done_at))
        plain.expect_owner(name, waiter.local.token, TTL * 1000)
        waiter.release()
        plain.expect_gone(name)

    def blocking_timeout():
        name = unique(args.prefix, "redispy-btimeout-" + resp)
        holder = r.lock(name, timeout=TTL)
        expect(holder.acquire(blocking=False), "holder could not acquire")
        t0 = time.monotonic()
        got = client().lock(name, timeout=TTL).acquire(blocking_timeout=0.5)
        waited = time.monotonic() - t0
        expect(got is False, "acquire(blocking_timeout=0.5) on a held lock returned %r" % got)
        # Not long before its timeout (redis-py sleeps 0.1 s between tries); that it
        # returns at all is bounded by the socket timeout.
        expect(waited >= 0.3, "gave up after %.2f s, before its 0.5 s blocking_timeout" % waited)
        plain.expect_owner(name, holder.local.token, TTL * 1000)
        holder.release()
        plain.expect_gone(name)

    def expiry():
        name = unique(args.prefix, "redispy-expiry-" + resp)
        old = r.lock(name, timeout=1)
        since = time.monotonic()
        expect(old.acquire(blocking=False), "could not acquire")
        plain.expect_expires(name, 1000, since)
        expect(old.owned() is False, "owned() still True after the lease expired")
        new = client().lock(name, timeout=TTL)
        expect(new.acquire(blocking=False), "could not acquire an expired lock")
        try:
            old.release()
        except LockNotOwnedError:
            pass
        else:
            raise CaseFail("release() by the expired holder did not raise LockNotOwnedError")
        plain.expect_owner(name, new.local.token, TTL * 1000)
        new.release()
        plain.expect_gone(name)

    def fenced_write():
        # The lock's token from LOCK.INFO through redis-py itself (a list in RESP2, a
        # dict in RESP3); the resource honours each holder's token and then refuses
        # the earlier, lower one with the exact STALE error.
        name = unique(args.prefix, "redispy-fence-" + resp)
        resource = unique(args.prefix, "redispy-resource-" + resp)

        def fence(c, token):
            try:
                return c.execute_command("LOCK.FENCE", resource, token)
            except redis.ResponseError as e:
                return ServerError(str(e))

        first = r.lock(name, timeout=TTL)
        expect(first.acquire(blocking=False), "first holder could not acquire")
        owner, t1 = info_token(r.execute_command("LOCK.INFO", name))
        expect(owner == first.local.token.decode(), "LOCK.INFO owner %r, expected %r" % (owner, first.local.token))
        expect(plain.expect_token_owner(name, first.local.token) == t1, "plain LOCK.INFO disagrees on the token")
        expect(fence(r, t1) == t1, "LOCK.FENCE with the holder's token %d refused" % t1)
        r.set(resource + ":data", "written under token %d" % t1)
        first.release()
        other = client()
        second = other.lock(name, timeout=TTL)
        expect(second.acquire(blocking=False), "second holder could not acquire")
        owner, t2 = info_token(other.execute_command("LOCK.INFO", name))
        expect(owner == second.local.token.decode() and t2 > t1,
               "second holder: owner %r token %d (first token %d)" % (owner, t2, t1))
        expect(fence(other, t2) == t2, "LOCK.FENCE with the second holder's token %d refused" % t2)
        got = fence(r, t1)
        expect(isinstance(got, ServerError) and str(got) == stale_text(t1, t2),
               "LOCK.FENCE with the first holder's lower token gave %r, expected -%s" % (got, stale_text(t1, t2)))
        plain.expect_fence(resource, t1, t2)
        plain.expect_fence(resource, t2, t2)
        second.release()
        plain.expect_gone(name)

    steps = [("connect", connect), ("acquire", acquire), ("owned", owned), ("extend", extend),
             ("reacquire", reacquire), ("release", release), ("context manager", context_manager),
             ("blocking acquire", blocking_acquire), ("blocking timeout", blocking_timeout),
             ("expiry", expiry), ("fenced write", fenced_write)]
    for name, fn in steps:
        if name in ("owned", "extend", "reacquire", "release") and "lock" not in state:
            h.report("%s %s" % (resp, name), False, "no lock: acquire failed", time.monotonic())
            continue
        h.case("%s %s" % (resp, name), fn)
    return 1 if h.failed else 0


if __name__ == "__main__":
    sys.exit(main())
