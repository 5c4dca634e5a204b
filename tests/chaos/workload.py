"""The chaos workload: lock clients, readers and subscribers, each a thread
that records what it does in the history (FORMATS.md)."""

import json
import socket
import threading
import time

from checkers import REWRITE_MARK
from resp import Conn, NotSent, Lost, ReplyError

# Changes a lock's value in place, the way INCR/APPEND/SETRANGE do (issue 10,
# finding 3), but only while `owner` holds it with `token`: a plain APPEND on a
# lock that had just expired would create a key without expiry that nobody
# could ever acquire. LOCK.INFO before and after, in the same atomic script,
# shows the token the write found and the one it left: {old, new, new owner},
# or 0 if the lock was not held so.
REWRITE_SCRIPT = """
local function info(key)
  local r = redis.call('LOCK.INFO', key)
  if not r then return nil end
  local t = {}
  for i = 1, #r, 2 do t[r[i]] = r[i + 1] end
  return t
end
local before = info(KEYS[1])
if not before or before['owner'] ~= ARGV[1] or before['token'] ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('APPEND', KEYS[1], ARGV[3])
local after = info(KEYS[1])
return {before['token'], after['token'], after['owner']}
"""


class History:
    def __init__(self, path):
        self.f = open(path, "w", buffering=1)
        self.lock = threading.Lock()
        self.next_id = 0
        self.next_process = 0
        self.counts = {"ok": 0, "fail": 0, "unknown": 0}
        self.closed = False

    def new_process(self):
        with self.lock:
            self.next_process += 1
            return self.next_process

    def invoke(self, **fields):
        with self.lock:
            self.next_id += 1
            oid = self.next_id
            if not self.closed:  # a straggling probe after the end leaves no line
                self.f.write(json.dumps(dict(type="invoke", id=oid, t=time.monotonic(), **fields)) + "\n")
            return oid

    def complete(self, oid, kind, **fields):
        with self.lock:
            if self.closed:  # its invoke is there: the operation stays unknown
                return
            self.counts[kind] += 1
            self.f.write(json.dumps(dict(type=kind, id=oid, t=time.monotonic(), **fields)) + "\n")

    def close(self):
        with self.lock:
            self.closed = True
            self.f.close()


