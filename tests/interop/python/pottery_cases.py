"""pottery's `Redlock` with one master, unchanged, against raftlock.

Acquire is `SET redlock:KEY uuid PX ms NX`; locked/extend/release are Lua scripts
(EVALSHA, EVAL on NOSCRIPT). raise_on_redis_errors=True so that a server error
shows up as an exception rather than as a silent "not acquired".
"""

import importlib.metadata
import sys
import time

import pottery
import redis
from pottery import ExtendUnlockedLock, Redlock, ReleaseUnlockedLock

from harness import (Background, CaseFail, Harness, Plain, ServerError, common_args, expect, info_token,
                     stale_text, unique)

TTL = 10


def main():
    args = common_args(__doc__).parse_args()
    h = Harness("pottery %s" % importlib.metadata.version("pottery"))
    plain = Plain(args.check_port)

    def client():
        return redis.Redis(host="127.0.0.1", port=args.port, socket_timeout=15,
                           socket_connect_timeout=5)

    r = client()
    state = {}

    def redlock(key, conn=None, **kw):
        return Redlock(key=key, masters={conn or r}, auto_release_time=kw.pop("ttl", TTL),
                       raise_on_redis_errors=True, **kw)

    def acquire():
        name = unique(args.prefix, "pottery")
        lock = redlock(name)
        expect(lock.acquire(blocking=False) is True, "acquire(blocking=False) returned False")
        state["name"], state["lock"] = name, lock
        plain.expect_owner(lock.key, lock._uuid, TTL * 1000)
        expect(lock.key == "redlock:" + name, "key is %r" % lock.key)
        other = redlock(name, client())
        expect(other.acquire(blocking=False) is False, "a second Redlock acquired a held lock")
        plain.expect_owner(lock.key, lock._uuid, TTL * 1000)

    def locked():
        lock = state["lock"]
        left = lock.locked()  # seconds of validity left (pottery's doctest: 9 < locked() < 10)
        expect(TTL - 2.5 < left <= TTL, "locked() = %r s, expected about %d" % (left, TTL))
        expect(redlock(state["name"], client()).locked() == 0, "locked() of a non-holder is not 0")

    def extend():
        lock = state["lock"]
        time.sleep(1.0)
        # Reads are judged at the log time of the last applied entry, which only a
        # write moves on: write something unrelated first, then the PTTL shows the
        # second that passed.
        plain.cmd("SET", unique(args.prefix, "pottery-tick"), "1", "PX", "1000")
        pttl = plain.cmd("PTTL", lock.key)
        expect(pttl <= TTL * 1000 - 900, "PTTL did not go down: %r" % pttl)
        lock.extend()
        plain.expect_owner(lock.key, lock._uuid, TTL * 1000)
        expect(lock.locked() > TTL - 0.9, "locked() after extend = %r s" % lock.locked())

    def release():
        lock = state["lock"]
        lock.release()
        plain.expect_gone(lock.key)
        expect(lock.locked() == 0, "locked() after release = %r" % lock.locked())
        try:
            lock.release()
        except ReleaseUnlockedLock:
            pass
        else:
            raise CaseFail("a second release() did not raise ReleaseUnlockedLock")
        try:
            lock.extend()
        except ExtendUnlockedLock:
            pass
        else:
            raise CaseFail("extend() of a released lock did not raise ExtendUnlockedLock")

    def context_manager():
        name = unique(args.prefix, "pottery-cm")
        lock = redlock(name)
        with lock:
            plain.expect_owner(lock.key, lock._uuid, TTL * 1000)
        plain.expect_gone(lock.key)

    def blocking_acquire():
        name = unique(args.prefix, "pottery-block")
        holder = redlock(name)
        expect(holder.acquire(blocking=False), "holder could not acquire")
        waiter = redlock(name, client())
        bg = Background(lambda: waiter.acquire(timeout=8))
        time.sleep(1.0)
        expect(bg.done_at is None, "waiter returned while the lock was held: %s" % bg.outcome())
        released_at = time.monotonic()
        holder.release()
        got = bg.join(20)
        # True within its own 8 s timeout, which ends before the holder's 10 s lease:
        # only the release can have let it in.
        expect(got is True, "blocking acquire returned %r" % got)
        expect(bg.done_at >= released_at, "waiter acquired %.2f s before the release"
               % (released_at - bg.done_at))
        plain.expect_owner(waiter.key, waiter._uuid, TTL * 1000)
        waiter.release()
        plain.expect_gone(waiter.key)

    def crashed_holder_expires():
        # The holder takes a 2 s lock and crashes (never releases, its connection
        # gone). A waiter blocked in acquire() gets it once the lease has run out,
        # and not before.
        name = unique(args.prefix, "pottery-crash")
        holder_conn = client()
        since = time.monotonic()
        holder = redlock(name, holder_conn, ttl=2)
        expect(holder.acquire(blocking=False) is True, "holder could not acquire")
        old_token = plain.expect_token_owner(holder.key, holder._uuid)
        holder_conn.close()
        waiter = redlock(name, client())
        bg = Background(lambda: waiter.acquire(timeout=20))
        got = bg.join(30)
        expect(got is True, "acquire() after the holder crashed returned %r" % got)
        expect(bg.done_at >= since + 2.0 - 0.005, "waiter acquired %.3f s after the crashed holder's 2 s lock "
               "was requested, before its TTL" % (bg.done_at - since))
        plain.expect_owner(waiter.key, waiter._uuid, TTL * 1000)
        new_token = plain.expect_token_owner(waiter.key, waiter._uuid)
        expect(new_token > old_token, "token after the expiry %d, not above the crashed holder's %d"
               % (new_token, old_token))
        expect(holder.locked() == 0, "the crashed holder's locked() = %r after its lease ran out" % holder.locked())
        try:
            holder.release()
        except ReleaseUnlockedLock:
            pass
        else:
            raise CaseFail("release() by the expired holder did not raise ReleaseUnlockedLock")
        plain.expect_owner(waiter.key, waiter._uuid, TTL * 1000)
        waiter.release()
        plain.expect_gone(waiter.key)

    def fenced_write():
        # Tokens from LOCK.INFO through pottery's own redis client; the resource
        # honours each holder's token and then refuses the earlier, lower one.
        name = unique(args.prefix, "pottery-fence")
        resource = unique(args.prefix, "pottery-resource")

        def fence(c, token):
            try:
                return c.execute_command("LOCK.FENCE", resource, token)
            except redis.ResponseError as e:
                return ServerError(str(e))

        first = redlock(name)
        expect(first.acquire(blocking=False) is True, "first holder could not acquire")
        owner, t1 = info_token(r.execute_command("LOCK.INFO", first.key))
        expect(owner == first._uuid, "LOCK.INFO owner %r, expected %r" % (owner, first._uuid))
        expect(plain.expect_token_owner(first.key, first._uuid) == t1, "plain LOCK.INFO disagrees on the token")
        expect(fence(r, t1) == t1, "LOCK.FENCE with the holder's token %d refused" % t1)
        r.set(resource + ":data", "written under token %d" % t1)
        first.release()
        other = client()
        second = redlock(name, other)
        expect(second.acquire(blocking=False) is True, "second holder could not acquire")
        owner, t2 = info_token(other.execute_command("LOCK.INFO", second.key))
        expect(owner == second._uuid and t2 > t1, "second holder: owner %r token %d (first token %d)"
               % (owner, t2, t1))
        expect(fence(other, t2) == t2, "LOCK.FENCE with the second holder's token %d refused" % t2)
        got = fence(r, t1)
        expect(isinstance(got, ServerError) and str(got) == stale_text(t1, t2),
               "LOCK.FENCE with the first holder's lower token gave %r, expected -%s" % (got, stale_text(t1, t2)))
        plain.expect_fence(resource, t1, t2)
        plain.expect_fence(resource, t2, t2)
        second.release()
        plain.expect_gone(second.key)

    for cname, fn in [("acquire", acquire), ("locked", locked), ("extend", extend),
                      ("release", release), ("context manager", context_manager),
                      ("blocking acquire", blocking_acquire), ("crashed holder expires", crashed_holder_expires),
                      ("fenced write", fenced_write)]:
        if cname in ("locked", "extend", "release") and "lock" not in state:
            h.report(cname, False, "no lock: acquire failed", time.monotonic())
            continue
        h.case(cname, fn)
    return 1 if h.failed else 0


if __name__ == "__main__":
    sys.exit(main())
