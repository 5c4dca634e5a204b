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
                 p_error=0.02, ttl=(100, 300), history_lt=True, lat=.01):
        self.rnd = random.Random(seed)
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

    # -- the server
    def entry(self, t):
        self.index += 1
        self.lt = max(self.lt, int(t * 1000))
        return self.index, self.lt

    def record(self, t, i, lt, ev, key, owner, token, ttl=0, exp=0):
        self.audit.append((t, {"node": 1, "i": i, "lt": lt, "ev": ev, "key": key, "owner": owner,
                               "token": token, "ttl": ttl, "exp": exp}))

    def live(self, t, i, lt, key):
        lock = self.locks[key]
        if lock is not None and lt > lock[2]:
            self.record(t, i, lt, "expired", key, lock[0], lock[1])
            self.locks[key] = lock = None
        return lock

    def expire_tick(self, t):
        due = [k for k, l in self.locks.items() if l is not None and max(self.lt, int(t * 1000)) > l[2]]
        if due:
            i, lt = self.entry(t)
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
            return "fail", {}
        match = lock is not None and lock[0] == owner and lock[1] == op["token"]
        if not match:
            return "fail", ({"error": "LOCKLOST not held"} if f == "renew" else {})
        if f == "renew":
            lock[2] = lt + op["ttl"]
            self.record(t, i, lt, "renewed", key, owner, lock[1], op["ttl"], lt + op["ttl"])
        else:
            self.locks[key] = None
            self.record(t, i, lt, "released", key, owner, lock[1])
        return "ok", info

    # -- the clients
    def spawn(self, key, t):
        pid = self.next_pid
        self.next_pid += 1
        self.procs[pid] = {"key": key, "owner": "c%d" % pid, "held": None, "last": None}
        self.push(t, "invoke", pid)

    def push(self, t, kind, payload):
        self.seq += 1
        heapq.heappush(self.queue, (t, self.seq, kind, payload))

    def choose(self, p):
        r = self.rnd.random()
        if p["held"] is not None:
            f = "renew" if r < .35 else "write" if r < .55 else "release" if r < .75 else "read" if r < .85 else "acquire"
        else:
            f = "acquire" if r < .7 else "read" if r < .85 else ("write" if p["last"] is not None else "acquire")
        op = {"type": "invoke", "id": self.next_id, "f": f, "key": p["key"], "owner": p["owner"]}
        self.next_id += 1
        if f in ("acquire", "renew"):
            op["ttl"] = self.rnd.randint(*self.ttl)
        if f in ("renew", "release"):
            op["token"] = p["held"]
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
                r = rnd.random()
                if r < self.p_unknown:
                    if rnd.random() < .5:
                        self.push(t + rnd.uniform(.0005, .3), "apply", (op, None))
                    done = t + .05
                    self.history.append({"type": "unknown", "id": op["id"], "process": x, "node": op["node"],
                                         "f": op["f"], "key": op["key"], "owner": op["owner"], "t": done,
                                         "error": "timeout"})
                    del self.procs[x]
                    self.spawn(p["key"], done + rnd.uniform(0, .02))
                elif r < self.p_unknown + self.p_error and op["f"] in ("acquire", "renew", "release"):
                    self.push(t + rnd.uniform(.0005, self.lat), "complete", (op, "fail", {"error": "CLUSTERDOWN no leader"}))
                else:
                    self.push(t + rnd.uniform(.0005, self.lat), "apply", (op, rnd.uniform(.0005, self.lat)))
            elif kind == "apply":
                op, delay = x
                status, extra = self.apply(t, op)
                if delay is not None:
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
                elif op["f"] == "release" or (status == "fail" and op["f"] in ("acquire", "renew")):
                    p["held"] = None
                pause = rnd.uniform(.2, .5) if rnd.random() < .05 else rnd.uniform(0, .03)
                self.push(t + pause, "invoke", op["process"])
            elif kind == "tick":
                self.expire_tick(t)
                if self.queue or any(l is not None for l in self.locks.values()):
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
        heal = [{"key": "heal", "ev": "acquired", "token": heal_tok},
                {"key": "heal", "ev": "released", "token": heal_tok}]
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
        final = {"digests": {str(n): [self.index, "9f00"] for n in range(1, nodes + 1)},
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
        for k in ("token", "resource"):
            if k in done and f in ("renew", "release", "write"):
                inv[k] = done.pop(k)
        end = dict(inv, type=status, t=t1 if t1 is not None else t0 + 5)
        for k in ("ttl", "token", "resource"):
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
        v = self.verdicts()[name]
        self.assertFalse(v.skipped, checkers.format_verdict(v))
        return v

    def assertFails(self, name):
        v = self.verdict(name)
        self.assertFalse(v.ok, checkers.format_verdict(v))
        self.assertTrue(v.problems)
        return v

    def assertPasses(self, name):
        v = self.verdict(name)
        self.assertTrue(v.ok, checkers.format_verdict(v))
        return v


class CleanRuns(Base):
    def test_simulated_runs_pass_every_checker(self):
        for seed, history_lt in ((1, True), (2, False), (3, False)):
            with self.subTest(seed=seed):
                d = os.path.join(self.dir, str(seed))
                os.mkdir(d)
                Sim(seed, history_lt=history_lt, p_unknown=.05).run(d)
                vs = checkers.run_all(d)
                for v in vs:
                    self.assertTrue(v.ok and not v.skipped, checkers.format_verdict(v))
                by = {v.name: v for v in vs}
                self.assertGreater(by["no-overlap"].counts["grants"], 20)
                self.assertGreater(by["no-overlap"].counts["expiries"], 0)
                self.assertGreater(by["linearizable"].counts["unknown"], 0)
                self.assertGreater(by["notifications"].counts["events"], 50)
                if not history_lt:  # log times came from the audit
                    self.assertGreater(by["linearizable"].counts["with_lt"], 50)

    def test_many_small_runs_with_many_unknowns_are_linearizable(self):
        for seed in range(10, 40):
            sim = Sim(seed, keys=("k",), procs_per_key=3, n_ops=150, p_unknown=.12,
                      history_lt=seed % 3 == 0).run()
            audit = [r for _, r in sim.audit]
            history = naive_enrich(sim.history, audit) if seed % 3 == 1 else sim.history
            with self.subTest(seed=seed):
                write_run(self.dir, history=history, audit={1: audit})
                self.assertPasses("linearizable")

    def test_missing_files_skip(self):
        vs = checkers.run_all(self.dir)
        self.assertTrue(all(v.ok and v.skipped for v in vs), [checkers.format_verdict(v) for v in vs])
        self.assertTrue(checkers.format_verdict(vs[0]).startswith("fencing: SKIP ("))

    def test_format(self):
        v = checkers.Verdict("x", counts={"a": 1})
        self.assertEqual(checkers.format_verdict(v), "x: PASS (a=1)")
        v.problem("bad thing")
        self.assertEqual(checkers.format_verdict(v), "x: FAIL (a=1, violations=1)\n  - bad thing")


class Fencing(Base):
    def setUp(self):
        super().setUp()
        self.audit = {1: [rec(5, 100, "acquired", "a", 5), rec(9, 200, "acquired", "b", 9, key="k2"),
                          rec(12, 1200, "acquired", "c", 12)]}

    def test_in_order_passes(self):
        res = [{"t": 1, "resource": "k", "token": 5, "owner": "a", "accepted": True, "highest": None},
               {"t": 2, "resource": "k", "token": 12, "owner": "c", "accepted": True, "highest": 5},
               {"t": 3, "resource": "k", "token": 5, "owner": "a", "accepted": False, "highest": 12}]
        write_run(self.dir, audit=self.audit, resource=res)
        v = self.assertPasses("fencing")
        self.assertEqual((v.counts["accepted"], v.counts["rejected"]), (2, 1))

    def test_lower_token_accepted_fails(self):
        res = [{"t": 1, "resource": "k", "token": 12, "owner": "c", "accepted": True, "highest": None},
               {"t": 2, "resource": "k", "token": 5, "owner": "a", "accepted": True, "highest": 12}]
        write_run(self.dir, audit=self.audit, resource=res)
        self.assertIn("after token 12", self.assertFails("fencing").problems[0])

    def test_token_never_granted_for_that_key_fails(self):
        res = [{"t": 1, "resource": "k", "token": 9, "owner": "b", "accepted": True, "highest": None}]
        write_run(self.dir, audit=self.audit, resource=res)
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

    def test_probe_token_not_newer_fails(self):
        h = Hist().op(1, "acquire", 1, 2, "ok", token=5)
        write_run(self.dir, history=h.sorted(), audit={1: [rec(5, 100, "acquired", "o1", 5)]},
                  final={"probe_token": 5})
        self.assertFails("no-lost-grants")


class Linearizable(Base):
    def check(self, h):
        write_run(self.dir, history=h.sorted())
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

    def test_missed_heal_event_fails(self):
        n = self.notify(("k", "acquired")) + self.notify(("k", "acquired"), conn=2)
        n.append({"t": 9, "sub": 1, "conn": 1, "node": 1, "type": "event", "key": "heal", "ev": "acquired"})
        write_run(self.dir, audit=self.audit, final=self.final, notify=n)  # only the old connection got it
        self.assertIn("missed heal event", self.assertFails("notifications").problems[0])


class Convergence(Base):
    def test_same_digests_pass(self):
        write_run(self.dir, final={"digests": {"1": [40, "ab"], "2": [40, "ab"], "3": [40, "ab"]}})
        self.assertEqual(self.assertPasses("convergence").counts["applied_index"], 40)

    def test_different_digests_fail(self):
        write_run(self.dir, final={"digests": {"1": [40, "ab"], "2": [40, "ac"], "3": [40, "ab"]}})
        self.assertIn("digests differ", self.assertFails("convergence").problems[0])


class ClientOverlap(Base):
    def test_counts_believed_overlaps_but_passes(self):
        h = (Hist().op(1, "acquire", 0, 0.01, "ok", token=10, ttl=1000)
             .op(2, "acquire", 0.5, 0.51, "ok", token=20, ttl=1000)
             .op(2, "release", 0.7, 0.71, "ok", token=20))
        write_run(self.dir, history=h.sorted(),
                  resource=[{"t": 1, "resource": "k", "token": 10, "owner": "o1", "accepted": False, "highest": 20}])
        v = self.assertPasses("client-overlap")
        self.assertEqual(v.counts["believed_overlaps"], 1)
        self.assertEqual(v.counts["stale_writes_rejected"], 1)


class Performance(unittest.TestCase):
    def test_wgl_on_a_long_history_with_unknowns(self):
        sim = Sim(7, keys=("k",), procs_per_key=4, n_ops=3500, p_unknown=.01).run()
        with tempfile.TemporaryDirectory() as d:
            write_run(d, history=sim.history)
            run = checkers.Run(d)
            v = checkers.check_linearizable(run)
        self.assertTrue(v.ok, checkers.format_verdict(v))
        self.assertEqual(v.counts["undecided"], 0)
        self.assertGreater(v.counts["ops"], 2900)
        self.assertGreater(v.counts["unknown"], 15)


if __name__ == "__main__":
    unittest.main()
