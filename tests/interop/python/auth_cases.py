"""redis-py's own authentication options (issue 14), unchanged, against a node
started with --requirepass: `password=`, `username="default", password=`, in
RESP2 and RESP3 (redis-py sends HELLO 3 AUTH then), a lock taken through the
authenticated client, and the errors for no password and a wrong one.

    python auth_cases.py --port P --check-port C --password PW --protocol 2|3
"""

import sys

import redis

from harness import Harness, Plain, ServerError, common_args, expect, unique


def main():
    p = common_args(__doc__)
    p.add_argument("--protocol", type=int, choices=(2, 3), required=True)
    p.add_argument("--password", required=True)
    args = p.parse_args()
    h = Harness("redis-py %s auth" % redis.__version__)
    resp = "resp%d" % args.protocol
    plain = Plain(args.check_port)
    plain.cmd("AUTH", args.password)

    def client(**kw):
        return redis.Redis(host="127.0.0.1", port=args.port, protocol=args.protocol, socket_timeout=10,
                           socket_connect_timeout=5, **kw)

    def locks_with(**kw):
        r = client(**kw)
        expect(r.ping() is True, "PING did not return True")
        name = unique(args.prefix, "auth-" + resp)
        lock = r.lock(name, timeout=10)
        expect(lock.acquire(blocking=False) is True, "acquire(blocking=False) returned False")
        token = lock.local.token
        token = token if isinstance(token, bytes) else str(token).encode()
        expect(plain.cmd("GET", name) == token, "the plain checker does not see the lock")
        lock.release()
        expect(plain.cmd("EXISTS", name) == 0, "the lock is still there after release")

    def refused(**kw):
        r = client(**kw)
        try:
            r.ping()
        except (redis.AuthenticationError, redis.ResponseError) as e:
            text = str(e)
            # redis-py drops the error code: "Authentication required.",
            # "invalid username-password pair ...", or (RESP3, HELLO) "HELLO
            # must be called with the client already authenticated ...".
            expect("Authentication required" in text or "invalid username-password" in text
                   or "already authenticated" in text, "refused with an unexpected error: %r" % text)
            return
        raise AssertionError("PING succeeded without the right password")

    h.case("%s password=" % resp, lambda: locks_with(password=args.password))
    h.case("%s username=default, password=" % resp, lambda: locks_with(username="default", password=args.password))
    h.case("%s no password is refused" % resp, lambda: refused())
    h.case("%s a wrong password is refused" % resp, lambda: refused(password="wrong-" + args.password))
    h.case("%s another user is refused" % resp, lambda: refused(username="alice", password=args.password))
    # What the refused clients sent changed nothing: the keyspace holds no
    # key of this run but what the cases above left (none).
    left = plain.cmd("KEYS", "%s:auth-%s:*" % (args.prefix, resp))
    h.case("%s nothing left behind" % resp, lambda: expect(left == [], "keys left: %r" % (left,)))
    return 1 if h.failed else 0


if __name__ == "__main__":
    sys.exit(main())
