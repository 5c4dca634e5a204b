"""The chaos workload: lock clients, readers and subscribers, each a thread
that records what it does in the history (FORMATS.md)."""

import json
import socket
import threading
import time

from resp import Conn, NotSent, Lost, ReplyError


class History:
    def __init__(self, path):
        self.f = open(path, "w", buffering=1)
        self.lock = threading.Lock()
        self.next_id = 0
        self.next_process = 0
        self.counts = {"ok": 0, "fail": 0, "unknown": 0}

    def new_process(self):
        with self.lock:
            self.next_process += 1
            return self.next_process

    def invoke(self, **fields):
        with self.lock:
            self.next_id += 1
            oid = self.next_id
            self.f.write(json.dumps(dict(type="invoke", id=oid, t=time.monotonic(), **fields)) + "\n")
            return oid

    def complete(self, oid, kind, **fields):
        with self.lock:
            self.counts[kind] += 1
            self.f.write(json.dumps(dict(type=kind, id=oid, t=time.monotonic(), **fields)) + "\n")

    def close(self):
        self.f.close()


class Pool:
    """One connection per node, reopened after any error."""

    def __init__(self, cluster, timeout):
        self.cluster = cluster
        self.timeout = timeout
        self.conns = {}

    def call(self, nid, *args):
        c = self.conns.get(nid)
        if c is None:
            host, port = self.cluster.client_addr(nid)
            c = Conn(host, port, timeout=self.timeout, connect_timeout=0.5)
            self.conns[nid] = c
        try:
            return c.call(*args)
        except Lost:
            self.drop(nid)
            raise

    def drop(self, nid):
        c = self.conns.pop(nid, None)
        if c:
            c.close()

    def close(self):
        for nid in list(self.conns):
            self.drop(nid)


class Resource:
    """Client of the protected resource process (resource.py)."""

    def __init__(self, port):
        self.port = port
        self.sock = None

    def write(self, res, token, owner):
        for _ in range(2):
            try:
                if self.sock is None:
                    self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                    self.rf = self.sock.makefile("rb")
                self.sock.sendall(f"WRITE {res} {token} {owner}\n".encode())
                line = self.rf.readline().decode().strip()
                if line:
                    return line == "OK"
            except OSError:
                pass
            self.sock = None
        raise RuntimeError("the resource process is not answering")


class Worker(threading.Thread):
    def __init__(self, name, cluster, history, rng, stop, timeout):
        super().__init__(name=name, daemon=True)
        self.cluster = cluster
        self.history = history
        self.rng = rng
        self.stop = stop
        self.pool = Pool(cluster, timeout)
        self.error = None

    def node(self):
        return self.rng.choice(sorted(self.cluster.nodes))

    def run(self):
        try:
            self.body()
        except Exception as e:  # a harness bug: report it, never hide it
            self.error = f"{self.name}: {type(e).__name__}: {e}"
        finally:
            self.pool.close()

    def nap(self, lo, hi):
        self.stop.wait(self.rng.uniform(lo, hi))


class LockClient(Worker):
    """ACQUIRE -> work -> fenced write -> RENEW (+ write) or RELEASE, forever."""

    def __init__(self, name, key, cluster, history, rng, stop, timeout, resource_port, ttl=(1500, 3000)):
        super().__init__(name, cluster, history, rng, stop, timeout)
        self.key = key
        self.resource = Resource(resource_port)
        self.ttl = ttl
        self.pause_for = 0.0  # set by the client-pause nemesis
        self.holding = False
        self.renew_identity()

    def renew_identity(self):
        self.process = self.history.new_process()
        self.owner = f"p{self.process}"

    def op(self, f, argv, **fields):
        """Runs one command; returns ("ok"|"fail"|"unknown", reply)."""
        nid = self.node()
        oid = self.history.invoke(process=self.process, node=nid, f=f, key=self.key, owner=self.owner, **fields)
        base = dict(process=self.process, node=nid, f=f, key=self.key, owner=self.owner)
        try:
            reply = self.pool.call(nid, *argv)
        except NotSent as e:
            self.history.complete(oid, "fail", error=f"not sent: {e}", **base)
            return "fail", None
        except Lost as e:
            self.history.complete(oid, "unknown", error=str(e), **base)
            return "unknown", None
        if isinstance(reply, ReplyError):
            if f == "renew" and str(reply).startswith("LOCKLOST"):
                self.history.complete(oid, "fail", error=str(reply), **base)
                return "fail", reply
            self.history.complete(oid, "unknown", error=str(reply), **base)
            return "unknown", reply
        return "reply", (oid, base, reply)

    def body(self):
        while not self.stop.is_set():
            ttl = self.rng.randint(*self.ttl)
            kind, r = self.op("acquire", ["LOCK.ACQUIRE", self.key, self.owner, ttl], ttl=ttl)
            if kind == "unknown":
                self.renew_identity()
                self.nap(0.05, 0.3)
                continue
            if kind == "fail":
                self.nap(0.05, 0.3)
                continue
            oid, base, reply = r
            if reply is None:
                self.history.complete(oid, "fail", **base)
                self.nap(0.02, 0.3)
                continue
            if not isinstance(reply, int):
                self.history.complete(oid, "unknown", error=f"unexpected reply {reply!r}", **base)
                self.renew_identity()
                continue
            token = reply
            self.history.complete(oid, "ok", token=token, **base)
            self.holding = True
            self.hold(token, ttl)
            self.holding = False
            self.nap(0.0, 0.2)

    def hold(self, token, ttl):
        rounds = self.rng.choice([1, 1, 2, 3])
        for round_no in range(rounds):
            self.nap(0.0, ttl / 1000 * 0.4)
            if self.pause_for:
                # The revived holder: frozen past its lease, then it carries on
                # as if it still held the lock.
                time.sleep(self.pause_for)
                self.pause_for = 0.0
            if not self.write(token):
                return  # fenced off: someone newer holds it
            if self.stop.is_set():
                break
            if round_no + 1 < rounds:
                kind, r = self.op("renew", ["LOCK.RENEW", self.key, self.owner, token, ttl], token=token, ttl=ttl)
                if kind == "reply":
                    oid, base, reply = r
                    self.history.complete(oid, "ok", token=token, **base)
                    continue
                if kind == "unknown":
                    self.renew_identity()
                return
        if self.rng.random() < 0.1:
            # Walk away: the lease expires. (As a new owner: the old one
            # acquiring again would only refresh its own lease.)
            self.renew_identity()
            return
        kind, r = self.op("release", ["LOCK.RELEASE", self.key, self.owner, token], token=token)
        if kind == "reply":
            oid, base, reply = r
            self.history.complete(oid, "ok" if reply == 1 else "fail", token=token, **base)
        elif kind == "unknown":
            self.renew_identity()

    def write(self, token):
        oid = self.history.invoke(process=self.process, node=0, f="write", key=self.key, owner=self.owner,
                                  token=token, resource=self.key)
        ok = self.resource.write(self.key, token, self.owner)
        self.history.complete(oid, "ok" if ok else "fail", process=self.process, node=0, f="write",
                              key=self.key, owner=self.owner, token=token, resource=self.key)
        return ok


