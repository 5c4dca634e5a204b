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
    p.add_argument("--acl-user", help="an ACL user limited to +@lock +@scripting ~<prefix>-acl:*")
    p.add_argument("--acl-pass")
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
    if args.acl_user:
        mine = "%s-acl:%s" % (args.prefix, resp)

        def acl_user_locks_its_keys():
            r = client(username=args.acl_user, password=args.acl_pass)
            lock = r.lock(mine, timeout=10)
            expect(lock.acquire(blocking=False) is True, "the ACL user could not take a lock on its own key")
            token = lock.local.token
            token = token if isinstance(token, bytes) else str(token).encode()
            expect(plain.cmd("GET", mine) == token, "the plain checker does not see the ACL user's lock")
            lock.release()
            expect(plain.cmd("EXISTS", mine) == 0, "the ACL user's lock is still there after release")

        def acl_user_is_refused(what, call):
            r = client(username=args.acl_user, password=args.acl_pass)
            try:
                call(r)
            except redis.exceptions.NoPermissionError as e:
                expect("NOPERM" in str(e) or "no permissions" in str(e), "unexpected text: %r" % str(e))
                return
            raise AssertionError("the ACL user was allowed to %s" % what)

        other = "%s-other:%s" % (args.prefix, resp)
        h.case("%s ACL user locks its keys" % resp, acl_user_locks_its_keys)
        h.case("%s ACL user refused another key" % resp,
               lambda: acl_user_is_refused("lock another key", lambda r: r.lock(other, timeout=10).acquire(blocking=False)))
        h.case("%s ACL user refused FLUSHALL" % resp, lambda: acl_user_is_refused("FLUSHALL", lambda r: r.flushall()))
        h.case("%s ACL user refused KEYS" % resp, lambda: acl_user_is_refused("KEYS", lambda r: r.keys("*")))
        def acl_user_refused_in_script():
            r = client(username=args.acl_user, password=args.acl_pass)
            try:
                r.eval("return redis.call('SET', ARGV[1], 'x')", 0, other)
            except redis.ResponseError as e:
                expect("The user executing the script can't" in str(e), "unexpected text: %r" % str(e))
                return
            raise AssertionError("the ACL user's script wrote another key")

        h.case("%s ACL user refused inside a script" % resp, acl_user_refused_in_script)
        h.case("%s nothing written by the refused ACL user" % resp,
               lambda: expect(plain.cmd("EXISTS", other) == 0, "the refused ACL user wrote %s" % other))

    # What the refused clients sent changed nothing: the keyspace holds no
    # key of this run but what the cases above left (none).
    left = plain.cmd("KEYS", "%s:auth-%s:*" % (args.prefix, resp))
    h.case("%s nothing left behind" % resp, lambda: expect(left == [], "keys left: %r" % (left,)))
    return 1 if h.failed else 0


if __name__ == "__main__":
    sys.exit(main())
