"""Tests for the chaos checkers on synthetic run directories.

    python3 -m unittest tests/chaos/test_checkers.py      (from the repository root)

`Sim` is a small simulated raftlock (leases in log time, tokens = log indexes,
lazy and background expiry) with clients that sometimes time out: its runs are
correct by construction, so every checker must pass them. The violations are
planted by hand.
"""

import heapq
import json
import os
import random
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checkers  # noqa: E402
import wgl  # noqa: E402


def write_jsonl(path, records):
    with open(path, "w") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")


def write_run(d, history=None, audit=None, resource=None, notify=None, final=None):
    """Writes the given files (audit: {node: [records]}) into directory d."""
    if history is not None:
        write_jsonl(os.path.join(d, "history.jsonl"), history)
    for node, recs in (audit or {}).items():
        write_jsonl(os.path.join(d, "audit-%s.jsonl" % node), recs)
    if resource is not None:
        write_jsonl(os.path.join(d, "resource.jsonl"), resource)
    if notify is not None:
        write_jsonl(os.path.join(d, "notify.jsonl"), notify)
    if final is not None:
        with open(os.path.join(d, "final.json"), "w") as fh:
            json.dump(final, fh)


class Sim:
    """A correct lock service and its clients; `run(d)` writes every run file."""

    def __init__(self, seed, keys=("k1", "k2"), procs_per_key=3, n_ops=400, p_unknown=0.02,
                 p_error=0.02, ttl=(100, 300), history_lt=True, lat=.01, readers=1, p_wait=.3):
        self.rnd = random.Random(seed)
        self.p_wait = p_wait
        self.waiters = {k: [] for k in keys}  # key -> [{op, deadline, delay}], first in line first
        self.keys, self.n_ops, self.p_unknown, self.p_error = keys, n_ops, p_unknown, p_error
        self.ttl, self.history_lt, self.lat = ttl, history_lt, lat
        self.index, self.lt = 0, 0
        self.locks = {k: None for k in keys}  # key -> [owner, token, exp]
        self.audit = []  # (apply time, record)
        self.resource, self.highest = [], {}
        self.history = []
        self.queue, self.seq = [], 0
        self.next_id, self.next_pid, self.invoked = 0, 0, 0
        self.procs = {}
        self.push(100.05, "tick", None)
        for key in keys:
            for _ in range(procs_per_key):
                self.spawn(key, 100.0 + self.rnd.uniform(0, 0.01))
            for _ in range(readers):  # LOCK.INFO only, many of them "free"
                self.spawn(key, 100.0 + self.rnd.uniform(0, 0.01), reader=True)

    # -- the server
    def entry(self, t):
        self.index += 1
        self.lt = max(self.lt, int(t * 1000))
        return self.index, self.lt

    def record(self, t, i, lt, ev, key, owner, token, ttl=0, exp=0):
        self.audit.append((t, {"node": 1, "i": i, "lt": lt, "ev": ev, "key": key, "owner": owner,
                               "token": token, "ttl": ttl, "exp": exp}))

    def live(self, t, i, lt, key, hand_off=True):
        lock = self.locks[key]
        if lock is not None and lt > lock[2]:
            self.record(t, i, lt, "expired", key, lock[0], lock[1])
            self.locks[key] = lock = None
            if hand_off:
                self.hand_off(t, i, lt, key)
        return self.locks[key]

    def finish(self, t, w, status, extra):
        self.push(t + w["delay"], "complete", (w["op"], status, extra))

    def hand_off(self, t, i, lt, key):
        """In entry i, a freed lock goes to its first waiter whose deadline has
        not passed, with a token of its own (above i, as the server's)."""
        while self.waiters[key] and self.locks[key] is None:
            w = self.waiters[key].pop(0)
            op = w["op"]
            if lt > w["deadline"]:
                self.record(t, i, lt, "timedout", key, op["owner"], 0)
                self.finish(t, w, "fail", {})
                continue
            self.index += 1
            token = self.index
            self.locks[key] = [op["owner"], token, lt + op["ttl"]]
            self.record(t, i, lt, "acquired", key, op["owner"], token, op["ttl"], lt + op["ttl"])
            self.record(t, i, lt, "handoff", key, op["owner"], token)
            self.finish(t, w, "ok", {"index": i, "lt": lt, "token": token})

    def expire_tick(self, t):
        now = max(self.lt, int(t * 1000))
        due = [k for k, l in self.locks.items() if l is not None and now > l[2]]
        late = [(k, w) for k, ws in self.waiters.items() for w in ws if now > w["deadline"]]
        if due or late:
            i, lt = self.entry(t)
            for k, w in late:
                self.waiters[k].remove(w)
                self.record(t, i, lt, "timedout", k, w["op"]["owner"], 0)
                self.finish(t, w, "fail", {})
            # Every record of an entry before the next entry's (the handoffs).
            for k in due:
                self.live(t, i, lt, k)

    def apply(self, t, op):
        key, owner, f = op["key"], op["owner"], op["f"]
        if f == "read":
            lock = self.locks[key]
            now = max(self.lt, int(t * 1000))
            held = lock is not None and now <= lock[2]
            return "ok", {"holder": {"owner": lock[0], "token": lock[1]} if held else None}
        if f == "write":
            res, tok = key, op["token"]
            high = self.highest.get(res)
            ok = high is None or tok >= high
            self.resource.append({"t": t, "resource": res, "token": tok, "owner": owner,
                                  "accepted": ok, "highest": high})
            if ok:
                self.highest[res] = tok
            return ("ok" if ok else "fail"), {}
        i, lt = self.entry(t)
        lock = self.live(t, i, lt, key)
        info = {"index": i, "lt": lt}
        if f == "acquire":
            ttl = op["ttl"]
            if lock is None:
                self.locks[key] = [owner, i, lt + ttl]
                self.record(t, i, lt, "acquired", key, owner, i, ttl, lt + ttl)
                return "ok", dict(info, token=i)
            if lock[0] == owner:
                lock[2] = lt + ttl
                self.record(t, i, lt, "renewed", key, owner, lock[1], ttl, lt + ttl)
                return "ok", dict(info, token=lock[1])
            if op.get("wait"):
                # Queued: answered by the entry that hands the lock over, or
                # by the one that ends the wait.
                deadline = lt + op["wait"]
                self.waiters[key].append({"op": op, "deadline": deadline, "delay": None})
                self.record(t, i, lt, "queued", key, owner, 0, ttl, deadline)
                return None, {}
            return "fail", {}
        match = lock is not None and lock[0] == owner and lock[1] == op["token"]
        if not match:
            return "fail", ({"error": "LOCKLOST not held"} if f == "renew" else {})
        if f == "rewrite":
            # APPEND to the owner: a new value, a new version, the same expiry,
            # and no lease event.
            lock[0], lock[1] = op["new_owner"], i
            return "ok", {"old_token": op["token"], "new_token": i}
        if f == "renew":
            lock[2] = lt + op["ttl"]
            self.record(t, i, lt, "renewed", key, owner, lock[1], op["ttl"], lt + op["ttl"])
        else:
            self.locks[key] = None
            self.record(t, i, lt, "released", key, owner, lock[1])
            self.hand_off(t, i, lt, key)
        return "ok", info

    # -- the clients
    def spawn(self, key, t, reader=False):
        pid = self.next_pid
        self.next_pid += 1
        self.procs[pid] = {"key": key, "owner": "" if reader else "c%d" % pid, "held": None, "last": None,
                           "reader": reader}
        self.push(t, "invoke", pid)

    def push(self, t, kind, payload):
        self.seq += 1
        heapq.heappush(self.queue, (t, self.seq, kind, payload))

    def choose(self, p):
        r = self.rnd.random()
        if p["reader"]:
            f = "read"
        elif p["held"] is not None:
            f = "renew" if r < .35 else "write" if r < .5 else "rewrite" if r < .55 else "release" if r < .75 \
                else "read" if r < .85 else "acquire"
        else:
            f = "acquire" if r < .7 else "read" if r < .85 else ("write" if p["last"] is not None else "acquire")
        op = {"type": "invoke", "id": self.next_id, "f": f, "key": p["key"], "owner": p["owner"]}
        self.next_id += 1
        if f in ("acquire", "renew"):
            op["ttl"] = self.rnd.randint(*self.ttl)
        if f == "acquire" and self.rnd.random() < self.p_wait:
            op["wait"] = self.rnd.randint(20, 400)
        if f in ("renew", "release", "rewrite"):
            op["token"] = p["held"]
        if f == "rewrite":
            op["new_owner"] = "%s+w%d" % (p["owner"], op["id"])
        if f == "write":
            op["token"], op["resource"] = (p["held"] if p["held"] is not None else p["last"]), p["key"]
        return op

    def run(self, d=None, nodes=3):
        rnd = self.rnd
        while self.queue:
            t, _, kind, x = heapq.heappop(self.queue)
            if kind == "invoke":
                if self.invoked >= self.n_ops:
                    continue
                self.invoked += 1
                p = self.procs[x]
                op = self.choose(p)
                op.update(process=x, node=rnd.randint(1, nodes), t=t)
                self.history.append(op)
                r = rnd.random() if "wait" not in op else 1.0
                if r < self.p_unknown:
                    if rnd.random() < .5:
                        self.push(t + rnd.uniform(.0005, .3), "apply", (op, None))
                    done = t + .05
                    self.history.append({"type": "unknown", "id": op["id"], "process": x, "node": op["node"],
                                         "f": op["f"], "key": op["key"], "owner": op["owner"], "t": done,
                                         "error": "timeout"})
                    del self.procs[x]
                    self.spawn(p["key"], done + rnd.uniform(0, .02), reader=p["reader"])
                elif r < self.p_unknown + self.p_error and op["f"] in ("acquire", "renew", "release"):
                    self.push(t + rnd.uniform(.0005, self.lat), "complete", (op, "fail", {"error": "CLUSTERDOWN no leader"}))
                else:
                    self.push(t + rnd.uniform(.0005, self.lat), "apply", (op, rnd.uniform(.0005, self.lat)))
            elif kind == "apply":
                op, delay = x
                status, extra = self.apply(t, op)
                if status is None:  # a queued WAIT: answered later, after `delay`
                    self.waiters[op["key"]][-1]["delay"] = delay
                elif delay is not None:
                    self.push(t + delay, "complete", (op, status, extra))
            elif kind == "complete":
                op, status, extra = x
                line = {"type": status, "id": op["id"], "process": op["process"], "node": op["node"],
                        "f": op["f"], "key": op["key"], "owner": op["owner"], "t": t}
                for k, val in extra.items():
                    if k in ("index", "lt") and not (self.history_lt and status == "ok"):
                        continue
                    line[k] = val
                self.history.append(line)
                p = self.procs[op["process"]]
                if op["f"] == "acquire" and status == "ok":
                    p["held"] = p["last"] = extra["token"]
                elif op["f"] == "rewrite" and status == "ok":
                    p["owner"], p["held"], p["last"] = op["new_owner"], extra["new_token"], extra["new_token"]
                elif op["f"] == "release" or (status == "fail" and op["f"] in ("acquire", "renew", "rewrite")):
                    p["held"] = None
                pause = rnd.uniform(.2, .5) if rnd.random() < .05 else rnd.uniform(0, .03)
                self.push(t + pause, "invoke", op["process"])
            elif kind == "tick":
                self.expire_tick(t)
                if self.queue or any(l is not None for l in self.locks.values()) or any(self.waiters.values()):
                    self.push(t + .05, "tick", None)
        if d is not None:
            self.write(d, nodes)
        return self

    def write(self, d, nodes):
        t_end = max(t for t, _ in self.audit) + 1 if self.audit else 101.0
        # healing: a lease event every live subscriber must see
        i, lt = self.entry(t_end)
        heal_tok = i
        self.record(t_end, i, lt, "acquired", "heal", "healer", i, 1000, lt + 1000)
        i, lt = self.entry(t_end + .01)
        self.record(t_end + .01, i, lt, "released", "heal", "healer", heal_tok)
        heal = [{"key": "heal", "ev": "acquired", "token": heal_tok, "t": t_end - .001},
                {"key": "heal", "ev": "released", "token": heal_tok, "t": t_end + .009}]
        recs = [r for _, r in self.audit]
        audit = {}
        for n in range(1, nodes + 1):
            out = [{"boot": True, "node": n, "pid": 1000 + n, "unix_ms": 0}]
            out += [dict(r, node=n) for r in recs]
            audit[n] = out
        if nodes >= 2 and len(recs) > 10:  # node 2 restarts and re-applies from a snapshot
            cut = replay = len(recs) * 2 // 3  # it may die in the middle of an entry,
            while recs[replay]["i"] == recs[replay - 1]["i"]:  # but replays whole entries
                replay -= 1
            replay //= 2
            while replay and recs[replay]["i"] == recs[replay - 1]["i"]:
                replay -= 1
            audit[2] = audit[2][:cut + 1] + [{"boot": True, "node": 2, "pid": 2000, "unix_ms": 1}] + \
                [dict(r, node=2) for r in recs[replay:]]
        # subscriber 1 stays connected to node 1; subscriber 2 drops once
        t0, mid = 100.0, (100.0 + t_end) / 2
        notify = [{"t": t0, "sub": 1, "conn": 1, "node": 1, "type": "subscribed"},
                  {"t": t0, "sub": 2, "conn": 1, "node": 2, "type": "subscribed"}]
        dropped = False
        for t, r in self.audit:
            if not dropped and t > mid:
                notify.append({"t": mid, "sub": 2, "conn": 1, "node": 2, "type": "closed"})
                notify.append({"t": mid + .1, "sub": 2, "conn": 2, "node": 3, "type": "subscribed"})
                dropped = True
            conns = [(1, 1)] + ([(2, 1)] if not dropped else ([(2, 2)] if t > mid + .1 else []))
            for sub, conn in conns:
                notify.append({"t": t, "sub": sub, "conn": conn, "node": 1, "type": "event",
                               "key": r["key"], "ev": r["ev"]})
        final = {"nodes": list(range(1, nodes + 1)),
                 "digests": {str(n): [self.index, "9f00"] for n in range(1, nodes + 1)},
                 "probe_token": self.index + 3, "heal_events": heal, "live_subs": [1, 2]}
        write_run(d, history=self.history, audit=audit, resource=self.resource, notify=notify, final=final)
        if nodes >= 3:  # node 3 was killed in the middle of a line
            with open(os.path.join(d, "audit-3.jsonl"), "a") as fh:
                fh.write('{"node": 3, "i": 99999, "lt": 1, "ev": "acq')