class Reader(Worker):
    """LOCK.INFO on random keys and nodes."""

    def __init__(self, name, keys, cluster, history, rng, stop, timeout):
        super().__init__(name, cluster, history, rng, stop, timeout)
        self.keys = keys
        self.process = history.new_process()

    def body(self):
        while not self.stop.is_set():
            key, nid = self.rng.choice(self.keys), self.node()
            base = dict(process=self.process, node=nid, f="read", key=key, owner="")
            oid = self.history.invoke(**base)
            try:
                reply = self.pool.call(nid, "LOCK.INFO", key)
            except (NotSent, Lost) as e:
                self.history.complete(oid, "unknown", error=str(e), **base)
                self.process = self.history.new_process()
                self.nap(0.05, 0.2)
                continue
            if isinstance(reply, ReplyError) or not (reply is None or isinstance(reply, list)):
                self.history.complete(oid, "unknown", error=str(reply), **base)
                self.process = self.history.new_process()
                self.nap(0.05, 0.2)
                continue
            holder = None
            if reply is not None:
                fields = dict(zip(reply[::2], reply[1::2]))
                holder = {"owner": fields.get("owner"), "token": fields.get("token")}
            self.history.complete(oid, "ok", holder=holder, **base)
            self.nap(0.01, 0.08)


class Subscriber(Worker):
    """PSUBSCRIBE to the lock keys' keyspace events; reconnects after drops."""

    def __init__(self, name, sid, prefix, path, cluster, rng, stop):
        super().__init__(name, cluster, None, rng, stop, 1.0)
        self.sid = sid
        self.prefix = prefix
        self.path = path
        self.conn_no = 0
        self.connected = False
        self.lock = threading.Lock()
        self.f = open(path, "a", buffering=1)

    def emit(self, **fields):
        with self.lock:
            self.f.write(json.dumps(dict(t=time.monotonic(), sub=self.sid, **fields)) + "\n")

    def body(self):
        pattern = f"__keyspace@0__:{self.prefix}*"
        while not self.stop.is_set():
            nid = self.node()
            try:
                host, port = self.cluster.client_addr(nid)
                c = Conn(host, port, timeout=1.0, connect_timeout=0.5)
            except NotSent:
                self.nap(0.2, 0.5)
                continue
            self.conn_no += 1
            conn = self.conn_no
            try:
                c.send("PSUBSCRIBE", pattern)
                confirmed = False
                while not self.stop.is_set():
                    try:
                        msg = c.read()
                    except Lost as e:
                        if str(e) == "timeout":
                            continue
                        raise
                    if not isinstance(msg, list):
                        break
                    if msg[0] == "psubscribe":
                        confirmed = True
                        self.connected = True
                        self.emit(conn=conn, node=nid, type="subscribed")
                    elif msg[0] == "pmessage" and confirmed and str(msg[3]).startswith("lock."):
                        key = msg[2].split(":", 1)[1]
                        ev = msg[3][len("lock."):]
                        self.emit(conn=conn, node=nid, type="event", key=key, ev=ev)
            except Lost:
                pass
            finally:
                self.connected = False
                c.close()
                self.emit(conn=conn, node=nid, type="closed")
            self.nap(0.1, 0.4)
