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

from harness import Background, CaseFail, Harness, Plain, common_args, expect, unique

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
        t0 = time.monotonic()
        bg = Background(lambda: waiter.acquire(timeout=8))
        time.sleep(1.0)
        expect(bg.done_at is None, "waiter returned while the lock was held: %s" % bg.outcome())
        holder.release()
        got = bg.join(10)
        waited = bg.done_at - t0
        expect(got is True, "blocking acquire returned %r" % got)
        expect(0.9 <= waited <= 3.0, "waiter acquired after %.2f s; the release was at 1 s" % waited)
        plain.expect_owner(waiter.key, waiter._uuid, TTL * 1000)
        waiter.release()
        plain.expect_gone(waiter.key)

    for cname, fn in [("acquire", acquire), ("locked", locked), ("extend", extend),
                      ("release", release), ("context manager", context_manager),
                      ("blocking acquire", blocking_acquire)]:
        if cname in ("locked", "extend", "release") and "lock" not in state:
            h.report(cname, False, "no lock: acquire failed", time.monotonic())
            continue
        h.case(cname, fn)
    return 1 if h.failed else 0


if __name__ == "__main__":
    sys.exit(main())