class Pool:
    """One connection per node, reopened after any error."""

    def __init__(self, cluster, timeout):
        self.cluster = cluster
        self.timeout = timeout
        self.conns = {}

    def call(self, nid, *args, timeout=None):
        """One command on node `nid`; `timeout` (seconds) replaces the usual
        bound for this call (a blocking command's own wait)."""
        c = self.conns.get(nid)
        if c is None:
            host, port = self.cluster.client_addr(nid)
            c = Conn(host, port, timeout=self.timeout, connect_timeout=0.5)
            self.conns[nid] = c
        try:
            if timeout is not None:
                c.sock.settimeout(timeout)
            reply = c.call(*args)
            if timeout is not None:
                c.sock.settimeout(self.timeout)
            return reply
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
    """ACQUIRE -> work -> fenced write -> RENEW (+ write) or RELEASE, forever.

    Some acquires WAIT (`LOCK.ACQUIRE ... WAIT ms`): queued behind the holder
    and the other waiters, granted by the entry that frees the lock. The
    lease of a grant that took long is known to run only until the request's
    send time + ttl, so after a long wait the client renews at once and
    counts from the renewal.

    Now and then, while holding the lock, it also
    * rewrites the lock key in place (REWRITE_SCRIPT, APPEND to the owner) and
      carries on as the new owner with the new token (`rewrite` in the
      history): a write must give the key a new version (finding 3);
    * renews late, just before the lease's real-time bound (send time + ttl),
      and meanwhile has a separate process read the lock (LOCK.INFO) around
      the lease's end: a read judged at the leader's clock while the renewal
      is in flight sees "free" although the renewal then succeeds (finding 2).
    """

    P_REWRITE = 0.2  # per hold
    P_LATE_RENEW = 0.2  # per renewal
    P_WAIT = 0.4  # per acquire
    WAIT_MS = (200, 4000)

    def __init__(self, name, key, cluster, history, rng, stop, timeout, resource_port, ttl=(1500, 3000)):
        super().__init__(name, cluster, history, rng, stop, timeout)
        self.key = key
        self.resource = Resource(resource_port)
        self.ttl = ttl
        self.pause_for = 0.0  # set by the client-pause nemesis
        self.holding = False
        self.probes = []
        self.renew_identity()

    def renew_identity(self):
        self.process = self.history.new_process()
        self.owner = f"p{self.process}"
        self.rewrites = 0

    def op(self, f, argv, timeout=None, **fields):
        """Runs one command; returns ("ok"|"fail"|"unknown", reply)."""
        nid = self.node()
        oid = self.history.invoke(process=self.process, node=nid, f=f, key=self.key, owner=self.owner, **fields)
        base = dict(process=self.process, node=nid, f=f, key=self.key, owner=self.owner)
        try:
            reply = self.pool.call(nid, *argv, timeout=timeout)
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
            sent = time.monotonic()
            if self.rng.random() < self.P_WAIT:
                wait = self.rng.randint(*self.WAIT_MS)
                # Past its WAIT the server answers within a grace period;
                # a client gives up later than that.
                kind, r = self.op("acquire", ["LOCK.ACQUIRE", self.key, self.owner, ttl, "WAIT", wait],
                                  timeout=self.pool.timeout + wait / 1000, ttl=ttl, wait=wait)
            else:
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
            if time.monotonic() - sent > ttl / 1000 / 3:
                # A long wait: what is known of the lease is too short.
                t = time.monotonic()
                kind, r = self.op("renew", ["LOCK.RENEW", self.key, self.owner, token, ttl], token=token, ttl=ttl)
                if kind != "reply":
                    if kind == "unknown":
                        self.renew_identity()
                    self.holding = False
                    continue
                oid, base, reply = r
                self.history.complete(oid, "ok", token=token, **base)
                sent = t
            self.hold(token, ttl, sent)
            self.holding = False
            self.nap(0.0, 0.2)
        for p in self.probes:
            p.join(10)

    def hold(self, token, ttl, sent):
        """Holds the lease granted by a request sent at `sent` (monotonic)."""
        rounds = self.rng.choice([1, 1, 2, 3])
        rewrite_at = self.rng.randrange(rounds) if self.rng.random() < self.P_REWRITE else None
        for round_no in range(rounds):
            renew = round_no + 1 < rounds
            late = renew and self.rng.random() < self.P_LATE_RENEW
            # A late renewal is sent up to 30 ms before the bound (or just
            # after), so that the leader stamps it just before the lease's end
            # in log time and it commits just after (or it is refused).
            target = sent + ttl / 1000 - self.rng.uniform(-0.005, 0.03)
            if late:
                self.stop.wait(max(0.0, target - 0.03 - time.monotonic()))  # time for the write
            else:
                self.nap(0.0, ttl / 1000 * 0.4)
            if self.pause_for:
                # The revived holder: frozen past its lease, then it carries on
                # as if it still held the lock.
                time.sleep(self.pause_for)
                self.pause_for = 0.0
            if not self.write(token):
                return  # fenced off: someone newer holds it
            if round_no == rewrite_at:
                token = self.rewrite(token)
                if token is None or not self.write(token):
                    return
            if self.stop.is_set():
                break
            if renew:
                if late:
                    self.stop.wait(max(0.0, target - time.monotonic()))
                    # The probe is judged around the lease's end, while the
                    # renewal is (with luck, or a slow network) in flight.
                    self.probe(max(0.0, sent + ttl / 1000 - time.monotonic() + self.rng.uniform(-0.01, 0.05)))
                t = time.monotonic()
                kind, r = self.op("renew", ["LOCK.RENEW", self.key, self.owner, token, ttl], token=token, ttl=ttl)
                if kind == "reply":
                    oid, base, reply = r
                    self.history.complete(oid, "ok", token=token, **base)
                    sent = t
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

    def rewrite(self, token):
        """APPENDs to the lock key held with `token`; returns the key's new
        token (the client is now its new owner), or None if the lock is lost
        or the outcome unknown."""
        self.rewrites += 1
        new_owner = f"{self.owner}{REWRITE_MARK}{self.rewrites}"
        suffix = new_owner[len(self.owner):]
        kind, r = self.op("rewrite", ["EVAL", REWRITE_SCRIPT, 1, self.key, self.owner, token, suffix],
                          token=token, new_owner=new_owner)
        if kind == "unknown":
            self.renew_identity()
        if kind != "reply":
            return None
        oid, base, reply = r
        if reply == 0:
            self.history.complete(oid, "fail", **base)
            return None
        if not (isinstance(reply, list) and len(reply) == 3 and all(isinstance(x, int) for x in reply[:2])):
            self.history.complete(oid, "unknown", error=f"unexpected reply {reply!r}", **base)
            self.renew_identity()
            return None
        old, new, owner = reply
        # The owner is now what the value became (new_owner, unless APPEND
        # misbehaved: then the checkers judge the server's word).
        self.history.complete(oid, "ok", old_token=old, new_token=new, new_owner=owner, **base)
        self.owner = owner
        return new

    def probe(self, delay):
        """LOCK.INFO on the key after `delay` seconds, as a process of its own
        (this client has its renewal outstanding meanwhile)."""
        nid, process = self.node(), self.history.new_process()

        def run():
            try:
                self.stop.wait(delay)
                read_once(self.history, self.cluster, nid, self.key, process, timeout=self.pool.timeout)
            except Exception as e:  # a harness bug: report it, never hide it
                self.error = self.error or f"{self.name} probe: {type(e).__name__}: {e}"
        t = threading.Thread(target=run, name=f"{self.name}-probe", daemon=True)
        t.start()
        self.probes = [p for p in self.probes if p.is_alive()] + [t]

    def write(self, token):
        oid = self.history.invoke(process=self.process, node=0, f="write", key=self.key, owner=self.owner,
                                  token=token, resource=self.key)
        ok = self.resource.write(self.key, token, self.owner)
        self.history.complete(oid, "ok" if ok else "fail", process=self.process, node=0, f="write",
                              key=self.key, owner=self.owner, token=token, resource=self.key)
        return ok