def naive_enrich(history, audit_records):
    """What run.py's enrich_history does: index/lt of the one audit record of
    (ev, key, owner, token), so a refreshing acquire gets its grant's record."""
    ev_of = {"acquire": "acquired", "release": "released", "renew": "renewed"}
    recs = {}
    for r in audit_records:
        recs.setdefault((r["ev"], r["key"], r["owner"], r["token"]), {})[r["i"]] = r["lt"]
    out = []
    for line in history:
        line = {k: v for k, v in line.items() if k not in ("index", "lt")}
        if line["type"] == "ok" and line["f"] in ev_of:
            tok = line.get("token")
            if tok is None:
                tok = next((l.get("token") for l in history if l["id"] == line["id"] and l["type"] == "invoke"), None)
            found = recs.get((ev_of[line["f"]], line["key"], line["owner"], tok))
            if found and len(found) == 1:
                (line["index"], line["lt"]), = found.items()
        out.append(line)
    return out


class Hist:
    """Hand-written histories: h.op(process, f, t0, t1, status, ...)."""

    def __init__(self, key="k"):
        self.key, self.lines, self.n = key, [], 0

    def op(self, process, f, t0, t1, status, owner=None, key=None, ttl=1000, **done):
        self.n += 1
        owner = owner or "o%d" % process
        inv = {"type": "invoke", "id": self.n, "process": process, "node": 1, "f": f,
               "key": key or self.key, "owner": owner, "t": t0}
        if f in ("acquire", "renew"):
            inv["ttl"] = ttl
        for k in ("token", "resource", "new_owner"):
            if k in done and f in ("renew", "release", "write", "rewrite"):
                inv[k] = done.pop(k)
        end = dict(inv, type=status, t=t1 if t1 is not None else t0 + 5)
        for k in ("ttl", "token", "resource", "new_owner"):
            end.pop(k, None)
        end.update(done)
        self.lines += [inv, end]
        return self

    def sorted(self):
        return sorted(self.lines, key=lambda l: l["t"])


def rec(i, lt, ev, owner, token, key="k", ttl=1000, node=1):
    exp = lt + ttl if ev in ("acquired", "renewed") else 0
    return {"node": node, "i": i, "lt": lt, "ev": ev, "key": key, "owner": owner, "token": token,
            "ttl": ttl if exp else 0, "exp": exp}


