"""redis-py's own TLS options (issue 14), unchanged, against a node's TLS
port (--tls-port, --tls-auth-clients yes): `ssl=True` with `ssl_ca_certs`,
`ssl_certfile` and `ssl_keyfile`, in RESP2 and RESP3, a lock taken and
released over TLS and seen by a plain-port client, a `rediss://` URL, and a
client without a certificate refused.

    python tls_cases.py --port TLS_PORT --check-port PLAIN_PORT --ca CA --cert CERT --key KEY --protocol 2|3
"""

import sys

import redis

from harness import Harness, Plain, common_args, expect, unique


def main():
    p = common_args(__doc__)
    p.add_argument("--protocol", type=int, choices=(2, 3), required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    args = p.parse_args()
    h = Harness("redis-py %s tls" % redis.__version__)
    resp = "resp%d" % args.protocol
    plain = Plain(args.check_port)

    def client(**kw):
        return redis.Redis(host="127.0.0.1", port=args.port, protocol=args.protocol, socket_timeout=10,
                           socket_connect_timeout=5, ssl=True, ssl_ca_certs=args.ca, **kw)

    def lock_over(r):
        expect(r.ping() is True, "PING did not return True")
        name = unique(args.prefix, "tls-" + resp)
        lock = r.lock(name, timeout=10)
        expect(lock.acquire(blocking=False) is True, "acquire(blocking=False) returned False")
        token = lock.local.token
        token = token if isinstance(token, bytes) else str(token).encode()
        expect(plain.cmd("GET", name) == token, "the plain-port checker does not see the lock")
        expect(lock.acquire(blocking=False) is False, "a second acquire of a held lock succeeded")
        lock.release()
        expect(plain.cmd("EXISTS", name) == 0, "the lock is still there after release")

    def refused():
        r = client()
        try:
            r.ping()
        except (redis.ConnectionError, OSError) as e:
            return
        raise AssertionError("PING succeeded over TLS without a client certificate")

    h.case("%s ssl=True with a client certificate" % resp,
           lambda: lock_over(client(ssl_certfile=args.cert, ssl_keyfile=args.key)))
    h.case("%s rediss:// URL" % resp, lambda: lock_over(redis.Redis.from_url(
        "rediss://127.0.0.1:%d/0" % args.port, protocol=args.protocol, ssl_ca_certs=args.ca,
        ssl_certfile=args.cert, ssl_keyfile=args.key, socket_timeout=10)))
    h.case("%s no client certificate is refused" % resp, refused)
    return 1 if h.failed else 0


if __name__ == "__main__":
    sys.exit(main())