def read_once(history, cluster, nid, key, process, pool=None, timeout=4.0):
    """One LOCK.INFO, recorded as a `read`; returns ("ok", holder, ttl-ms) or
    ("unknown", None, None)."""
    base = dict(process=process, node=nid, f="read", key=key, owner="")
    oid = history.invoke(**base)
    try:
        if pool is not None:
            reply = pool.call(nid, "LOCK.INFO", key)
        else:
            host, port = cluster.client_addr(nid)
            c = Conn(host, port, timeout=timeout, connect_timeout=0.5)
            try:
                reply = c.call("LOCK.INFO", key)
            finally:
                c.close()
    except (NotSent, Lost) as e:
        history.complete(oid, "unknown", error=str(e), **base)
        return "unknown", None, None
    if isinstance(reply, ReplyError) or not (reply is None or isinstance(reply, list)):
        history.complete(oid, "unknown", error=str(reply), **base)
        return "unknown", None, None
    holder, ttl = None, None
    if reply is not None:
        fields = dict(zip(reply[::2], reply[1::2]))
        holder = {"owner": fields.get("owner"), "token": fields.get("token")}
        ttl = fields.get("ttl-ms")
    history.complete(oid, "ok", holder=holder, **base)
    return "ok", holder, ttl


class Reader(Worker):
    """LOCK.INFO on random keys and nodes; after seeing a lease, sometimes
    once more just around its end (where a read judged at the wrong time
    sees "free" too early, finding 2)."""

    def __init__(self, name, keys, cluster, history, rng, stop, timeout):
        super().__init__(name, cluster, history, rng, stop, timeout)
        self.keys = keys
        self.process = history.new_process()

    def body(self):
        follow = None  # (due, key): a read aimed at the end of a lease seen
        while not self.stop.is_set():
            if follow is not None and follow[0] <= time.monotonic() + 0.002:
                key, follow = follow[1], None
            else:
                key = self.rng.choice(self.keys)
            kind, holder, ttl = read_once(self.history, self.cluster, self.node(), key, self.process, pool=self.pool)
            if kind != "ok":
                # An unknown read may still be pending: a new process.
                self.process = self.history.new_process()
                self.nap(0.05, 0.2)
                continue
            if holder is not None and isinstance(ttl, int) and 0 <= ttl < 10_000 and follow is None \
                    and self.rng.random() < 0.5:
                follow = (time.monotonic() + ttl / 1000 + self.rng.uniform(-0.01, 0.03), key)
            pause = self.rng.uniform(0.01, 0.08)
            if follow is not None:
                pause = min(pause, max(0.0, follow[0] - time.monotonic()))
            self.stop.wait(pause)


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