class Base(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def verdicts(self):
        return {v.name: v for v in checkers.run_all(self.dir)}

    def verdict(self, name):
        return self.verdicts()[name]

    def assertFails(self, name):
        """A violation, not merely missing evidence."""
        v = self.verdict(name)
        self.assertFalse(v.ok, checkers.format_verdict(v))
        self.assertTrue(v.problems, checkers.format_verdict(v))
        self.assertGreater(v.violations, 0)
        return v

    def assertPasses(self, name):
        v = self.verdict(name)
        self.assertTrue(v.ok, checkers.format_verdict(v))
        self.assertFalse(v.missing)
        return v

    def assertNoViolation(self, name):
        """No violation found, whatever evidence is missing."""
        v = self.verdict(name)
        self.assertFalse(v.problems, checkers.format_verdict(v))
        return v

    def assertLacks(self, name, text):
        """Missing evidence (containing `text`) makes the checker fail."""
        v = self.verdict(name)
        self.assertFalse(v.ok, checkers.format_verdict(v))
        self.assertTrue(any(text in m for m in v.missing), checkers.format_verdict(v))
        return v


class CleanRuns(Base):
    def test_simulated_runs_pass_every_checker(self):
        for seed, history_lt in ((1, True), (2, False), (3, False)):
            with self.subTest(seed=seed):
                d = os.path.join(self.dir, str(seed))
                os.mkdir(d)
                Sim(seed, history_lt=history_lt, p_unknown=.05, n_ops=700).run(d)
                vs = checkers.run_all(d)
                for v in vs:
                    self.assertTrue(v.ok and not v.missing, checkers.format_verdict(v))
                by = {v.name: v for v in vs}
                self.assertGreater(by["no-overlap"].counts["grants"], 20)
                self.assertGreater(by["no-overlap"].counts["expiries"], 0)
                self.assertGreater(by["linearizable"].counts["unknown"], 0)
                self.assertGreater(by["notifications"].counts["events"], 50)
                self.assertGreater(by["rewrites"].counts["ok"], 0)
                self.assertGreater(by["no-overlap"].counts["rewritten"], 0)
                self.assertGreater(by["log-time"].counts["timed"], 50)
                if not history_lt:  # log times came from the audit
                    self.assertGreater(by["linearizable"].counts["with_lt"], 50)

    def test_randomized_correct_runs_pass_every_checker(self):
        # The simulated server is correct: no checker may flag it, whatever
        # the timing, ttl, concurrency and share of timed-out requests.
        for seed in range(40):
            rnd = random.Random(seed)
            with self.subTest(seed=seed):
                d = os.path.join(self.dir, "r%d" % seed)
                os.mkdir(d)
                Sim(seed, procs_per_key=rnd.choice([2, 3, 4]), n_ops=rnd.choice([300, 600]),
                    p_unknown=rnd.choice([.01, .05, .15, .3]), ttl=rnd.choice([(100, 300), (20, 60), (300, 900)]),
                    lat=rnd.choice([.002, .01, .05]), history_lt=seed % 2 == 0, readers=rnd.choice([0, 1, 3])).run(d)
                for v in checkers.run_all(d):
                    self.assertTrue(v.ok, checkers.format_verdict(v))

    def test_many_small_runs_with_many_unknowns_are_linearizable(self):
        for seed in range(10, 40):
            sim = Sim(seed, keys=("k",), procs_per_key=3, n_ops=150, p_unknown=.12,
                      history_lt=seed % 3 == 0).run()
            audit = [r for _, r in sim.audit]
            history = naive_enrich(sim.history, audit) if seed % 3 == 1 else sim.history
            with self.subTest(seed=seed):
                write_run(self.dir, history=history, audit={1: audit})
                self.assertPasses("linearizable")

    def test_missing_files_fail(self):
        # Issue 10 §7: no evidence is a failure, never a pass (but not a violation).
        vs = checkers.run_all(self.dir)
        self.assertEqual(len(vs), len(checkers.CHECKERS))
        for v in vs:
            self.assertFalse(v.ok, checkers.format_verdict(v))
            self.assertTrue(v.missing, checkers.format_verdict(v))
            self.assertEqual(v.violations, 0)
        self.assertTrue(checkers.format_verdict(vs[0]).startswith("fencing: FAIL ()\n  - missing evidence: "))

    def test_a_crashing_checker_fails_without_a_violation(self):
        # A crash is a harness error: chaos-planted.sh must not count it as a catch.
        def crash(run):
            raise ValueError("malformed line")
        saved = checkers.CHECKERS
        checkers.CHECKERS = [("fencing", crash)]
        try:
            v = checkers.run_all(self.dir)[0]
        finally:
            checkers.CHECKERS = saved
        self.assertFalse(v.ok)
        self.assertEqual(v.violations, 0, checkers.format_verdict(v))
        self.assertTrue(any("checker crashed: ValueError: malformed line" in m for m in v.missing), checkers.format_verdict(v))

    def test_each_missing_file_fails_the_checkers_that_read_it(self):
        names = {"history": ["fencing", "no-lost-grants", "linearizable", "log-time", "locklost", "rewrites", "client-overlap",
                             "waits"],
                 "audit": ["fencing", "no-overlap", "no-lost-grants", "linearizable", "log-time", "locklost",
                           "rewrites", "notifications", "waits"],
                 "resource": ["fencing", "client-overlap"],
                 "notify": ["notifications"],
                 "final": ["no-lost-grants", "notifications", "convergence"]}
        for missing, failing in names.items():
            with self.subTest(missing=missing):
                d = os.path.join(self.dir, missing)
                os.mkdir(d)
                Sim(6, n_ops=200).run(d)
                for f in os.listdir(d):
                    if f.startswith(missing):
                        os.unlink(os.path.join(d, f))
                for v in checkers.run_all(d):
                    if v.name in failing:
                        self.assertTrue(v.missing and not v.ok, checkers.format_verdict(v))
                    else:
                        self.assertTrue(v.ok, checkers.format_verdict(v))

    def test_format(self):
        v = checkers.Verdict("x", counts={"a": 1})
        self.assertEqual(checkers.format_verdict(v), "x: PASS (a=1)")
        v.problem("bad thing")
        self.assertEqual(checkers.format_verdict(v), "x: FAIL (a=1, violations=1)\n  - bad thing")
        v.lacks("no file")
        self.assertEqual(checkers.format_verdict(v),
                         "x: FAIL (a=1, violations=1)\n  - missing evidence: no file\n  - bad thing")


class Fencing(Base):
    def setUp(self):
        super().setUp()
        self.audit = {1: [rec(5, 100, "acquired", "a", 5), rec(9, 200, "acquired", "b", 9, key="k2"),
                          rec(12, 1200, "acquired", "c", 12)]}

    def test_in_order_passes(self):
        res = [{"t": 1, "resource": "k", "token": 5, "owner": "a", "accepted": True, "highest": None},
               {"t": 2, "resource": "k", "token": 12, "owner": "c", "accepted": True, "highest": 5},
               {"t": 3, "resource": "k", "token": 5, "owner": "a", "accepted": False, "highest": 12}]
        write_run(self.dir, history=[], audit=self.audit, resource=res)
        v = self.assertPasses("fencing")
        self.assertEqual((v.counts["accepted"], v.counts["rejected"]), (2, 1))

    def test_lower_token_accepted_fails(self):
        res = [{"t": 1, "resource": "k", "token": 12, "owner": "c", "accepted": True, "highest": None},
               {"t": 2, "resource": "k", "token": 5, "owner": "a", "accepted": True, "highest": 12}]
        write_run(self.dir, history=[], audit=self.audit, resource=res)
        self.assertIn("after token 12", self.assertFails("fencing").problems[0])

    def test_token_never_granted_for_that_key_fails(self):
        res = [{"t": 1, "resource": "k", "token": 9, "owner": "b", "accepted": True, "highest": None}]
        write_run(self.dir, history=[], audit=self.audit, resource=res)
        self.assertFails("fencing")

    def test_lower_token_planted_in_a_simulated_run(self):
        sim = Sim(4).run(self.dir)
        acc = [w for w in sim.resource if w["accepted"]]
        top = acc[-1]
        low = next(w for w in acc if w["token"] < top["token"] and w["resource"] == top["resource"])
        sim.resource.append(dict(low, t=top["t"] + 1, accepted=True, highest=top["token"]))
        write_run(self.dir, resource=sim.resource)
        self.assertFails("fencing")


class NoOverlap(Base):
    def test_grant_after_expiry_passes(self):
        write_run(self.dir, audit={1: [rec(5, 100, "acquired", "a", 5), rec(6, 600, "renewed", "a", 5),
                                       rec(8, 1601, "expired", "a", 5), rec(8, 1601, "acquired", "b", 8),
                                       rec(9, 1700, "released", "b", 8)],
                                   2: [{"boot": True, "node": 2, "pid": 1, "unix_ms": 0},
                                       rec(5, 100, "acquired", "a", 5, node=2),
                                       rec(8, 1601, "expired", "a", 5, node=2)]})
        v = self.assertPasses("no-overlap")
        self.assertEqual((v.counts["grants"], v.counts["renewals"], v.counts["releases"], v.counts["expiries"]),
                         (2, 1, 1, 1))

    def test_grant_to_another_owner_before_exp_fails(self):
        write_run(self.dir, audit={1: [rec(5, 100, "acquired", "a", 5), rec(6, 600, "renewed", "a", 5),
                                       rec(7, 1200, "acquired", "b", 7)]})
        self.assertIn("held until lt 1600", self.assertFails("no-overlap").problems[0])

    def test_early_expiry_fails(self):
        write_run(self.dir, audit={1: [rec(5, 100, "acquired", "a", 5), rec(7, 900, "expired", "a", 5)]})
        self.assertFails("no-overlap")

    def test_divergent_apply_fails(self):
        write_run(self.dir, audit={1: [rec(5, 100, "acquired", "a", 5)], 2: [rec(5, 100, "acquired", "b", 5, node=2)]})
        self.assertIn("divergent apply at index 5", self.assertFails("no-overlap").problems[0])

    def test_the_server_boundary_a_lease_is_live_at_its_exp(self):
        # exp 1100: live at lt 1100 (now > exp is false), gone at 1101.
        grant = [rec(5, 100, "acquired", "a", 5)]
        for recs, ok in (([rec(8, 1100, "acquired", "b", 8)], False), ([rec(8, 1101, "acquired", "b", 8)], True),
                         ([rec(8, 1100, "expired", "a", 5)], False), ([rec(8, 1101, "expired", "a", 5)], True),
                         ([rec(8, 1101, "renewed", "a", 5)], False), ([rec(8, 1100, "renewed", "a", 5)], True),
                         ([rec(8, 1101, "released", "a", 5)], False), ([rec(8, 1100, "released", "a", 5)], True)):
            with self.subTest(record=recs[0]):
                write_run(self.dir, audit={1: grant + recs})
                (self.assertPasses if ok else self.assertFails)("no-overlap")

    def test_a_rewritten_lease_goes_on_under_its_new_owner_and_token(self):
        recs = [rec(5, 100, "acquired", "a", 5), rec(9, 600, "renewed", "a+w7", 7),
                rec(12, 1601, "expired", "a+w7", 7), rec(13, 1700, "acquired", "b", 13)]
        write_run(self.dir, audit={1: recs})
        self.assertEqual(self.assertPasses("no-overlap").counts["rewritten"], 1)
        recs.insert(2, rec(10, 700, "acquired", "b", 10))  # inside the rewritten lease
        write_run(self.dir, audit={1: recs})
        self.assertFails("no-overlap")

    def test_planted_overlap_in_a_simulated_run(self):
        sim = Sim(5).run()
        recs = [r for _, r in sim.audit]
        a = next(k for k, r in enumerate(recs) if r["ev"] == "acquired")
        first = recs[a]
        recs.insert(a + 1, dict(first, i=first["i"], ev="acquired", owner="intruder", token=first["i"] + 100000,
                                lt=first["lt"] + 1, exp=first["lt"] + 500))
        write_run(self.dir, audit={1: recs})
        self.assertFails("no-overlap")


class NoLostGrants(Base):
    def test_acked_grants_in_audit_pass(self):
        h = Hist().op(1, "acquire", 1, 2, "ok", token=5).op(2, "read", 3, 4, "ok", holder={"owner": "o1", "token": 5})
        write_run(self.dir, history=h.sorted(), audit={1: [rec(5, 100, "acquired", "o1", 5)]},
                  final={"probe_token": 40})
        self.assertPasses("no-lost-grants")

    def test_same_token_acquired_by_two_owners_fails(self):
        write_run(self.dir, audit={1: [rec(5, 100, "acquired", "a", 5)],
                                   2: [{"boot": True, "node": 2, "pid": 7, "unix_ms": 0},
                                       rec(6, 90, "acquired", "b", 5, node=2)]})
        self.assertIn("several owners", self.assertFails("no-lost-grants").problems[0])

    def test_acked_token_missing_from_audit_fails(self):
        h = Hist().op(1, "acquire", 1, 2, "ok", token=5).op(2, "acquire", 3, 4, "ok", token=30)
        write_run(self.dir, history=h.sorted(), audit={1: [rec(5, 100, "acquired", "o1", 5)]})
        self.assertIn("token 30", self.assertFails("no-lost-grants").problems[0])

    def test_read_of_a_grant_the_audit_lacks_fails(self):
        h = Hist().op(1, "acquire", 1, 2, "ok", token=5).op(2, "read", 3, 4, "ok", holder={"owner": "o3", "token": 5})
        write_run(self.dir, history=h.sorted(), audit={1: [rec(5, 100, "acquired", "o1", 5)]})
        self.assertIn("read", self.assertFails("no-lost-grants").problems[0])

    def test_a_missing_probe_fails(self):
        h = Hist().op(1, "acquire", 1, 2, "ok", token=5)
        audit = {1: [rec(5, 100, "acquired", "o1", 5)]}
        write_run(self.dir, history=h.sorted(), audit=audit, final={"probe_token": None})
        self.assertLacks("no-lost-grants", "no probe_token")
        os.unlink(os.path.join(self.dir, "final.json"))
        self.assertLacks("no-lost-grants", "no final.json")

    def test_a_read_of_a_rewritten_lock_with_the_old_token_fails(self):
        # The rewrite's outcome is unknown, so its token is too; but the old
        # grant's token under the new owner is wrong (version kept on write).
        h = (Hist().op(1, "acquire", 1, 2, "ok", token=5)
             .op(1, "rewrite", 3, None, "unknown", token=5, new_owner="o1+w2")
             .op(2, "read", 4, 5, "ok", holder={"owner": "o1+w2", "token": 5}))
        write_run(self.dir, history=h.sorted(), audit={1: [rec(5, 100, "acquired", "o1", 5)]},
                  final={"probe_token": 40})
        self.assertIn("never granted", self.assertFails("no-lost-grants").problems[0])
        h.lines[-1]["holder"]["token"] = 9  # a new version: fine
        write_run(self.dir, history=h.sorted(), audit={1: [rec(5, 100, "acquired", "o1", 5)]},
                  final={"probe_token": 40})
        self.assertPasses("no-lost-grants")

    def test_probe_token_not_newer_fails(self):
        h = Hist().op(1, "acquire", 1, 2, "ok", token=5)
        write_run(self.dir, history=h.sorted(), audit={1: [rec(5, 100, "acquired", "o1", 5)]},
                  final={"probe_token": 5})
        self.assertFails("no-lost-grants")


class Linearizable(Base):
    def check(self, h, audit=None):
        write_run(self.dir, history=h.sorted(), audit=audit or {1: []})
        return self.verdict("linearizable")

    def stale_read(self, b_status):
        # a holds 10; b's acquire (token 20) completes; a later read still shows a
        return (Hist().op(1, "acquire", 0, 1, "ok", token=10)
                .op(2, "acquire", 2, 3 if b_status == "ok" else None, b_status, **({"token": 20} if b_status == "ok" else {}))
                .op(3, "read", 4, 5, "ok", holder={"owner": "o1", "token": 10}))

    def test_read_of_old_holder_after_newer_acquire_fails(self):
        v = self.check(self.stale_read("ok"))
        self.assertFalse(v.ok)
        self.assertIn("not linearizable", v.problems[0])

    def test_read_of_old_holder_with_unknown_newer_acquire_passes(self):
        self.assertTrue(self.check(self.stale_read("unknown")).ok)

    def test_read_concurrent_with_newer_acquire_passes(self):
        h = (Hist().op(1, "acquire", 0, 1, "ok", token=10).op(2, "acquire", 2, 6, "ok", token=20)
             .op(3, "read", 4, 5, "ok", holder={"owner": "o1", "token": 10}))
        self.assertTrue(self.check(h).ok)

    def denied_after_release(self, with_unknown):
        h = Hist().op(1, "acquire", 0, 1, "ok", token=10)
        if with_unknown:
            h.op(2, "acquire", 1.5, None, "unknown")
        return h.op(1, "release", 2, 3, "ok", token=10).op(3, "acquire", 4, 5, "fail")

    def test_denied_acquire_after_release_fails(self):
        self.assertFalse(self.check(self.denied_after_release(False)).ok)

    def test_denied_acquire_after_release_with_concurrent_unknown_passes(self):
        self.assertTrue(self.check(self.denied_after_release(True)).ok)

    def test_denied_with_an_error_is_not_a_denial(self):
        h = (Hist().op(1, "acquire", 0, 1, "ok", token=10).op(1, "release", 2, 3, "ok", token=10)
             .op(3, "acquire", 4, 5, "fail", error="CLUSTERDOWN no leader"))
        self.assertTrue(self.check(h).ok)

    def test_silent_expiry_allows_a_new_grant(self):
        h = (Hist().op(1, "acquire", 0, 1, "ok", token=10).op(2, "acquire", 2, 3, "ok", token=20)
             .op(1, "renew", 4, 5, "fail", token=10).op(3, "acquire", 6, 7, "fail"))
        self.assertTrue(self.check(h).ok)

    def test_grant_inside_a_known_lease_fails(self):
        h = (Hist().op(1, "acquire", 0, 1, "ok", token=10, lt=100)
             .op(2, "acquire", 2, 3, "ok", token=20, lt=600))
        self.assertFalse(self.check(h).ok)

    def test_token_must_grow(self):
        h = (Hist().op(1, "acquire", 0, 1, "ok", token=10).op(1, "release", 2, 3, "ok", token=10)
             .op(2, "acquire", 4, 5, "ok", token=8))
        self.assertFalse(self.check(h).ok)

    def test_unknown_grant_seen_by_a_read_pins_its_token(self):
        h = (Hist().op(1, "acquire", 0, None, "unknown")
             .op(2, "read", 1, 2, "ok", holder={"owner": "o1", "token": 7})
             .op(3, "acquire", 3, 4, "ok", token=9))
        self.assertTrue(self.check(h).ok)
        h.op(4, "acquire", 5, 6, "ok", token=8)  # below 9: tokens never go back
        self.assertFalse(self.check(h).ok)

    def test_renew_after_the_lease_ended_in_log_time_fails(self):
        h = (Hist().op(1, "acquire", 0, 1, "ok", token=10, lt=100)
             .op(1, "renew", 2, 3, "ok", token=10, lt=1200))
        self.assertFalse(self.check(h).ok)
        h2 = (Hist().op(1, "acquire", 0, 1, "ok", token=10, lt=100)
              .op(1, "renew", 2, 3, "ok", token=10, lt=1100))  # at exp: still live
        self.assertTrue(self.check(h2).ok)

    def test_log_time_joined_from_the_audit(self):
        # no lt in the history: the audit's acquired/renewed records give it
        h = (Hist().op(1, "acquire", 0, 1, "ok", token=10).op(1, "renew", 2, 3, "ok", token=10)
             .op(2, "acquire", 4, 5, "ok", token=20))
        audit = {1: [rec(10, 100, "acquired", "o1", 10), rec(11, 200, "renewed", "o1", 10),
                     rec(20, 700, "acquired", "o2", 20)]}
        write_run(self.dir, history=h.sorted(), audit=audit)
        v = self.verdict("linearizable")
        self.assertFalse(v.ok, checkers.format_verdict(v))  # 700 < 200 + 1000
        self.assertEqual(v.counts["with_lt"], 3)

    def test_a_refresh_joined_to_its_grant_record_is_not_trusted(self):
        # o1 takes token 10 at lt 100, refreshes it at lt 800 and renews at lt 1500;
        # a join by token alone gives the refresh lt 100, as if the lease ended at 1100
        h = (Hist().op(1, "acquire", 0, 1, "ok", token=10, index=10, lt=100)
             .op(1, "acquire", 2, 3, "ok", token=10, index=10, lt=100)
             .op(1, "renew", 4, 5, "ok", token=10, index=30, lt=1500))
        audit = {1: [rec(10, 100, "acquired", "o1", 10), rec(20, 800, "renewed", "o1", 10),
                     rec(30, 1500, "renewed", "o1", 10)]}
        write_run(self.dir, history=h.sorted(), audit=audit)
        self.assertPasses("linearizable")

    # Reads of "free" (issue 10 §5): a lease is certainly live until its
    # request's send time + ttl, and over for good once a read saw it free.

    def test_read_of_free_inside_the_lease_fails(self):
        h = Hist().op(1, "acquire", 0, .01, "ok", token=10).op(2, "read", .5, .51, "ok", holder=None)
        v = self.check(h)
        self.assertFalse(v.ok, checkers.format_verdict(v))
        self.assertEqual(v.counts["free_reads"], 1)

    def test_read_of_free_once_the_lease_may_have_ended_passes(self):
        h = Hist().op(1, "acquire", 0, .01, "ok", token=10).op(2, "read", 1.2, 1.21, "ok", holder=None)
        self.assertTrue(self.check(h).ok)

    def test_read_of_free_concurrent_with_a_release_passes(self):
        h = (Hist().op(1, "acquire", 0, .01, "ok", token=10).op(1, "release", .3, .4, "ok", token=10)
             .op(2, "read", .35, .36, "ok", holder=None))
        self.assertTrue(self.check(h).ok)

    def test_renewal_in_flight_after_a_read_of_free_fails(self):
        # Finding 2(b): the renew (sent at 0.99) succeeds, but a read during it
        # said free: before the renew the lease was over for good, after it
        # the lease runs until at least 1.99.
        h = (Hist().op(1, "acquire", 0, .01, "ok", token=10)
             .op(1, "renew", .99, 1.2, "ok", token=10)
             .op(2, "read", 1.05, 1.06, "ok", holder=None))
        self.assertFalse(self.check(h).ok)

    def test_holder_again_after_a_read_of_free_fails(self):
        # Finding 2(a): free at 1.1, then the old holder is back.
        h = (Hist().op(1, "acquire", 0, .01, "ok", token=10)
             .op(2, "read", 1.1, 1.11, "ok", holder=None)
             .op(2, "read", 1.3, 1.31, "ok", holder={"owner": "o1", "token": 10}))
        self.assertFalse(self.check(h).ok)

    def test_grant_to_another_inside_the_lease_fails(self):
        # No log times at all: the real-time bound alone rules it out.
        h = Hist().op(1, "acquire", 0, .01, "ok", token=10).op(2, "acquire", .5, .6, "ok", token=20)
        self.assertFalse(self.check(h).ok)
        h = Hist().op(1, "acquire", 0, .01, "ok", token=10).op(2, "acquire", .5, 1.2, "ok", token=20)
        self.assertTrue(self.check(h).ok)

    def test_grant_at_the_lease_end_fails_one_ms_later_passes(self):
        for lt, ok in ((1100, False), (1101, True)):
            h = (Hist().op(1, "acquire", 0, .01, "ok", token=10, lt=100)
                 .op(2, "acquire", 2, 2.1, "ok", token=20, lt=lt))
            self.assertEqual(self.check(h).ok, ok, lt)

    def test_refusals_inside_the_lease_fail(self):
        for f, done in (("renew", {"error": "LOCKLOST the lock is not held"}), ("release", {}),
                        ("rewrite", {"new_owner": "o1+w2"})):
            with self.subTest(f=f):
                h = Hist().op(1, "acquire", 0, .01, "ok", token=10).op(1, f, .3, .31, "fail", token=10, **done)
                self.assertFalse(self.check(h).ok)
                h = Hist().op(1, "acquire", 0, .01, "ok", token=10).op(1, f, 1.3, 1.31, "fail", token=10, **done)
                self.assertTrue(self.check(h).ok)

    def test_refusal_ends_the_lease_for_good(self):
        h = (Hist().op(1, "acquire", 0, .01, "ok", token=10)
             .op(1, "renew", 1.3, 1.31, "fail", token=10, error="LOCKLOST the lock is not held")
             .op(2, "read", 1.4, 1.41, "ok", holder={"owner": "o1", "token": 10}))
        self.assertFalse(self.check(h).ok)

    def rewrite(self, new_token):
        return (Hist().op(1, "acquire", 0, .01, "ok", token=10)
                .op(1, "rewrite", .1, .11, "ok", token=10, new_owner="o1+w2", old_token=10, new_token=new_token)
                .op(2, "read", .2, .21, "ok", holder={"owner": "o1+w2", "token": new_token})
                .op(1, "renew", .3, .31, "ok", owner="o1+w2", token=new_token))

    def test_a_rewrite_gives_a_new_token(self):
        self.assertTrue(self.check(self.rewrite(12)).ok)
        self.assertFalse(self.check(self.rewrite(10)).ok)  # the version kept on write

    def test_an_unknown_rewrite_may_have_happened(self):
        h = (Hist().op(1, "acquire", 0, .01, "ok", token=10)
             .op(1, "rewrite", .1, None, "unknown", token=10, new_owner="o1+w2")
             .op(2, "read", .2, .21, "ok", holder={"owner": "o1+w2", "token": 12}))
        self.assertTrue(self.check(h).ok)
        h.op(2, "read", .3, .31, "ok", holder={"owner": "o1", "token": 10})
        self.assertFalse(self.check(h).ok)

    def test_a_read_invoked_before_an_unknown_acquire_may_see_its_grant(self):
        h = (Hist().op(1, "acquire", 1.0, None, "unknown")
             .op(2, "read", .9, 1.2, "ok", holder={"owner": "o1", "token": 7}))
        self.assertTrue(self.check(h).ok)

    def test_an_unknown_refresh_may_shorten_the_lease(self):
        # o1's lease runs until 0 + 5 s, unless its timed-out re-acquire
        # (ttl 300 ms) refreshed it: then o2 may have it at 2 s.
        h = (Hist().op(1, "acquire", 0, .01, "ok", token=10, ttl=5000)
             .op(3, "acquire", 2.0, 2.01, "ok", token=20))
        self.assertFalse(self.check(h).ok)
        h.op(1, "acquire", 1.0, None, "unknown", ttl=300)
        self.assertTrue(self.check(h).ok)

    def test_an_unknown_acquire_cannot_take_a_lease_that_surely_runs(self):
        h = (Hist().op(1, "acquire", 0, .01, "ok", token=10, ttl=5000)
             .op(2, "acquire", .5, None, "unknown")
             .op(3, "read", 1.0, 1.01, "ok", holder=None))
        self.assertFalse(self.check(h).ok)

    def test_an_undecided_key_fails(self):
        # Enough concurrency that 3 states do not decide it: it must fail,
        # naming the key, not pass.
        h = Hist()
        for p in range(1, 6):
            h.op(p, "acquire", 0, 1, "fail")
        h.op(6, "acquire", 0, 1, "ok", token=10)
        write_run(self.dir, history=h.sorted(), audit={1: []})
        v = checkers.check_linearizable(checkers.Run(self.dir), budget=3, seconds_per_key=None)
        self.assertFalse(v.ok)
        self.assertEqual(v.counts["undecided"], 1)
        self.assertIn("k: undecided", v.problems[0])
        v = checkers.check_linearizable(checkers.Run(self.dir), budget=10_000, seconds_per_key=None)
        self.assertTrue(v.ok, checkers.format_verdict(v))

    def test_write_ops_are_ignored(self):
        h = Hist().op(1, "acquire", 0, 1, "ok", token=10).op(1, "write", 2, 3, "fail", token=3, resource="k")
        self.assertTrue(self.check(h).ok)


class Notifications(Base):
    def setUp(self):
        super().setUp()
        self.audit = {1: [rec(5, 100, "acquired", "a", 5), rec(6, 200, "released", "a", 5),
                          rec(7, 300, "acquired", "b", 7), rec(8, 400, "acquired", "h", 8, key="heal")]}
        self.final = {"heal_events": [{"key": "heal", "ev": "acquired", "token": 8}], "live_subs": [1]}

    def notify(self, *events, conn=1):
        out = [{"t": 0, "sub": 1, "conn": conn, "node": 1, "type": "subscribed"}]
        out += [{"t": n, "sub": 1, "conn": conn, "node": 1, "type": "event", "key": k, "ev": e}
                for n, (k, e) in enumerate(events, 1)]
        return out

    def test_subsequence_passes(self):
        write_run(self.dir, audit=self.audit, final=self.final,
                  notify=self.notify(("k", "acquired"), ("k", "acquired"), ("heal", "acquired")))
        v = self.assertPasses("notifications")
        self.assertEqual(v.counts["events"], 3)

    def test_phantom_event_fails(self):
        write_run(self.dir, audit=self.audit, final=self.final,
                  notify=self.notify(("k", "acquired"), ("k", "expired"), ("heal", "acquired")))
        self.assertIn("never happened", self.assertFails("notifications").problems[0])

    def test_out_of_order_event_fails(self):
        write_run(self.dir, audit=self.audit, final=self.final,
                  notify=self.notify(("k", "released"), ("k", "acquired"), ("k", "acquired"), ("heal", "acquired")))
        self.assertFails("notifications")

    def heal_on_k(self):
        # k: token 5 granted and released by the workload, then token 9 by
        # the heal phase (its commands sent at t=10 and t=10.5).
        audit = {1: [rec(5, 100, "acquired", "a", 5), rec(6, 200, "released", "a", 5),
                     rec(9, 900, "acquired", "heal-k", 9), rec(10, 950, "released", "heal-k", 9)]}
        final = {"heal_events": [{"key": "k", "ev": "acquired", "token": 9, "t": 10.0},
                                 {"key": "k", "ev": "released", "token": 9, "t": 10.5}], "live_subs": [1]}
        return audit, final

    def timed(self, *events):
        out = [{"t": 0, "sub": 1, "conn": 1, "node": 1, "type": "subscribed"}]
        return out + [{"t": t, "sub": 1, "conn": 1, "node": 1, "type": "event", "key": "k", "ev": e} for t, e in events]

    def test_heal_events_are_matched_by_token(self):
        audit, final = self.heal_on_k()
        write_run(self.dir, audit=audit, final=final,
                  notify=self.timed((1, "acquired"), (2, "released"), (10.2, "acquired"), (10.6, "released")))
        self.assertPasses("notifications")
        # Only token 5's events: the same kinds on the same key, not the heal ones.
        write_run(self.dir, audit=audit, final=final, notify=self.timed((1, "acquired"), (2, "released")))
        self.assertIn("missed a heal event on k", self.assertFails("notifications").problems[0])

    def test_a_heal_event_received_before_its_command_was_sent_fails(self):
        audit, final = self.heal_on_k()
        write_run(self.dir, audit=audit, final=final, notify=self.timed((9, "acquired"), (9.5, "released")))
        self.assertFails("notifications")

    def test_heal_events_after_a_gap_pass(self):
        # The subscriber's node installed a snapshot over token 5's events.
        audit, final = self.heal_on_k()
        write_run(self.dir, audit=audit, final=final, notify=self.timed((10.2, "acquired"), (10.6, "released")))
        self.assertPasses("notifications")

    def test_a_heal_event_missing_from_the_audit_fails(self):
        audit, final = self.heal_on_k()
        final["heal_events"][0]["token"] = 11
        write_run(self.dir, audit=audit, final=final, notify=self.timed((10.2, "acquired"), (10.6, "released")))
        self.assertIn("not in the audit", self.assertFails("notifications").problems[0])

    def test_no_live_subscriber_fails(self):
        audit, final = self.heal_on_k()
        final["live_subs"] = []
        write_run(self.dir, audit=audit, final=final, notify=self.timed((10.2, "acquired")))
        self.assertLacks("notifications", "no subscriber stayed connected")

    def test_missed_heal_event_fails(self):
        n = self.notify(("k", "acquired")) + self.notify(("k", "acquired"), conn=2)
        n.append({"t": 9, "sub": 1, "conn": 1, "node": 1, "type": "event", "key": "heal", "ev": "acquired"})
        write_run(self.dir, audit=self.audit, final=self.final, notify=n)  # only the old connection got it
        self.assertIn("missed a heal event", self.assertFails("notifications").problems[0])


class LogTime(Base):
    def run_with(self, lt_b, t_b=(1.0, 1.01)):
        h = (Hist().op(1, "acquire", 0, .01, "ok", token=10, lt=100)
             .op(1, "renew", t_b[0], t_b[1], "ok", token=10, lt=lt_b))
        write_run(self.dir, history=h.sorted(), audit={1: []})

    def test_log_time_ahead_of_real_time_fails(self):
        # 4.9 s of log time in ~1 s: a leader continued from a stamp that never
        # committed (finding 1).
        self.run_with(5000)
        self.assertIn("log time advanced 4900 ms in 1010 ms", self.assertFails("log-time").problems[0])

    def test_log_time_behind_real_time_passes(self):
        for lt in (1100, 900, 100):  # elections do not count: log time may lag
            with self.subTest(lt=lt):
                self.run_with(lt)
                self.assertPasses("log-time")

    def test_log_times_joined_from_the_audit(self):
        h = (Hist().op(1, "acquire", 0, .01, "ok", token=10).op(2, "acquire", 2, 2.01, "ok", token=20))
        write_run(self.dir, history=h.sorted(),
                  audit={1: [rec(10, 100, "acquired", "o1", 10), rec(20, 9000, "acquired", "o2", 20)]})
        self.assertFails("log-time")

    def test_no_log_time_at_all_fails(self):
        h = Hist().op(1, "acquire", 0, .01, "ok", token=10)
        write_run(self.dir, history=h.sorted(), audit={1: []})
        self.assertLacks("log-time", "no acknowledged command has a log time")


class Waits(Base):
    """The waits checker on hand-written audit logs (one node) and WAITs."""

    def write(self, steps, waits=()):
        """steps: (index, lt, ev, owner, token, exp) on key k; waits: (owner,
        status, token) of clients' WAIT acquires."""
        audit = [{"boot": True, "node": 1, "pid": 1, "unix_ms": 0}]
        for i, lt, ev, owner, token, exp in steps:
            audit.append({"node": 1, "i": i, "lt": lt, "ev": ev, "key": "k", "owner": owner, "token": token,
                          "ttl": 100 if ev in ("acquired", "queued") else 0, "exp": exp})
        history = []
        for n, (owner, status, token) in enumerate(waits):
            history.append({"type": "invoke", "id": n, "process": n, "node": 1, "f": "acquire", "key": "k",
                            "owner": owner, "ttl": 100, "wait": 500, "t": 100.0 + n})
            done = {"type": status, "id": n, "process": n, "node": 1, "f": "acquire", "key": "k", "owner": owner,
                    "t": 100.5 + n}
            if token is not None:
                done["token"] = token
            history.append(done)
        write_run(self.dir, history=history, audit={1: audit})

    FIFO = [(1, 0, "acquired", "h", 1, 100), (2, 10, "queued", "a", 0, 500), (3, 20, "queued", "b", 0, 500),
            (4, 30, "queued", "a", 0, 600),  # a's retried WAIT keeps its place
            (5, 40, "released", "h", 1, 0), (5, 40, "acquired", "a", 6, 140), (5, 40, "handoff", "a", 6, 0),
            (7, 50, "expired", "a", 6, 0), (7, 50, "acquired", "b", 8, 150), (7, 50, "handoff", "b", 8, 0)]

    def test_first_in_line_is_granted_and_passes(self):
        self.write(self.FIFO, waits=[("a", "ok", 6), ("b", "ok", 8)])
        v = self.assertPasses("waits")
        self.assertEqual((v.counts["handoffs"], v.counts["queued"]), (2, 3))

    def test_the_last_in_line_granted_first_fails(self):
        steps = [s if s[3] not in ("a", "b") else s[:3] + ({"a": "b", "b": "a"}[s[3]],) + s[4:] for s in self.FIFO[5:]]
        self.write(self.FIFO[:5] + steps)
        v = self.assertFails("waits")
        self.assertIn("but a was first in line", v.problems[0])

    def test_a_grant_after_the_deadline_fails(self):
        steps = [(1, 0, "acquired", "h", 1, 100), (2, 10, "queued", "a", 0, 30),
                 (3, 31, "released", "h", 1, 0), (3, 31, "acquired", "a", 4, 131), (3, 31, "handoff", "a", 4, 0)]
        self.write(steps, waits=[("a", "ok", 4)])
        self.assertIn("after its deadline", self.assertFails("waits").problems[0])

    def test_a_timeout_before_the_deadline_fails_and_at_it_passes(self):
        base = [(1, 0, "acquired", "h", 1, 1000), (2, 10, "queued", "a", 0, 30)]
        self.write(base + [(3, 30, "timedout", "a", 0, 0)])
        self.assertIn("before its deadline", self.assertFails("waits").problems[0])
        self.write(base + [(3, 31, "timedout", "a", 0, 0)])
        self.assertNoViolation("waits")

    def test_taking_a_lock_others_queue_for_fails(self):
        steps = [(1, 0, "acquired", "h", 1, 100), (2, 10, "queued", "a", 0, 500),
                 (3, 101, "expired", "h", 1, 0), (3, 101, "acquired", "x", 3, 201)]
        self.write(steps)
        self.assertIn("x took the lock", self.assertFails("waits").problems[0])

    def test_a_handoff_token_unlike_its_grant_fails(self):
        steps = self.FIFO[:5] + [(5, 40, "acquired", "a", 6, 140), (5, 40, "handoff", "a", 7, 0)]
        self.write(steps)
        self.assertIn("not the grant recorded before it", self.assertFails("waits").problems[0])

    def test_a_client_told_a_token_never_granted_fails(self):
        self.write(self.FIFO, waits=[("a", "ok", 6), ("b", "ok", 9), ("c", "fail", None)])
        v = self.assertFails("waits")
        self.assertIn("b's WAIT was answered token 9", v.problems[0])

    def test_no_handoff_at_all_lacks_evidence(self):
        self.write(self.FIFO[:5], waits=[("a", "fail", None)])
        self.assertLacks("waits", "never exercised")

    def test_a_planted_lifo_queue_in_a_simulated_run_fails(self):
        sim = Sim(21, n_ops=600, procs_per_key=4, p_wait=.6)
        pop = list.pop
        sim_waiters = sim.waiters
        for key in sim_waiters:
            class Lifo(list):
                def pop(self, i=-1):  # the bug: the last in line first
                    return pop(self, -1)
            sim_waiters[key] = Lifo()
        sim.run(self.dir)
        self.assertFails("waits")


class LockLost(Base):
    LOST = {"error": "LOCKLOST the lock is not held by this owner with this token"}

    def test_refused_before_the_real_time_bound_fails(self):
        h = (Hist().op(1, "acquire", 0, .01, "ok", token=10, ttl=1000)
             .op(1, "renew", .4, .41, "fail", token=10, **self.LOST))
        write_run(self.dir, history=h.sorted(), audit={1: []})
        self.assertIn("before the lease's real-time bound", self.assertFails("locklost").problems[0])

    def test_refused_after_the_bound_passes(self):
        h = (Hist().op(1, "acquire", 0, .01, "ok", token=10, ttl=1000)
             .op(1, "renew", .4, .41, "ok", token=10, ttl=300)  # shortened: until 0.7
             .op(1, "renew", .9, .91, "fail", token=10, **self.LOST))
        write_run(self.dir, history=h.sorted(), audit={1: []})
        self.assertEqual(self.assertPasses("locklost").counts["locklost"], 1)

    def test_refused_while_the_audit_shows_the_lease_running_fails(self):
        # Past the real-time bound, but a command sent after the refusal ran
        # at lt 1050, inside the lease (exp 1100): the renew was judged there.
        h = (Hist().op(1, "acquire", 0, .01, "ok", token=10, ttl=1000)
             .op(1, "renew", 1.5, 1.6, "fail", token=10, **self.LOST)
             .op(2, "acquire", 1.7, 1.8, "ok", key="k2", token=30))
        audit = {1: [rec(10, 100, "acquired", "o1", 10), rec(30, 1050, "acquired", "o2", 30, key="k2")]}
        write_run(self.dir, history=h.sorted(), audit=audit)
        self.assertIn("within the lease (exp 1100)", self.assertFails("locklost").problems[0])
        audit[1][1] = rec(30, 1101, "acquired", "o2", 30, key="k2")
        write_run(self.dir, history=h.sorted(), audit=audit)
        self.assertPasses("locklost")

    def test_a_refusal_of_another_token_is_not_judged(self):
        h = (Hist().op(1, "acquire", 0, .01, "ok", token=10, ttl=1000)
             .op(1, "renew", .4, .41, "fail", token=9, **self.LOST))
        write_run(self.dir, history=h.sorted(), audit={1: []})
        self.assertPasses("locklost")


class Rewrites(Base):
    def write(self, new_token, audit_extra=(), before=None):
        h = Hist()
        if before:
            h.op(3, "acquire", 0, .005, "ok", key="k2", owner="o3", token=before)
        (h.op(1, "acquire", 0, .01, "ok", token=10)
         .op(1, "rewrite", .1, .11, "ok", token=10, new_owner="o1+w2", old_token=10, new_token=new_token)
         .op(2, "read", .2, .21, "ok", holder={"owner": "o1+w2", "token": new_token})
         .op(1, "write", .22, .23, "ok", owner="o1+w2", token=new_token, resource="k")
         .op(1, "renew", .3, .31, "ok", owner="o1+w2", token=new_token)
         .op(1, "release", .4, .41, "ok", owner="o1+w2", token=new_token))
        audit = [rec(10, 100, "acquired", "o1", 10)] + list(audit_extra)
        if before:
            audit.append(rec(before, 99, "acquired", "o3", before, key="k2"))
        audit += [rec(new_token + 1, 300, "renewed", "o1+w2", new_token),
                  rec(new_token + 2, 400, "released", "o1+w2", new_token)]
        write_run(self.dir, history=h.sorted(), audit={1: audit},
                  resource=[{"t": .23, "resource": "k", "token": new_token, "owner": "o1+w2", "accepted": True,
                             "highest": None}],
                  final={"probe_token": 99})

    def test_a_rewrite_with_a_new_token_passes_every_checker(self):
        self.write(12)
        for name in ("fencing", "no-overlap", "no-lost-grants", "linearizable", "locklost", "rewrites",
                     "client-overlap"):
            with self.subTest(checker=name):
                self.assertPasses(name)
        self.assertEqual(self.verdict("rewrites").counts["ok"], 1)

    def test_a_rewrite_that_keeps_the_token_fails(self):
        # Finding 3 (the planted version-kept-on-write): the new "owner"
        # inherits the old grant's token.
        self.write(10)
        self.assertIn("kept the old grant's token 10", self.assertFails("rewrites").problems[0])
        self.assertIn("several owners", self.assertFails("no-lost-grants").problems[0])
        self.assertFails("linearizable")

    def test_a_rewrite_token_that_is_a_grant_fails(self):
        self.write(12, audit_extra=[rec(12, 150, "acquired", "o9", 12, key="k3")])
        self.assertIn("granted to k3/o9", self.assertFails("rewrites").problems[0])

    def test_a_rewrite_token_below_an_earlier_grant_fails(self):
        self.write(12, before=15)
        self.assertIn("not above token 15", self.assertFails("rewrites").problems[0])


class Convergence(Base):
    def test_same_digests_pass(self):
        write_run(self.dir, final={"nodes": [1, 2, 3], "digests": {"1": [40, "ab"], "2": [40, "ab"], "3": [40, "ab"]}})
        self.assertEqual(self.assertPasses("convergence").counts["applied_index"], 40)

    def test_different_digests_fail(self):
        write_run(self.dir, final={"nodes": [1, 2, 3], "digests": {"1": [40, "ab"], "2": [40, "ac"], "3": [40, "ab"]}})
        self.assertIn("digests differ", self.assertFails("convergence").problems[0])

    def test_a_node_that_did_not_answer_fails(self):
        # Two nodes that agree prove nothing about the third.
        write_run(self.dir, final={"nodes": [1, 2, 3], "digests": {"1": [40, "ab"], "3": [40, "ab"]}})
        self.assertLacks("convergence", "node 2 did not answer")
        write_run(self.dir, final={"nodes": [1, 2, 3], "digests": {"1": [40, "ab"], "2": None, "3": [40, "ab"]}})
        self.assertLacks("convergence", "node 2 did not answer")

    def test_a_node_behind_after_healing_fails_though_it_caught_up_after_the_restart(self):
        same = {"1": [40, "ab"], "2": [40, "ab"], "3": [40, "ab"]}
        write_run(self.dir, final={"nodes": [1, 2, 3], "digests": same,
                                   "healed_digests": {"1": [31, "cd"], "2": [38, "ef"], "3": [38, "ef"]}})
        self.assertIn("not caught up after healing", self.assertFails("convergence").problems[0])
        write_run(self.dir, final={"nodes": [1, 2, 3], "digests": same,
                                   "healed_digests": {"2": [38, "ef"], "3": [38, "ef"]}})
        self.assertIn("node 1 did not answer", self.assertFails("convergence").problems[0])
        write_run(self.dir, final={"nodes": [1, 2, 3], "digests": same,
                                   "healed_digests": {"1": [38, "ef"], "2": [38, "ef"], "3": [38, "ef"]}})
        self.assertPasses("convergence")

    def test_the_nodes_come_from_the_audit_logs_when_final_json_does_not_list_them(self):
        write_run(self.dir, audit={1: [], 2: [], 3: []}, final={"digests": {"1": [40, "ab"], "2": [40, "ab"]}})
        self.assertLacks("convergence", "node 3 did not answer")


class ClientOverlap(Base):
    def overlap(self):
        return (Hist().op(1, "acquire", 0, 0.01, "ok", token=10, ttl=1000)
                .op(2, "acquire", 0.5, 0.51, "ok", token=20, ttl=1000)
                .op(2, "release", 0.7, 0.71, "ok", token=20))

    def test_a_believed_overlap_fails(self):
        # o1 may rely on its lease until 0 + 1 s; o2 was granted the key at 0.51.
        write_run(self.dir, history=self.overlap().sorted(),
                  resource=[{"t": 1, "resource": "k", "token": 10, "owner": "o1", "accepted": False, "highest": 20}])
        v = self.assertFails("client-overlap")
        self.assertEqual(v.counts["believed_overlaps"], 1)
        self.assertEqual(v.counts["stale_writes_rejected"], 1)
        self.assertIn("process 1 held it over t=[0.010, 1.000]", v.problems[0])

    def test_a_lease_counted_from_its_send_time_passes(self):
        # o2 is granted the key after o1's lease ran out (from its send time),
        # though before o1's naive end (reply time + ttl): information only.
        h = (Hist().op(1, "acquire", 0, 0.3, "ok", token=10, ttl=1000)
             .op(2, "acquire", 1.1, 1.2, "ok", token=20, ttl=1000))
        write_run(self.dir, history=h.sorted(), resource=[])
        v = self.assertPasses("client-overlap")
        self.assertEqual((v.counts["believed_overlaps"], v.counts["naive_overlaps"]), (0, 1))

    def test_a_renewal_moves_the_end(self):
        h = (Hist().op(1, "acquire", 0, 0.01, "ok", token=10, ttl=1000)
             .op(1, "renew", 0.8, 0.81, "ok", token=10, ttl=1000)
             .op(2, "acquire", 1.5, 1.51, "ok", token=20, ttl=1000))
        write_run(self.dir, history=h.sorted(), resource=[])
        self.assertFails("client-overlap")


class RunVerdict(unittest.TestCase):
    """run.py's verdict.json: only a checker's violation makes a run FAIL (what
    scripts/chaos-planted.sh counts as catching a bug); missing evidence or a
    harness error make it ERROR, which proves nothing either way."""

    def setUp(self):
        import run
        self.summarize = run.summarize

    def test_a_violation_fails_and_names_the_checker(self):
        bad = checkers.Verdict("rewrites")
        bad.problem("kept the token")
        lacking = checkers.Verdict("convergence").lacks("node 2 did not answer")
        v = self.summarize([checkers.Verdict("fencing"), bad, lacking], harness_errors=["boom"])
        self.assertEqual(v["status"], "FAIL")
        self.assertEqual(v["violations"], {"rewrites": 1})
        self.assertEqual(v["missing"], {"convergence": ["node 2 did not answer"]})
        self.assertEqual(self.summarize([], problems=["node 1 kept running"])["violations"], {"fsync-stop": 1})

    def test_missing_evidence_or_a_harness_error_is_an_error_not_a_catch(self):
        lacking = checkers.Verdict("no-lost-grants").lacks("no probe_token")
        self.assertEqual(self.summarize([checkers.Verdict("fencing"), lacking])["status"], "ERROR")
        self.assertEqual(self.summarize([checkers.Verdict("fencing")], harness_errors=["no leader"])["status"], "ERROR")
        self.assertEqual(self.summarize([checkers.Verdict("fencing")])["status"], "PASS")


class Performance(unittest.TestCase):
    def test_wgl_on_a_long_history_with_unknowns(self):
        # A deterministic budget, not a time limit: the verdict must not
        # depend on how loaded the machine is.
        sim = Sim(7, keys=("k",), procs_per_key=4, n_ops=3500, p_unknown=.01).run()
        with tempfile.TemporaryDirectory() as d:
            write_run(d, history=sim.history, audit={1: [r for _, r in sim.audit]})
            run = checkers.Run(d)
            v = checkers.check_linearizable(run, budget=50_000, seconds_per_key=None)
        self.assertTrue(v.ok, checkers.format_verdict(v))
        self.assertEqual(v.counts["undecided"], 0)
        self.assertLess(v.counts["max_states"], 50_000)
        self.assertGreater(v.counts["ops"], 2900)
        self.assertGreater(v.counts["unknown"], 15)


if __name__ == "__main__":
    unittest.main()
