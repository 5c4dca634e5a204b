"""Shared helpers for the Python interop cases.

`Plain` is a minimal RESP2 client on a raw socket. It is deliberately independent
of every library under test: a case passes only if the library reports success
AND what `Plain` reads from the server afterwards (GET, PTTL, EXISTS) agrees with
what the library believes.

Each case prints one line `RESULT<TAB>library<TAB>case<TAB>PASS|FAIL<TAB>detail`
that tests/interop/run.sh collects.
"""

import argparse
import os
import socket
import sys
import threading
import time
import traceback
import uuid


class CaseFail(Exception):
    pass


class ServerError(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise CaseFail(msg)


class Plain:
    """RESP2 over a raw socket, one command at a time, bounded by a timeout."""

    def __init__(self, port, host="127.0.0.1", timeout=10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return ServerError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise ConnectionError("unexpected RESP2 reply type %r" % line)

    def raw(self, *args):
        """Send a command; return the reply, with an error reply as a ServerError value."""
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if not isinstance(a, bytes):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self._reply()

    def cmd(self, *args):
        r = self.raw(*args)
        if isinstance(r, ServerError):
            raise r
        return r

    # --- state checks -------------------------------------------------------
    def expect_owner(self, key, owner, ttl_ms, slack_ms=2000):
        """key holds exactly `owner` and its PTTL is within (ttl_ms - slack, ttl_ms]."""
        if isinstance(owner, str):
            owner = owner.encode()
        got = self.cmd("GET", key)
        expect(got == owner, "server: GET %s = %r, library believes the owner is %r" % (key, got, owner))
        pttl = self.cmd("PTTL", key)
        expect(ttl_ms - slack_ms < pttl <= ttl_ms,
               "server: PTTL %s = %r, expected about %d ms" % (key, pttl, ttl_ms))
        return pttl

    def expect_expires(self, key, ttl_ms, since, within_s=30.0):
        """key expires: not before its TTL, and (bounded wait) some time after it.

        `since` is time.monotonic() taken before the command that set the TTL was
        sent: the lease began (in log time, which never runs ahead of real time)
        after it, so any EXISTS answered before since + TTL must still find the key.
        Log time is whole milliseconds, so 5 ms of slack. How soon after the TTL
        the key goes is bounded by `within_s` only: speed is for the benchmarks.
        """
        ends = since + ttl_ms / 1000.0
        while True:
            exists = self.cmd("EXISTS", key)
            replied = time.monotonic()
            if exists == 0:
                expect(replied >= ends - 0.005, "server: %s gone %.3f s after its %d ms lease was requested, "
                       "before its TTL" % (key, replied - since, ttl_ms))
                return
            expect(replied < ends + within_s, "server: %s still exists %.1f s after a %d ms lease was requested"
                   % (key, replied - since, ttl_ms))
            time.sleep(0.05)

    def lock_info(self, key):
        """LOCK.INFO as a dict (owner, token, ttl-ms, waiters, next-waiter), or None if free."""
        r = self.cmd("LOCK.INFO", key)
        if r is None:
            return None
        expect(isinstance(r, list) and len(r) == 10
               and r[0::2] == [b"owner", b"token", b"ttl-ms", b"waiters", b"next-waiter"],
               "server: LOCK.INFO %s = %r" % (key, r))
        return {"owner": r[1], "token": r[3], "ttl-ms": r[5], "waiters": r[7], "next-waiter": r[9]}

    def expect_token_owner(self, key, owner):
        """LOCK.INFO shows `owner`; returns its token."""
        if isinstance(owner, str):
            owner = owner.encode()
        info = self.lock_info(key)
        expect(info is not None and info["owner"] == owner and isinstance(info["token"], int) and info["token"] > 0,
               "server: LOCK.INFO %s = %r, expected owner %r" % (key, info, owner))
        return info["token"]

    def expect_fence(self, resource, token, highest):
        """LOCK.FENCE resource token: honoured (returns token) if token >= highest,
        else exactly the STALE error naming both."""
        r = self.raw("LOCK.FENCE", resource, token)
        if token >= highest:
            expect(r == token, "server: LOCK.FENCE %s %d = %r, expected %d" % (resource, token, r, token))
        else:
            expect(isinstance(r, ServerError) and str(r) == stale_text(token, highest),
                   "server: LOCK.FENCE %s %d = %r, expected -%s" % (resource, token, r, stale_text(token, highest)))

    def expect_gone(self, key):
        got = self.cmd("EXISTS", key)
        expect(got == 0, "server: EXISTS %s = %r after release, expected 0 (GET=%r)"
               % (key, got, self.cmd("GET", key)))


def stale_text(token, highest):
    """The exact error (without the leading '-') for a fence below the highest token."""
    return "STALE token %d is lower than %d, the highest honored for this resource" % (token, highest)


def info_token(reply):
    """(owner, token) from a LOCK.INFO reply as a library returns it: a flat list
    (RESP2) or a dict (RESP3), with bytes or str keys."""
    if isinstance(reply, dict):
        d = {(k.decode() if isinstance(k, bytes) else k): v for k, v in reply.items()}
    else:
        expect(isinstance(reply, list) and len(reply) % 2 == 0, "LOCK.INFO replied %r" % (reply,))
        d = {(k.decode() if isinstance(k, bytes) else k): v for k, v in zip(reply[0::2], reply[1::2])}
    expect(set(d) == {"owner", "token", "ttl-ms", "waiters", "next-waiter"}, "LOCK.INFO replied %r" % (reply,))
    owner = d["owner"].decode() if isinstance(d["owner"], bytes) else d["owner"]
    expect(isinstance(d["token"], int) and d["token"] > 0, "LOCK.INFO token %r" % (d["token"],))
    return owner, d["token"]


class Harness:
    def __init__(self, library):
        self.library = library
        self.failed = 0

    def case(self, name, fn):
        t0 = time.monotonic()
        try:
            fn()
        except CaseFail as e:
            self.report(name, False, str(e), t0)
        except Exception as e:  # the library (or the server) raised
            tb = traceback.extract_tb(e.__traceback__)
            where = "%s:%d" % (os.path.basename(tb[-1].filename), tb[-1].lineno) if tb else "?"
            self.report(name, False, "%s: %s (at %s)" % (type(e).__name__, e, where), t0)
        else:
            self.report(name, True, "", t0)

    def report(self, name, ok, detail, t0):
        if not ok:
            self.failed += 1
        detail = " ".join(str(detail).split())[:400]
        took = "%.1fs" % (time.monotonic() - t0)
        print("RESULT\t%s\t%s\t%s\t%s%s" % (self.library, name, "PASS" if ok else "FAIL",
                                          took, (" " + detail) if detail else ""), flush=True)

    def skip(self, name, why):
        print("RESULT\t%s\t%s\tSKIP\t%s" % (self.library, name, why), flush=True)


def common_args(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--port", type=int, required=True, help="node the library talks to")
    p.add_argument("--check-port", type=int, required=True, help="node the plain checker reads from")
    p.add_argument("--prefix", default="interop", help="key prefix (unique per run)")
    return p


def unique(prefix, name):
    return "%s:%s:%s" % (prefix, name, uuid.uuid4().hex[:8])


class Background:
    """Run fn in a thread and keep its result or exception, with the time it finished."""

    def __init__(self, fn):
        self.result = None
        self.error = None
        self.done_at = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn):
        try:
            self.result = fn()
        except Exception as e:
            self.error = e
        finally:
            self.done_at = time.monotonic()

    def outcome(self):
        if self.error is not None:
            return "raised %s: %s" % (type(self.error).__name__, self.error)
        return "returned %r" % (self.result,)

    def join(self, timeout):
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise CaseFail("background operation still blocked after %.0f s" % timeout)
        if self.error is not None:
            raise self.error
        return self.result
