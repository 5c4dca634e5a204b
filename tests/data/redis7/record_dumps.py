#!/usr/bin/env python3
"""Record real Redis DUMP payloads for tests/dump.rs.

Usage:  python3 tests/data/redis7/record_dumps.py

Starts a throw-away redis-server (the one on PATH, as record.py does), builds
keys in each of Redis 7.0's encodings (integer and LZF-compressed strings,
quicklists of listpacks, intsets, listpack and hash-table hashes, listpack and
skiplist sorted sets), and writes tests/data/redis7/dumps.txt:

    name <name> <OBJECT ENCODING of the key>
    setup <arg> <arg> ...      (the commands that built the key "k", in order)
    dump <hex of DUMP k>

Arguments never hold spaces. The test replays each setup on raftlock under
the key "k", RESTOREs the dump under another key and compares the two.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from record import Conn, Server, find_redis_server  # noqa: E402


def cases():
    long_words = ["w%d-%s" % (i, "x" * (i % 90)) for i in range(300)]
    ints = ["0", "1", "-1", "127", "-128", "4095", "-4096", "32767", "-32768", "8388607",
            "-8388608", "2147483647", "-2147483648", "9223372036854775807", "-9223372036854775808", "007"]
    yield "string-int8", [["SET", "k", "123"]]
    yield "string-int16", [["SET", "k", "-1000"]]
    yield "string-int32", [["SET", "k", "100000"]]
    yield "string-int64-as-text", [["SET", "k", "12345678901"]]
    yield "string-leading-zero", [["SET", "k", "007"]]
    yield "string-empty", [["SET", "k", ""]]
    yield "string-short", [["SET", "k", "hello"]]
    yield "string-lzf", [["SET", "k", "abc" * 400]]
    yield "string-lzf-long-runs", [["SET", "k", "a" * 5000 + "b" * 300 + "ab" * 700]]
    yield "list-listpack", [["RPUSH", "k"] + ints + ["text", "", "x" * 70, "y" * 5000]]
    yield "list-quicklist-nodes", [["RPUSH", "k"] + long_words + long_words]
    yield "set-intset16", [["SADD", "k", "1", "2", "3", "-5", "300"]]
    yield "set-intset64", [["SADD", "k", "1", "9223372036854775807", "-9223372036854775808", "70000"]]
    yield "set-hashtable", [["SADD", "k", "a", "b", "c", "1"]]
    yield "hash-listpack", [["HSET", "k", "f1", "v1", "n", "42", "neg", "-7", "empty", "", "big", "99999999999"]]
    yield "hash-hashtable", [["HSET", "k"] + [x for i in range(200) for x in ("f%d" % i, "v%d" % (i * 7))]]
    yield "hash-long-value", [["HSET", "k", "f", "z" * 100, "g", "1"]]
    yield "zset-listpack", [["ZADD", "k", "1", "a", "2.5", "b", "-3", "c", "inf", "d", "-inf", "e", "0", "f",
                             "1e-300", "g", "12345678901", "h"]]
    yield "zset-skiplist", [["ZADD", "k"] + [x for i in range(200) for x in (str(i * 0.5 - 20), "m%d" % i)]]
    yield "zset-long-member", [["ZADD", "k", "1", "m" * 100, "2", "n"]]


def main():
    server = Server(find_redis_server())
    out = []
    try:
        c = Conn(server.port)
        for name, setup in cases():
            c.command([b"FLUSHALL"])
            for cmd in setup:
                for arg in cmd:
                    assert arg and " " not in arg or arg == "", (name, arg)
                reply = c.command([a.encode() for a in cmd])
                assert not reply.startswith(b"-"), (name, reply)
            encoding = c.command([b"OBJECT", b"ENCODING", b"k"]).decode().split("\r\n")[1]
            raw = c.command([b"DUMP", b"k"])
            head, _, rest = raw.partition(b"\r\n")
            payload = rest[:int(head[1:])]
            out.append("name %s %s" % (name, encoding))
            for cmd in setup:
                # An empty argument is written as "''".
                out.append("setup " + " ".join(a if a else "''" for a in cmd))
            out.append("dump " + payload.hex())
        version = server.version()
    finally:
        server.stop()
    path = os.path.join(HERE, "dumps.txt")
    with open(path, "w") as f:
        f.write("# DUMP payloads of redis-server %s (tests/data/redis7/record_dumps.py)\n" % version)
        f.write("\n".join(out) + "\n")
    print("%d payloads -> %s" % (sum(1 for _ in cases()), path))


if __name__ == "__main__":
    main()
