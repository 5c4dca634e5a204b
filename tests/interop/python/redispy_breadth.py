"""redis-py's own API for GEO, BITFIELD, sharded pub/sub, functions, MEMORY and streams against
raftlock, each result compared with what the same calls return from a real
redis-server started here (same keys, same protocol): the library parses
both servers' replies, so any difference in type, order or digits shows.

Run with the venv of the redis-py version under test (5.0 or later):
    python redispy_breadth.py --port P --check-port C --protocol 2|3
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import redis

from harness import CaseFail, Harness, common_args, expect, unique


class RealRedis:
    """A private redis-server on a free 127.0.0.1 port, no persistence."""

    def __init__(self):
        exe = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not os.path.exists(exe):
            raise CaseFail("redis-server is not installed (scripts/deps.sh installs it)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.dir = tempfile.mkdtemp(prefix="breadth-redis-")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                redis.Redis(port=self.port, socket_timeout=1).ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        self.stop()
        raise CaseFail("redis-server did not start on port %d" % self.port)

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def unordered(x):
    """`x` with every list of lists or maps sorted (an order that is Redis's hash order)."""
    if isinstance(x, dict):
        return {k: unordered(v) for k, v in x.items()}
    if isinstance(x, list):
        items = [unordered(i) for i in x]
        if items and all(isinstance(i, (list, dict)) for i in items):
            return sorted(items, key=repr)
        return items
    return x


def main():
    p = common_args(__doc__)
    p.add_argument("--protocol", type=int, choices=(2, 3), required=True)
    args = p.parse_args()
    h = Harness("redis-py %s breadth" % redis.__version__)
    resp = "resp%d" % args.protocol
    real = RealRedis()
    try:
        ours = redis.Redis(host="127.0.0.1", port=args.port, protocol=args.protocol, socket_timeout=15)
        theirs = redis.Redis(host="127.0.0.1", port=real.port, protocol=args.protocol, socket_timeout=15)
        prefix = unique(args.prefix, "breadth-" + resp)

        def same(what, call):
            """`call(client)` on both servers: the same result, or the same error."""
            results = []
            for c in (ours, theirs):
                try:
                    results.append(("ok", call(c)))
                except redis.ResponseError as e:
                    results.append(("error", str(e)))
            expect(results[0] == results[1], "%s: raftlock %r, Redis %r" % (what, results[0], results[1]))
            return results[0][1]

        def geo():
            key, dst = prefix + ":sicily", prefix + ":near"
            places = [13.361389, 38.115556, "Palermo", 15.087269, 37.502669, "Catania",
                      12.758489, 38.788135, "edge1", 13.5, 37.9, "Agrigento-ish"]
            expect(same("geoadd", lambda c: c.geoadd(key, places)) == 4, "GEOADD did not add 4")
            same("geoadd nx ch", lambda c: c.geoadd(key, [13.5, 38.0, "Palermo", 1, 1, "new"], nx=True, ch=True))
            same("geoadd xx", lambda c: c.geoadd(key, [13.4, 38.1, "Palermo"], xx=True, ch=True))
            same("geopos", lambda c: c.geopos(key, "Palermo", "Catania", "nowhere"))
            same("geodist", lambda c: c.geodist(key, "Palermo", "Catania"))
            same("geodist km", lambda c: c.geodist(key, "Palermo", "Catania", unit="km"))
            same("geodist missing", lambda c: c.geodist(key, "Palermo", "nowhere"))
            same("geohash", lambda c: c.geohash(key, "Palermo", "Catania", "nowhere"))
            same("georadius", lambda c: c.georadius(key, 15, 37, 200, unit="km"))
            same("georadius with all", lambda c: c.georadius(
                key, 15, 37, 200, unit="km", withdist=True, withcoord=True, withhash=True, sort="ASC"))
            same("georadius count", lambda c: c.georadius(key, 15, 37, 300, unit="km", count=2, sort="DESC",
                                                           withdist=True))
            same("georadius store", lambda c: c.georadius(key, 15, 37, 200, unit="km", store=dst))
            same("stored", lambda c: c.zrange(dst, 0, -1, withscores=True))
            same("georadius storedist", lambda c: c.georadius(key, 15, 37, 200, unit="km", store_dist=dst))
            same("stored distances", lambda c: c.zrange(dst, 0, -1, withscores=True))
            same("georadiusbymember", lambda c: c.georadiusbymember(key, "Palermo", 100, unit="km",
                                                                     withdist=True, sort="ASC"))
            same("geosearch radius", lambda c: c.geosearch(key, longitude=15, latitude=37, radius=200, unit="km",
                                                            withcoord=True, withdist=True, sort="ASC"))
            same("geosearch box", lambda c: c.geosearch(key, member="Palermo", width=400, height=100, unit="km",
                                                         withhash=True, sort="DESC", count=3))
            same("geosearch any", lambda c: c.geosearch(key, member="Palermo", radius=500, unit="km", count=1,
                                                         any=True))
            same("geosearchstore", lambda c: c.geosearchstore(dst, key, longitude=15, latitude=37, radius=200,
                                                               unit="km", storedist=True))
            same("stored by geosearchstore", lambda c: c.zrange(dst, 0, -1, withscores=True))
            same("geosearch from a missing member", lambda c: c.geosearch(key, member="nowhere", radius=1))
            same("geopos of a missing key", lambda c: c.geopos(prefix + ":none", "a"))
            same("geoadd out of range", lambda c: c.geoadd(key, [200, 100, "x"]))

        def bitfield():
            key = prefix + ":bits"

            def ops(c):
                bf = c.bitfield(key)
                return (bf.set("u8", 0, 255).get("i8", 0).incrby("u4", 4, 10).overflow("SAT")
                        .incrby("i5", 100, 100).overflow("FAIL").incrby("u2", 102, 7)
                        .overflow("WRAP").incrby("i64", 200, -1).get("u63", "#1").execute())
            same("bitfield", ops)
            same("bitfield again", ops)
            same("get", lambda c: c.get(key))
            same("bitfield_ro", lambda c: c.bitfield_ro(key, "u8", 0, items=[("i4", 4), ("u16", 100)]))
            same("bitfield_ro of a missing key", lambda c: c.bitfield_ro(prefix + ":none", "u8", 0))
            same("bitfield bad type", lambda c: c.bitfield(key).get("u64", 0).execute())

        def sharded():
            # A subscriber on the node the checks use (the leader, for the
            # follower target) and one on the node under test. SPUBLISH
            # through the node under test counts the receivers on that node
            # (README); both subscribers get it.
            ch = prefix + ":shard"
            check = redis.Redis(host="127.0.0.1", port=args.check_port, protocol=args.protocol, socket_timeout=15)
            subs = [check.pubsub(), ours.pubsub()]

            def next_message(sub, kind):
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    msg = sub.get_sharded_message(timeout=0.5)
                    if msg is not None:
                        expect(msg["type"] == kind, "expected %s, got %r" % (kind, msg))
                        return msg
                raise CaseFail("no %s within 5 s" % kind)

            try:
                for sub in subs:
                    sub.ssubscribe(ch)
                    next_message(sub, "ssubscribe")
                # Both subscribers are the leader's when one node is under test.
                here = 2 if args.port == args.check_port else 1
                expect(check.pubsub_shardnumsub(ch) == [(ch.encode(), here)],
                       "PUBSUB SHARDNUMSUB %r" % (check.pubsub_shardnumsub(ch),))
                expect(ch.encode() in check.pubsub_shardchannels(), "PUBSUB SHARDCHANNELS lacks the channel")
                expect(ours.publish(ch, "plain") == 0, "PUBLISH reached a shard subscriber")
                expect(ours.spublish(ch, "hello") == here, "SPUBLISH did not count the subscribers of the node it was sent to")
                for sub in subs:
                    msg = next_message(sub, "smessage")
                    expect(msg["data"] == b"hello" and msg["channel"] == ch.encode(), "smessage %r" % (msg,))
                for sub in subs:
                    sub.sunsubscribe(ch)
            finally:
                for sub in subs:
                    sub.close()

        def functions():
            lib = "lib_" + prefix.replace(":", "_").replace("-", "_")
            code = ("#!lua name=%s\n"
                    "redis.register_function('%s_set', function(keys, args) return redis.call('SET', keys[1], args[1]) end)\n"
                    "redis.register_function{function_name='%s_get', callback=function(keys) return redis.call('GET', keys[1]) end,"
                    " flags={'no-writes'}, description='reads'}\n") % (lib, lib, lib)
            key = prefix + ":fkey"
            same("function_load", lambda c: c.function_load(code))
            same("function_load again", lambda c: c.function_load(code))
            same("fcall", lambda c: c.fcall(lib + "_set", 1, key, "v"))
            same("fcall_ro", lambda c: c.fcall_ro(lib + "_get", 1, key))
            same("fcall_ro of a writer", lambda c: c.fcall_ro(lib + "_set", 1, key, "w"))
            # Redis lists a library's functions in its hash table's order.
            same("function_list", lambda c: unordered(c.function_list(library=lib, withcode=True)))
            same("fcall of a missing function", lambda c: c.fcall(lib + "_none", 0))
            # Redis's payload (its code compressed) restores here.
            payload = theirs.function_dump()
            ours.function_delete(lib)
            ours.function_restore(payload)
            expect(ours.fcall_ro(lib + "_get", 1, key) == b"v", "a function restored from Redis's payload")
            stats = ours.function_stats()
            expect(isinstance(stats, (dict, list)) and b"engines" in (stats if isinstance(stats, list) else
                   [k if isinstance(k, bytes) else k.encode() for k in stats]), "FUNCTION STATS %r" % (stats,))
            same("function_delete", lambda c: c.function_delete(lib))
            same("function_delete again", lambda c: c.function_delete(lib))

        def memory():
            stats = ours.memory_stats()
            expect(isinstance(stats, dict) and stats.get("keys.count", -1) >= 0
                   and stats.get("total.allocated", 0) > 0, "MEMORY STATS %r" % (stats,))
            theirs_keys = set(theirs.memory_stats().keys())
            expect(set(stats.keys()) == theirs_keys,
                   "MEMORY STATS fields differ: %r" % (set(stats.keys()) ^ theirs_keys,))
            expect(ours.memory_purge() is True, "MEMORY PURGE did not answer OK")

        def streams():
            # Explicit IDs, so both servers give the same ones.
            s, g = prefix + ":stream", "grp"
            for i in range(1, 6):
                same("xadd %d" % i, lambda c, i=i: c.xadd(s, {"n": str(i), "sq": str(i * i)}, id="%d-0" % i))
            same("xadd maxlen", lambda c: c.xadd(s, {"n": "6"}, id="6-0", maxlen=5, approximate=False))
            same("xadd smaller id", lambda c: c.xadd(s, {"n": "0"}, id="1-0"))
            same("xlen", lambda c: c.xlen(s))
            same("xrange", lambda c: c.xrange(s, "-", "+"))
            same("xrange exclusive", lambda c: c.xrange(s, "(2-0", "+", count=2))
            same("xrevrange", lambda c: c.xrevrange(s, "+", "-", count=3))
            same("xread", lambda c: c.xread({s: "3-0"}, count=2))
            same("xgroup_create", lambda c: c.xgroup_create(s, g, id="0"))
            same("xgroup_create again", lambda c: c.xgroup_create(s, g, id="0"))
            same("xreadgroup", lambda c: c.xreadgroup(g, "alice", {s: ">"}, count=2))
            same("xreadgroup noack", lambda c: c.xreadgroup(g, "bob", {s: ">"}, count=1, noack=True))
            same("xreadgroup history", lambda c: c.xreadgroup(g, "alice", {s: "0"}))
            same("xpending", lambda c: c.xpending(s, g))
            same("xack", lambda c: c.xack(s, g, "2-0", "9-0"))
            same("xclaim justid", lambda c: c.xclaim(s, g, "carol", 0, ["3-0"], justid=True))
            same("xautoclaim", lambda c: c.xautoclaim(s, g, "dave", 0, start_id="0-0", count=5, justid=True))
            same("xinfo_groups", lambda c: c.xinfo_groups(s))
            same("xinfo_stream", lambda c: c.xinfo_stream(s))
            same("xdel", lambda c: c.xdel(s, "4-0", "40-0"))
            same("xinfo_groups after xdel", lambda c: c.xinfo_groups(s))
            same("xtrim minid", lambda c: c.xtrim(s, minid="5-0", approximate=False))
            same("xgroup_createconsumer", lambda c: c.xgroup_createconsumer(s, g, "erin"))
            same("xgroup_delconsumer", lambda c: c.xgroup_delconsumer(s, g, "dave"))
            same("xgroup_setid", lambda c: c.xgroup_setid(s, g, "0"))
            same("xgroup_destroy", lambda c: c.xgroup_destroy(s, g))
            same("xread of a string", lambda c: c.set(prefix + ":str", "x") and c.xread({prefix + ":str": "0"}))
            # A reader blocked on the node under test wakes for an XADD made
            # through another connection (the leader's, for a follower).
            check = redis.Redis(host="127.0.0.1", port=args.check_port, protocol=args.protocol, socket_timeout=15)
            b = prefix + ":blocked"
            ours.xgroup_create(b, g, id="$", mkstream=True)
            results = {}

            def reader(name, call):
                try:
                    results[name] = call()
                except Exception as e:  # reported below
                    results[name] = e

            threads = [threading.Thread(target=reader, args=("xread", lambda: ours.xread({b: "$"}, block=10000))),
                       threading.Thread(target=reader, args=("xreadgroup", lambda: redis.Redis(
                           host="127.0.0.1", port=args.port, protocol=args.protocol, socket_timeout=15).xreadgroup(
                           g, "c", {b: ">"}, block=10000)))]
            for t in threads:
                t.start()
            time.sleep(0.5)
            added = check.xadd(b, {"k": "v"})
            for t in threads:
                t.join(15)
            for name in ("xread", "xreadgroup"):
                got = results.get(name)
                flat = got if isinstance(got, list) else list(got.items()) if isinstance(got, dict) else None
                expect(flat and repr(added) in repr(flat), "%s after XADD %r: %r" % (name, added, got))
            # XGROUP DESTROY answers a blocked XREADGROUP with NOGROUP (as Redis).
            blocked = threading.Thread(target=reader, args=("destroyed", lambda: redis.Redis(
                host="127.0.0.1", port=args.port, protocol=args.protocol, socket_timeout=15).xreadgroup(
                g, "c", {b: ">"}, block=10000)))
            blocked.start()
            time.sleep(0.5)
            check.xgroup_destroy(b, g)
            blocked.join(15)
            got = results.get("destroyed")
            expect(isinstance(got, redis.ResponseError) and str(got).startswith("NOGROUP"),
                   "a blocked XREADGROUP after XGROUP DESTROY: %r" % (got,))
            # And DEL of its stream with UNBLOCKED.
            ours.xgroup_create(b, g, id="$")
            blocked = threading.Thread(target=reader, args=("deleted", lambda: redis.Redis(
                host="127.0.0.1", port=args.port, protocol=args.protocol, socket_timeout=15).xreadgroup(
                g, "c", {b: ">"}, block=10000)))
            blocked.start()
            time.sleep(0.5)
            check.delete(b)
            blocked.join(15)
            got = results.get("deleted")
            expect(isinstance(got, redis.ResponseError) and str(got).startswith("UNBLOCKED"),
                   "a blocked XREADGROUP after DEL of its stream: %r" % (got,))
            start = time.monotonic()
            expect(ours.xread({b: "$"}, block=300) in ([], {}, None), "XREAD BLOCK 300 with nothing new")
            expect(ours.xread({b: "$"}, block=300) in ([], {}, None), "XREAD BLOCK 300 of a missing stream")
            expect(time.monotonic() - start >= 0.25, "XREAD BLOCK 300 returned early")

        for name, fn in [("geo", geo), ("bitfield", bitfield), ("sharded pub/sub", sharded), ("functions", functions),
                         ("memory", memory), ("streams", streams)]:
            h.case("%s %s" % (resp, name), fn)
    finally:
        real.stop()
    return 1 if h.failed else 0


if __name__ == "__main__":
    sys.exit(main())
