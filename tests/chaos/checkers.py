"""Safety checkers for a chaos run directory (formats: FORMATS.md beside this file).

    python3 tests/chaos/checkers.py RUN_DIR

prints one verdict per checker and exits 1 if any failed (2 if RUN_DIR is not a
directory). From Python: `run_all(run_dir) -> [Verdict]`, `format_verdict(v)`.

Each checker is independent and reads only the files it needs. Missing evidence
is a failure, never a pass: a checker whose file is absent, or whose evidence is
incomplete (no probe token, a node that gave no digest, no subscriber left to
check), reports FAIL with `missing` set, apart from the violations it found.
Problems list the first examples; `counts["violations"]` has the total.

| checker          | reads                              | judges                                      |
|------------------|------------------------------------|---------------------------------------------|
| fencing          | resource, audit, history           | accepted tokens never decrease, were granted |
| no-overlap       | audit                              | replicas agree; leases of a key never overlap in log time |
| no-lost-grants   | audit, history, final              | acked grants exist, tokens unique, probe newer |
| linearizable     | history, audit (lt)                | per key: a legal order exists (wgl.py), reads of "free" included; undecided fails |
| log-time         | history, audit (lt)                | log time never runs ahead of real time       |
| locklost         | history, audit (lt)                | no renew refused while its lease was live   |
| rewrites         | history, audit                     | a write that changes a lock key in place gives it a new token |
| notifications    | notify, audit, final               | events happened, in log order; healed subscribers got the heal events (key and token) |
| convergence      | final                              | every node gave the same digest             |
| client-overlap   | history, resource                  | no two processes believed they held a key at once |
| waits            | audit, history                     | WAIT queues: FIFO handoffs, none past a deadline, no timeout before it, nobody jumps the queue, granted WAITs have their token |

Leases follow the server's boundary (src/keyspace/mod.rs `is_expired`): live
while `now <= exp`, gone once `now > exp`.

Standard library only.
"""

import bisect
import glob
import json
import os
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field

try:
    from . import wgl
except ImportError:
    import wgl

MAX_PROBLEMS = 10
LEASE_EVENTS = ("acquired", "renewed", "released", "expired")
# A waiter's steps (LOCK.ACQUIRE ... WAIT): `exp` of `queued` is its deadline.
WAIT_EVENTS = ("queued", "handoff", "timedout", "dequeued")
# A rewrite (APPEND on a lock key, workload.py) makes the owner `owner + REWRITE_MARK + n`.
REWRITE_MARK = "+w"
# Log time is whole milliseconds of the nodes' monotonic clock, which the
# harness shares; a failover bug moves it by far more than this.
LOG_TIME_SLACK_MS = 25


@dataclass
class Verdict:
    name: str
    ok: bool = True
    counts: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)
    info: list = field(default_factory=list)
    missing: list = field(default_factory=list)

    @property
    def violations(self):
        return self.counts.get("violations", 0)

    def problem(self, text):
        """Records a violation (the first MAX_PROBLEMS are kept as examples)."""
        self.ok = False
        self.counts["violations"] = self.counts.get("violations", 0) + 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)

    def lacks(self, what):
        """Records missing evidence: the verdict fails, but not for a violation
        (scripts/chaos-planted.sh counts only violations as catching a bug)."""
        self.ok = False
        self.missing.append(what)
        return self


def format_verdict(v):
    counts = ", ".join("%s=%s" % kv for kv in v.counts.items())
    lines = ["%s: %s (%s)" % (v.name, "PASS" if v.ok else "FAIL", counts)]
    lines += ["  - missing evidence: " + m for m in v.missing]
    lines += ["  - " + p for p in v.problems]
    lines += ["  info: " + i for i in v.info]
    return "\n".join(lines)


def lacking(name, what):
    return Verdict(name).lacks(what)


# ---------------------------------------------------------------- loading

def read_jsonl(path):
    """(records, notes). A truncated last line (a killed writer) is dropped with a note."""
    records, notes, bad = [], [], 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().split("\n")
    last = max((k for k, l in enumerate(lines) if l.strip()), default=-1)
    for k, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            if k == last:
                notes.append("%s: dropped a truncated last line" % os.path.basename(path))
            else:
                bad += 1
            continue
        if isinstance(rec, dict):
            records.append(rec)
        else:
            bad += 1
    if bad:
        notes.append("%s: %d lines are not JSON objects (ignored)" % (os.path.basename(path), bad))
    return records, notes


class Audit:
    """The nodes' audit logs, merged.

    Records are grouped per segment (one node between two boots). An entry's
    records for one key, in the order a segment wrote them, must agree across
    segments; a segment that stopped in the middle of an entry may hold a prefix.
    `entries[(i, key)]` is the longest such list, `by_key[key]` the records of a
    key in log order; `divergent` the lists that disagree, whose records
    `records(..., every=True)` also yields (for "was it ever granted" questions).
    """

    def __init__(self, paths):
        self.notes, self.divergent = [], []
        self.files, self.boots, self.raw = len(paths), 0, 0
        self.entries = {}
        for path in paths:
            records, notes = read_jsonl(path)
            self.notes += notes
            segment = defaultdict(list)
            segments = [segment]
            for r in records:
                if r.get("boot"):
                    self.boots += 1
                    segment = defaultdict(list)
                    segments.append(segment)
                    continue
                if r.get("ev") not in LEASE_EVENTS + WAIT_EVENTS or r.get("i") is None or r.get("key") is None:
                    continue
                self.raw += 1
                rec = (r["ev"], r.get("owner"), r.get("token"), r.get("lt"), r.get("ttl"), r.get("exp"))
                seq = segment[(r["i"], r["key"])]
                if rec not in seq:
                    seq.append(rec)
            for seg in segments:
                for ik, seq in seg.items():
                    self._merge(ik, seq, os.path.basename(path))
        # by_key: the lease records; steps_by_key: lease and waiter records.
        self.by_key, self.steps_by_key = defaultdict(list), defaultdict(list)
        for (i, key) in sorted(self.entries, key=lambda ik: (ik[0], ik[1])):
            pos = 0
            for ev, owner, token, lt, ttl, exp in self.entries[(i, key)]:
                rec = {"i": i, "pos": pos, "key": key, "ev": ev, "owner": owner, "token": token,
                       "lt": lt, "ttl": ttl, "exp": exp}
                self.steps_by_key[key].append(rec)
                if ev in LEASE_EVENTS:
                    self.by_key[key].append(rec)
                    pos += 1

    def _merge(self, ik, seq, where):
        have = self.entries.get(ik)
        if have is None:
            self.entries[ik] = list(seq)
            return
        short, long_ = (have, seq) if len(have) <= len(seq) else (seq, have)
        if long_[:len(short)] != short:
            self.divergent.append((ik, have, seq, where))
            return
        self.entries[ik] = list(long_)

    def records(self, ev=None, every=False):
        for recs in self.by_key.values():
            for r in recs:
                if ev is None or r["ev"] == ev:
                    yield r
        if every:
            for (i, key), _, seq, _ in self.divergent:
                for e, owner, token, lt, ttl, exp in seq:
                    if (ev is None and e in LEASE_EVENTS) or e == ev:
                        yield {"i": i, "key": key, "ev": e, "owner": owner, "token": token,
                               "lt": lt, "ttl": ttl, "exp": exp}


class Run:
    """The files of one run directory, each loaded on first use (None when absent)."""

    def __init__(self, run_dir):
        self.dir = run_dir
        self._cache = {}

    def path(self, name):
        p = os.path.join(self.dir, name)
        return p if os.path.isfile(p) else None

    def _load(self, name, loader):
        if name not in self._cache:
            self._cache[name] = loader()
        return self._cache[name]

    def jsonl(self, name):
        def load():
            p = self.path(name)
            return read_jsonl(p) if p else None
        return self._load(name, load)

    @property
    def audit(self):
        def load():
            paths = glob.glob(os.path.join(self.dir, "audit-*.jsonl"))
            paths.sort(key=lambda p: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", p)])
            return Audit(paths) if paths else None
        return self._load("audit", load)

    @property
    def final(self):
        def load():
            p = self.path("final.json")
            if not p:
                return None
            with open(p, encoding="utf-8") as fh:
                return json.load(fh)
        return self._load("final", load)

    @property
    def history(self):
        """(ops, notes): one dict per operation, invoke fields plus `status`
        (ok/fail/unknown; no completion = unknown), `t0`, `t1` (None when
        unknown) and the completion's fields (token, holder, lt, index, error,
        old_token, new_token, ...)."""
        def load():
            got = self.jsonl("history.jsonl")
            if got is None:
                return None
            lines, notes = got
            ops, order, orphans = {}, [], 0
            for r in lines:
                typ, oid = r.get("type"), r.get("id")
                if typ == "invoke":
                    op = dict(r)
                    op.update(status="unknown", t0=r.get("t"), t1=None, t_end=None, lt=None, index=None, error=None)
                    ops[oid] = op
                    order.append(oid)
                elif typ in ("ok", "fail", "unknown"):
                    op = ops.get(oid)
                    if op is None:
                        orphans += 1
                        continue
                    op["status"] = typ
                    op["t1"] = r.get("t") if typ != "unknown" else None
                    op["t_end"] = r.get("t")
                    for k, val in r.items():
                        if k in ("type", "id", "t", "process", "node", "f", "key", "owner"):
                            continue
                        if val is not None or k == "holder":  # a null holder is a read of "free"
                            op[k] = val
            if orphans:
                notes = notes + ["history: %d completions without an invoke (ignored)" % orphans]
            return [ops[oid] for oid in order], notes
        return self._load("history", load)


def is_locklost(op):
    return op["f"] == "renew" and op["status"] == "fail" and str(op.get("error") or "").startswith("LOCKLOST")


def rewritten_from(owner, before):
    """Whether `owner` is `before` after one or more rewrites (REWRITE_MARK)."""
    return owner is not None and before is not None and owner.startswith(before + REWRITE_MARK)


# ---------------------------------------------------------------- checkers

def check_fencing(run):
    v = Verdict("fencing")
    got = run.jsonl("resource.jsonl")
    if got is None:
        return v.lacks("no resource.jsonl")
    writes, v.info = got[0], list(got[1])
    audit = run.audit
    granted = defaultdict(dict)  # key -> token -> owner
    if audit is None:
        v.lacks("no audit-*.jsonl: accepted tokens not compared with grants")
    else:
        for r in audit.records("acquired", every=True):
            granted[r["key"]][r["token"]] = r["owner"]
        # A rewrite gives the lock key a new token, which its (renamed) owner
        # then writes with; the history says which.
        if run.history is None:
            v.lacks("no history.jsonl: tokens given by rewrites unknown")
        for op in (run.history or ([], []))[0]:
            if op["f"] == "rewrite" and op["status"] == "ok" and op.get("new_token") is not None:
                granted[op["key"]].setdefault(op["new_token"], op.get("new_owner"))
    highest = {}
    accepted = rejected = 0
    wrong_highest = current_rejected = foreign = 0
    for n, w in enumerate(writes, 1):
        res, token = w.get("resource"), w.get("token")
        prev = highest.get(res)
        if w.get("highest") != prev and not (w.get("highest") is None and prev is None):
            wrong_highest += 1
        if not w.get("accepted"):
            rejected += 1
            if prev is None or (token is not None and token >= prev):
                current_rejected += 1
            continue
        accepted += 1
        if prev is not None and token < prev:
            v.problem("%s: accepted token %s (owner %s, t=%s) after token %s" % (res, token, w.get("owner"), w.get("t"), prev))
        if audit is not None and run.history is not None:
            owner = granted[res].get(token)
            if owner is None:
                v.problem("%s: accepted token %s (owner %s, t=%s) that no audit record granted for key %s"
                          % (res, token, w.get("owner"), w.get("t"), res))
            elif owner != w.get("owner"):
                foreign += 1
        highest[res] = token if prev is None else max(prev, token)
    v.counts.update(resources=len(highest), accepted=accepted, rejected=rejected)
    if wrong_highest:
        v.info.append("%d writes whose 'highest' differs from the accepted tokens before them" % wrong_highest)
    if current_rejected:
        v.info.append("%d writes rejected although their token was not below the highest (liveness, not safety)" % current_rejected)
    if foreign:
        v.info.append("%d accepted writes used a token granted to another owner (a client bug, not the server's)" % foreign)
    return v


def check_no_overlap(run):
    v = Verdict("no-overlap")
    audit = run.audit
    if audit is None:
        return v.lacks("no audit-*.jsonl")
    v.info += audit.notes
    for (i, key), have, seq, where in audit.divergent:
        v.problem("divergent apply at index %s key %s: %s vs %s (%s)" % (i, key, have, seq, where))
    n = dict(grants=0, renewals=0, releases=0, expiries=0, rewritten=0)
    unseen = implicit = bad_exp = 0
    for key, recs in audit.by_key.items():
        lease = None  # the open lease: dict(token, owner, exp, i)
        closed = set()
        for r in recs:
            ev, tok = r["ev"], r["token"]
            at = "%s: %s token %s (%s) at index %s lt %s" % (key, ev, tok, r["owner"], r["i"], r["lt"])
            if ev in ("acquired", "renewed") and r["exp"] is not None and r["lt"] is not None \
                    and r["ttl"] is not None and r["exp"] != r["lt"] + r["ttl"]:
                bad_exp += 1
            if lease is not None and ev != "acquired" and r["owner"] != lease["owner"] \
                    and rewritten_from(r["owner"], lease["owner"]):
                # The lock key was rewritten in place (no lease event): the
                # lease goes on under the new owner and token, same expiry.
                n["rewritten"] += 1
                closed.add(lease["token"])
                lease.update(token=tok, owner=r["owner"])
            # Live while lt <= exp; a record at a later log time found it gone.
            late = lease is not None and r["lt"] is not None and lease["exp"] is not None and r["lt"] > lease["exp"]
            if ev == "acquired":
                n["grants"] += 1
                if lease is not None and lease["token"] != tok:
                    if not late:
                        v.problem("%s while token %s (%s, index %s) is held until lt %s"
                                  % (at, lease["token"], lease["owner"], lease["i"], lease["exp"]))
                    else:
                        implicit += 1
                    closed.add(lease["token"])
                lease = dict(token=tok, owner=r["owner"], exp=r["exp"], i=r["i"])
            elif ev == "renewed":
                n["renewals"] += 1
                if lease is not None and lease["token"] == tok:
                    if late:
                        v.problem("%s: renews a lease that ended at lt %s" % (at, lease["exp"]))
                    lease["exp"] = r["exp"]
                elif tok in closed:
                    v.problem("%s: renews a lease that had ended" % at)
                elif lease is not None:
                    v.problem("%s while token %s (%s) is open" % (at, lease["token"], lease["owner"]))
                else:
                    unseen += 1
            else:
                n["releases" if ev == "released" else "expiries"] += 1
                if lease is not None and lease["token"] == tok:
                    if ev == "expired" and not late:
                        v.problem("%s: early, the lease runs until lt %s" % (at, lease["exp"]))
                    elif ev == "released" and late:
                        v.problem("%s: releases a lease that ended at lt %s" % (at, lease["exp"]))
                    closed.add(tok)
                    lease = None
                elif tok in closed:
                    v.problem("%s: ends a lease that had already ended" % at)
                elif lease is not None:
                    v.problem("%s while token %s (%s) is open" % (at, lease["token"], lease["owner"]))
                else:
                    unseen += 1
    v.counts.update(keys=len(audit.by_key), nodes=audit.files, boots=audit.boots, **n)
    if unseen:
        v.info.append("%d renew/release/expire records for a grant the audit does not show" % unseen)
    if implicit:
        v.info.append("%d grants after a lease ended without an expired record" % implicit)
    if bad_exp:
        v.info.append("%d grant/renew records where exp != lt + ttl" % bad_exp)
    return v


def check_no_lost_grants(run):
    v = Verdict("no-lost-grants")
    audit = run.audit
    if audit is None:
        return v.lacks("no audit-*.jsonl")
    grants = defaultdict(set)  # token -> {(key, owner, i)}, on any node
    for r in audit.records("acquired", every=True):
        grants[r["token"]].add((r["key"], r["owner"], r["i"]))
    for token, gs in sorted(grants.items(), key=lambda kv: kv[0]):
        if len({(k, o) for k, o, _ in gs}) > 1:
            v.problem("token %s granted to several owners: %s" % (token, ", ".join(
                "%s/%s at index %s" % g for g in sorted(gs, key=repr))))
        elif len(gs) > 1:
            v.problem("token %s granted at several log indexes: %s" % (token, sorted(i for _, _, i in gs)))
    v.counts.update(audit_grants=len(grants))
    got = run.history
    acked = []
    if got is None:
        v.lacks("no history.jsonl: acknowledged grants not checked")
    else:
        ops, notes = got
        v.info += notes
        by_token = defaultdict(set)
        # A rewrite leaves the key with a new owner and token and no lease
        # event: an acknowledged one names both, an unknown one only the owner
        # (whose token must then be one that no grant used).
        rewrote, renamed = set(), set()
        for op in ops:
            if op["f"] != "rewrite":
                continue
            if op["status"] == "ok" and op.get("new_token") is not None:
                rewrote.add((op["key"], op.get("new_owner"), op["new_token"]))
                acked.append(op["new_token"])
                by_token[op["new_token"]].add((op["key"], op.get("new_owner")))
            elif op["status"] == "unknown":
                renamed.add((op["key"], op.get("new_owner")))
        for op in ops:
            if op["f"] == "acquire" and op["status"] == "ok" and op.get("token") is not None:
                tok = op["token"]
                acked.append(tok)
                by_token[tok].add((op["key"], op["owner"]))
                # (The owner of a rewritten lock refreshes it with its new token.)
                if not any(k == op["key"] and o == op["owner"] for k, o, _ in grants.get(tok, ())) \
                        and (op["key"], op["owner"], tok) not in rewrote:
                    v.problem("acquire %s by %s on %s (t=%s) got token %s, which the audit never granted to it"
                              % (op["id"], op["owner"], op["key"], op.get("t1"), tok))
            elif op["f"] == "read" and op["status"] == "ok" and op.get("holder"):
                tok, owner = op["holder"].get("token"), op["holder"].get("owner")
                if tok is not None:
                    acked.append(tok)
                    known = any(k == op["key"] and o == owner for k, o, _ in grants.get(tok, ())) \
                        or (op["key"], owner, tok) in rewrote \
                        or ((op["key"], owner) in renamed and tok not in grants)
                    if not known:
                        v.problem("read %s on %s (t=%s) saw %s holding token %s, which the audit never granted to it"
                                  % (op["id"], op["key"], op.get("t1"), owner, tok))
        for tok, who in sorted(by_token.items()):
            if len(who) > 1:
                v.problem("token %s acknowledged to several owners: %s" % (tok, sorted(who)))
        v.counts.update(acked_grants=sum(1 for op in ops if op["f"] == "acquire" and op["status"] == "ok"))
    final = run.final
    probe = final.get("probe_token") if final else None
    if final is None:
        v.lacks("no final.json: no probe token after the final restart")
    elif probe is None:
        v.lacks("no probe_token in final.json: the LOCK.ACQUIRE after the final restart failed")
    elif acked and probe <= max(acked):
        v.problem("probe token %s after the final restart is not above the highest acknowledged token %s"
                  % (probe, max(acked)))
    if probe is not None:
        v.counts["probe_token"] = probe
    return v


def _lt_join(ops, audit):
    """For ok acquires/renews/releases: {op id: (lt, exp)} where known.

    Preference: the completion's `index` (the audit record at that index);
    its `lt` (exp = lt + ttl); then the audit, aligned per (key, owner, token):
    one owner's ok grants and renewals of one token match that token's
    acquired/renewed records one to one, in order (plus one record at the end
    if the owner's last operation was unknown); likewise its release. A group
    whose counts or kinds do not line up stays unknown. Unknown operations never
    get a log time: the audit must not decide them. Two operations claiming the
    same index (a refreshing acquire joined to the grant's record) keep neither
    claim: a log time too early would make a later renewal look late."""
    want = {"acquire": ("acquired", "renewed"), "renew": ("renewed",), "release": ("released",)}
    entries = audit.entries if audit else {}
    out, groups, last_op, claims = {}, defaultdict(list), {}, defaultdict(int)
    for op in ops:
        if op["f"] in want:
            last_op[(op["key"], op["owner"])] = op
            if op["status"] == "ok" and op.get("index") is not None:
                claims[(op["index"], op["key"])] += 1
    for op in ops:
        if op["status"] != "ok" or op["f"] not in want:
            continue
        kind = "release" if op["f"] == "release" else "lease"
        groups[(op["key"], op["owner"], op.get("token"), kind)].append(op)
        if claims.get((op.get("index"), op["key"]), 0) > 1:
            continue
        for ev, owner, token, lt, _, exp in entries.get((op.get("index"), op["key"]), ()):
            if ev in want[op["f"]] and owner == op["owner"] and token == op.get("token"):
                out[op["id"]] = (lt, exp if kind == "lease" else None)
                break
        else:
            if op.get("lt") is not None:
                ttl = op.get("ttl")
                out[op["id"]] = (op["lt"], op["lt"] + ttl if ttl is not None and kind == "lease" else None)
    if audit is None:
        return out
    recs = defaultdict(list)
    for key, rs in audit.by_key.items():
        for r in rs:
            kind = {"acquired": "lease", "renewed": "lease", "released": "release"}.get(r["ev"])
            if kind:
                recs[(key, r["owner"], r["token"], kind)].append(r)
    for g, gops in groups.items():
        if all(op["id"] in out for op in gops):
            continue
        rs = recs.get(g, [])
        gops.sort(key=lambda op: op["t0"])
        last = last_op[(g[0], g[1])]
        spare = last["status"] == "unknown" and last["f"] in ("acquire", "renew")
        if not (len(rs) == len(gops) or (spare and len(rs) == len(gops) + 1)):
            continue
        if g[3] == "lease" and (rs[0]["ev"] == "acquired") != (gops[0]["f"] == "acquire"):
            continue
        if any(op["f"] == "renew" and r["ev"] != "renewed" for op, r in zip(gops, rs)):
            continue
        for op, r in zip(gops, rs):
            out.setdefault(op["id"], (r["lt"], r["exp"] if g[3] == "lease" else None))
    return out


def _wgl_ops(ops, joined):
    """wgl.Op per history operation of the lock model (writes are not part of it)."""
    out = defaultdict(list)
    for op in ops:
        f, st = op["f"], op["status"]
        if f not in ("acquire", "renew", "release", "rewrite", "read"):
            continue
        if st == "fail":
            # A definite error (no leader, not sent, ...) did nothing and
            # observed nothing. The server's own answers are observations: a
            # nil acquire (denied), a LOCKLOST renew, a release answering 0
            # and a rewrite that found the lock not held (refused).
            if f == "acquire" and not op.get("error"):
                st = "denied"
            elif is_locklost(op) or (f in ("release", "rewrite") and not op.get("error")):
                st = "refused"
            else:
                st = "dropped"
        lt, exp = joined.get(op["id"], (None, None))
        if st == "denied":
            lt = op.get("lt")
        holder = None
        if f == "read" and st == "ok" and op.get("holder"):
            holder = (op["holder"].get("owner"), op["holder"].get("token"))
        new_token = op.get("new_token") if f == "rewrite" and st == "ok" else None
        out[op["key"]].append(wgl.Op(
            op["id"], op["process"], op["owner"], f, st, op["t0"],
            op["t1"] if st != "unknown" else None, op.get("token"), holder, lt, exp,
            ttl=op.get("ttl") if f in ("acquire", "renew") else None,
            new_owner=op.get("new_owner") if f == "rewrite" else None, new_token=new_token))
    return out


def _stale_reads(kops):
    """Definite violations found without a search: a read that returned holder
    token T although an acquire (or a rewrite) issuing a higher token had
    completed before the read was invoked. Tokens only grow, so no order can
    explain it."""
    issued = sorted((o.complete, o.token if o.f == "acquire" else o.new_token) for o in kops
                    if o.status == "ok" and ((o.f == "acquire" and o.token is not None)
                                             or (o.f == "rewrite" and o.new_token is not None)))
    out = []
    best, gi = None, 0
    for o in sorted((o for o in kops if o.f == "read" and o.status == "ok" and o.holder), key=lambda o: o.invoke):
        while gi < len(issued) and issued[gi][0] < o.invoke:
            best = issued[gi][1] if best is None else max(best, issued[gi][1])
            gi += 1
        if best is not None and o.holder[1] is not None and o.holder[1] < best:
            out.append("%s: stale read: %s, but token %s had been issued before it began"
                       % (o.id, o.describe(), best))
    return out


def wgl_budget():
    """States the search may explore per key (RAFTLOCK_WGL_STATES), and an
    optional time limit per key (RAFTLOCK_WGL_SECONDS; none by default, so the
    verdict does not depend on the machine's speed)."""
    seconds = os.environ.get("RAFTLOCK_WGL_SECONDS")
    return int(os.environ.get("RAFTLOCK_WGL_STATES", 5_000_000)), (float(seconds) if seconds else None)


def check_linearizable(run, budget=None, seconds_per_key=None):
    # A key whose search runs out of budget is undecided, and undecided is a
    # failure: the run proves nothing about that key. Long runs may need a
    # larger budget (RAFTLOCK_WGL_STATES).
    if budget is None:
        budget, seconds = wgl_budget()
        seconds_per_key = seconds if seconds_per_key is None else seconds_per_key
    v = Verdict("linearizable")
    got = run.history
    if got is None:
        return v.lacks("no history.jsonl")
    ops, notes = got
    v.info += notes
    audit = run.audit
    if audit is None:
        v.lacks("no audit-*.jsonl: log times only from the history")
    joined = _lt_join(ops, audit)
    per_key = _wgl_ops(ops, joined)
    n_ops = max_states = undecided = unknowns = free_reads = 0
    for key in sorted(per_key):
        kops = per_key[key]
        n_ops += len(kops)
        unknowns += sum(1 for o in kops if o.status == "unknown")
        free_reads += sum(1 for o in kops if o.f == "read" and o.status == "ok" and o.holder is None)
        stale = _stale_reads(kops)
        if stale:
            for line in stale[:5]:
                v.problem("%s: not linearizable: %s" % (key, line))
            v.info.append("%s: %d stale reads; search skipped" % (key, len(stale)))
            continue
        r = wgl.check_key(kops, budget=budget, seconds=seconds_per_key)
        max_states = max(max_states, r.explored)
        if r.ok is None:
            undecided += 1
            v.problem("%s: undecided: the search ran out after %d states (%d required ops, %d unknown); "
                      "raise RAFTLOCK_WGL_STATES (now %d) to decide it" % (key, r.explored, r.required, r.unknowns, budget))
        elif not r.ok:
            v.problem("%s: not linearizable: %s" % (key, r.explain()))
    if not any(o.status in ("ok", "denied") for kops in per_key.values() for o in kops):
        v.info.append("no operation completed: nothing constrains the order")
    with_lt = sum(1 for lt, _ in joined.values() if lt is not None)
    v.counts.update(keys=len(per_key), ops=n_ops, unknown=unknowns, free_reads=free_reads, with_lt=with_lt,
                    max_states=max_states, undecided=undecided)
    return v


def _lease_ops(ops):
    """Per process, in order of sending: its lease operations."""
    by_proc = defaultdict(list)
    for op in ops:
        if op["f"] in ("acquire", "renew", "release", "rewrite"):
            by_proc[op["process"]].append(op)
    for pops in by_proc.values():
        pops.sort(key=lambda o: o["t0"])
    return by_proc


def check_log_time(run):
    """Log time never runs ahead of real time. For acknowledged commands a and
    b with a answered before b was sent (so a is before b in the log):
    lt(b) - lt(a) <= (t1(b) - t0(a)) in ms. A leader stamps a command after it
    was sent and before it is answered, log time advances with the monotonic
    clock the harness shares, and a new leader continues from the end of its
    log (DESIGN.md §4). A leader that continues from a stamp that never
    committed (issue 10, finding 1) breaks it by the time it got ahead."""
    v = Verdict("log-time")
    got = run.history
    if got is None:
        return v.lacks("no history.jsonl")
    audit = run.audit
    if audit is None:
        v.lacks("no audit-*.jsonl: log times only from the history")
    ops = got[0]
    joined = _lt_join(ops, audit)
    timed = [(op["t0"], op["t1"], joined[op["id"]][0], op) for op in ops
             if op["status"] == "ok" and op.get("t1") is not None and joined.get(op["id"], (None,))[0] is not None]
    acked = sum(1 for op in ops if op["status"] == "ok" and op["f"] in ("acquire", "renew", "release"))
    if acked and not timed:
        v.lacks("no acknowledged command has a log time (neither in the history nor joined from the audit)")
    by_t1 = sorted(timed, key=lambda x: x[1])
    best, k = None, 0  # min over answered commands a of lt(a) - 1000 t0(a), and that a
    worst = 0
    for t0, t1, lt, op in sorted(timed, key=lambda x: x[0]):
        while k < len(by_t1) and by_t1[k][1] < t0:
            a = by_t1[k]
            if best is None or a[2] - 1000 * a[0] < best[0]:
                best = (a[2] - 1000 * a[0], a)
            k += 1
        if best is None:
            continue
        ahead = (lt - 1000 * t1) - best[0]
        if ahead > LOG_TIME_SLACK_MS:
            a = best[1]
            worst = max(worst, ahead)
            v.problem("%s %s by %s (op %s, t=[%.3f, %.3f]) at lt %s, but %s %s by %s (op %s, sent t=%.3f) was at lt %s: "
                      "log time advanced %d ms in %d ms of real time"
                      % (op["key"], op["f"], op["owner"], op["id"], t0, t1, lt,
                         a[3]["key"], a[3]["f"], a[3]["owner"], a[3]["id"], a[0], a[2],
                         lt - a[2], round(1000 * (t1 - a[0]))))
    v.counts.update(timed=len(timed), max_ahead_ms=round(worst))
    return v


def check_locklost(run):
    """A renew refused with LOCKLOST while its lease was certainly live is
    wrong. Live: (a) in real time, before the send time of the owner's last
    acquire/renew plus its ttl (the bound DESIGN.md §4 gives clients; see
    wgl.py); or (b) in log time, per the audit: a command sent after the
    refusal was answered carries a log time at or before the lease's end
    (`exp` of the owner's last grant or renewal), so the refusal was judged
    while the lease ran. Only the owner can end its lease early, by a release
    or a rewrite, and a client does neither before renewing."""
    v = Verdict("locklost")
    got = run.history
    if got is None:
        return v.lacks("no history.jsonl")
    audit = run.audit
    if audit is None:
        v.lacks("no audit-*.jsonl: leases judged in real time only")
    ops = got[0]
    joined = _lt_join(ops, audit)
    # The earliest log time among acknowledged commands sent after t: a
    # suffix minimum over the send times.
    timed = sorted((op["t0"], joined[op["id"]][0]) for op in ops
                   if op["status"] == "ok" and joined.get(op["id"], (None,))[0] is not None)
    suffix_min = [None] * (len(timed) + 1)
    for k in range(len(timed) - 1, -1, -1):
        lt = timed[k][1]
        suffix_min[k] = lt if suffix_min[k + 1] is None else min(lt, suffix_min[k + 1])
    sends = [t for t, _ in timed]
    refused = 0
    for pops in _lease_ops(ops).values():
        lease = None  # dict(key, owner, token, until, exp, since): the process's current lease
        for op in pops:
            f, st = op["f"], op["status"]
            if f in ("acquire", "renew") and st == "ok":
                exp = joined.get(op["id"], (None, None))[1]
                lease = dict(key=op["key"], owner=op["owner"], token=op.get("token"),
                             until=op["t0"] + (op.get("ttl") or 0) / 1000.0, exp=exp, since=op)
            elif f == "rewrite" and st == "ok" and lease is not None:
                lease.update(owner=op.get("new_owner"), token=op.get("new_token"))
            elif is_locklost(op):
                refused += 1
                if lease is None or (lease["key"], lease["owner"], lease["token"]) != (op["key"], op["owner"], op.get("token")):
                    continue
                why = None
                if op["t1"] is not None and op["t1"] < lease["until"] - wgl.MARGIN:
                    why = "answered at t=%.3f, before the lease's real-time bound t=%.3f (%s sent at t=%.3f, ttl %s ms)" % (
                        op["t1"], lease["until"], lease["since"]["f"], lease["since"]["t0"], lease["since"].get("ttl"))
                elif lease["exp"] is not None and op["t1"] is not None:
                    k = bisect.bisect_right(sends, op["t1"])
                    later = suffix_min[k]
                    if later is not None and later <= lease["exp"]:
                        why = "a command sent after it was answered ran at lt %s, within the lease (exp %s)" % (
                            later, lease["exp"])
                if why:
                    v.problem("%s: renew by %s token %s (op %s) refused with LOCKLOST while the lease was live: %s"
                              % (op["key"], op["owner"], op.get("token"), op["id"], why))
                lease = None
            elif f == "release" or st != "ok":
                lease = None
    v.counts.update(locklost=refused)
    return v


def check_rewrites(run):
    """A write that changes a lock key's value in place (the workload APPENDs to
    the owner) must give the key a new version, which is its token: different
    from the old grant's, above every token issued before the write was sent,
    and never a grant's token (issue 10, finding 3). The workload's script
    reads LOCK.INFO before and after the APPEND, so the reply shows both."""
    v = Verdict("rewrites")
    got = run.history
    if got is None:
        return v.lacks("no history.jsonl")
    audit = run.audit
    if audit is None:
        v.lacks("no audit-*.jsonl: rewritten tokens not compared with grants")
    ops = got[0]
    granted = defaultdict(set)  # (key, owner) -> tokens, per the audit
    grant_tokens = {}
    for r in audit.records("acquired", every=True) if audit else ():
        granted[(r["key"], r["owner"])].add(r["token"])
        grant_tokens[r["token"]] = (r["key"], r["owner"])
    # Tokens acknowledged to clients, by completion time, to check freshness.
    issued = sorted((op["t1"], op["token"] if op["f"] == "acquire" else op.get("new_token"), op["id"])
                    for op in ops if op["status"] == "ok" and op.get("t1") is not None
                    and ((op["f"] == "acquire" and op.get("token") is not None)
                         or (op["f"] == "rewrite" and op.get("new_token") is not None)))
    mine = {}  # (key, new owner) -> new token, from acknowledged rewrites
    counts = {"ok": 0, "fail": 0, "unknown": 0}
    best, k = None, 0
    for op in sorted((o for o in ops if o["f"] == "rewrite"), key=lambda o: o["t0"]):
        counts[op["status"]] = counts.get(op["status"], 0) + 1
        while k < len(issued) and issued[k][0] < op["t0"]:
            if issued[k][2] != op["id"] and (best is None or issued[k][1] > best):
                best = issued[k][1]
            k += 1
        if op["status"] != "ok":
            continue
        key, held, old, new = op["key"], op.get("token"), op.get("old_token"), op.get("new_token")
        at = "%s: rewrite %s by %s (t=%.3f)" % (key, op["id"], op["owner"], op["t0"])
        mine[(key, op.get("new_owner"))] = new
        if old != held:
            v.problem("%s ran on token %s, but the client held token %s" % (at, old, held))
        if audit is not None and held not in granted[(key, op["owner"])] and mine.get((key, op["owner"])) != held:
            v.problem("%s: token %s was never granted to %s (audit) nor given by an earlier rewrite" % (at, held, op["owner"]))
        if new is None or old is None:
            v.problem("%s: the reply lacks the token before or after the write" % at)
            continue
        if new == old:
            v.problem("%s changed the value but kept the old grant's token %s" % (at, old))
        elif new < old:
            v.problem("%s lowered the token from %s to %s" % (at, old, new))
        if new != old and new in grant_tokens:
            v.problem("%s gave token %s, which the audit shows granted to %s" % (at, new, "/".join(grant_tokens[new])))
        if best is not None and new <= best and new != old:
            v.problem("%s gave token %s, not above token %s acknowledged before it was sent" % (at, new, best))
    v.counts.update(rewrites=sum(counts.values()), ok=counts["ok"], refused=counts["fail"], unknown=counts["unknown"])
    return v


def _embeds(evs, seq, lo, hi):
    """Whether the event kinds `evs` are a subsequence of seq[lo:hi]."""
    at = lo
    for ev in evs:
        while at < hi and seq[at] != ev:
            at += 1
        if at >= hi:
            return False
        at += 1
    return True


def _received(events, seq, anchors):
    """Whether one connection's events for one key (`events`: [(t, ev)] in the
    order received) can be read as a subsequence of the key's log (`seq`: its
    event kinds in log order) that maps an event to each anchor (`anchors`:
    [(position in seq, ev, t_sent)], increasing), each received no earlier than
    the command behind it was sent. Notifications carry no token, so this is
    how an event is tied to the record, and so the token, it stands for.
    (Only events received after the command was sent can stand for an anchor,
    so there are few candidates to try.)"""
    tried = set()

    def place(i, a):
        """events[i:] from the log position after anchor a - 1 on, hitting anchors[a:]."""
        lo = anchors[a - 1][0] + 1 if a else 0
        if a == len(anchors):
            return _embeds([e for _, e in events[i:]], seq, lo, len(seq))
        if (i, a) in tried:
            return False
        tried.add((i, a))
        pos, ev, t_sent = anchors[a]
        at = lo  # where the greedy embedding of events[i:j] has got to
        for j in range(i, len(events)):
            if at > pos:
                break  # events[i:j] no longer fit before the anchor
            t, e = events[j]
            if e == ev and t >= t_sent and place(j + 1, a + 1):
                return True
            while at < len(seq) and seq[at] != e:
                at += 1
            at += 1
        return False
    return place(0, 0)


def check_notifications(run):
    v = Verdict("notifications")
    got = run.jsonl("notify.jsonl")
    if got is None:
        return v.lacks("no notify.jsonl")
    recs, v.info = got[0], list(got[1])
    conns = defaultdict(list)  # (sub, conn) -> [(t, key, ev)]
    subs_conns = defaultdict(set)
    other = 0
    for r in recs:
        sc = (r.get("sub"), r.get("conn"))
        subs_conns[sc[0]].add(sc[1])
        if r.get("type") != "event":
            continue
        ev = str(r.get("ev", ""))
        ev = ev[5:] if ev.startswith("lock.") else ev
        if ev not in LEASE_EVENTS:
            other += 1
            continue
        conns[sc].append((r.get("t"), r.get("key"), ev))
    events = sum(len(e) for e in conns.values())
    audit = run.audit
    seqs = {}
    if audit is None:
        v.lacks("no audit-*.jsonl: events not compared with the log")
    else:
        seqs = {k: [r["ev"] for r in rs] for k, rs in audit.by_key.items()}
        for (sub, conn), evs in sorted(conns.items(), key=lambda kv: repr(kv[0])):
            pos = defaultdict(int)
            for n, (_, key, ev) in enumerate(evs, 1):
                seq, at = seqs.get(key, ()), pos[key]
                while at < len(seq) and seq[at] != ev:
                    at += 1
                if at >= len(seq):
                    v.problem("sub %s conn %s: event #%d %s %s never happened or is out of log order"
                              % (sub, conn, n, key, ev))
                    continue
                pos[key] = at + 1
    final = run.final
    heal = (final or {}).get("heal_events") or []
    live = (final or {}).get("live_subs") or []
    if final is None:
        v.lacks("no final.json: heal events not checked")
    elif not heal:
        v.lacks("no heal events in final.json: nothing to check the live subscribers with")
    elif not live:
        v.lacks("no subscriber stayed connected through the heal phase: heal events not checked")
    # Each heal event is one audit record, found by key, kind and token.
    anchors = defaultdict(list)  # key -> [(position in the key's log, ev, t sent)]
    if audit is not None:
        for k, h in enumerate(heal, 1):
            key, ev, token = h.get("key"), h.get("ev"), h.get("token")
            at = next((n for n, r in enumerate(audit.by_key.get(key, ())) if r["ev"] == ev and r["token"] == token), None)
            if at is None:
                v.problem("heal event #%d %s %s token %s is not in the audit" % (k, key, ev, token))
                continue
            t = h.get("t")
            anchors[key].append((at, ev, float("-inf") if t is None else t))
    for sub in live:
        if not subs_conns.get(sub):
            v.problem("live subscriber %s has no connection in notify.jsonl" % sub)
            continue
        conn = max(subs_conns[sub], key=lambda c: (c is not None, c))
        got_evs = conns.get((sub, conn), [])
        for key, anc in sorted(anchors.items()):
            anc.sort()
            mine = [(t if t is not None else float("inf"), ev) for t, k, ev in got_evs if k == key]
            if not _received(mine, seqs.get(key, []), anc):
                v.problem("sub %s conn %s missed a heal event on %s (%s), or got it out of log order"
                          % (sub, conn, key, ", ".join("%s at log position %d" % (ev, p) for p, ev, _ in anc)))
    v.counts.update(events=events, subscribers=len(subs_conns),
                    connections=sum(len(c) for c in subs_conns.values()),
                    heal_events=len(heal), live_subs=len(live))
    if other:
        v.info.append("%d events of other kinds ignored" % other)
    return v


def check_convergence(run):
    v = Verdict("convergence")
    final = run.final
    if final is None:
        return v.lacks("no final.json")
    digests = final.get("digests") or {}
    nodes = [str(n) for n in final.get("nodes") or []]
    if not nodes and run.audit is not None:
        # final.json before it listed the nodes: the audit logs name them.
        nodes = sorted({os.path.basename(p)[len("audit-"):-len(".jsonl")]
                        for p in glob.glob(os.path.join(run.dir, "audit-*.jsonl"))})
    if not nodes:
        v.lacks("final.json does not list the nodes, and there are no audit logs to count them")
    for node in nodes:
        if digests.get(node) is None:
            v.lacks("node %s did not answer RAFT.DIGEST" % node)
    values = defaultdict(list)
    for node, d in sorted(digests.items()):
        if d is None:
            continue
        values[tuple(d)].append(node)
    if len(values) > 1:
        v.problem("digests differ: " + "; ".join(
            "nodes %s: applied %s %s" % (",".join(ns), d[0], d[1]) for d, ns in sorted(values.items(), key=repr)))
    v.counts.update(nodes=len(nodes), answered=sum(1 for d in digests.values() if d is not None))
    if len(values) == 1:
        v.counts["applied_index"] = next(iter(values))[0]
    # The same, after healing and before the final restart: a node that
    # stopped applying (its process alive) shows here and nowhere else.
    healed = final.get("healed_digests")
    if healed is None:
        v.info.append("no healed_digests in final.json: nodes not compared before the final restart")
    else:
        seen = {tuple(d) for d in healed.values() if d is not None}
        behind = [n for n in nodes if healed.get(n) is None]
        if len(seen) > 1 or behind:
            v.problem("not caught up after healing, before the final restart: " + "; ".join(
                ["node %s: applied %s %s" % (n, d[0], d[1]) for n, d in sorted(healed.items()) if d is not None]
                + ["node %s did not answer" % n for n in behind]))
    return v


def _overlapping_beliefs(ops, base):
    """Pairs of processes that believed they held the same key at once:
    (count, the first examples). A process holds it from an ok acquire/renew
    until that request's `base` time (t0: sent, the bound DESIGN.md §4 gives
    clients; t1: answered, a naive client) + ttl, until it sends a release, or
    until it learns otherwise (a failed or unknown renew, acquire, release or
    rewrite)."""
    spans = defaultdict(list)  # key -> [(start, end, process)]
    by_proc = defaultdict(list)
    for op in ops:
        if op["f"] in ("acquire", "renew", "release", "rewrite"):
            by_proc[(op["key"], op["process"])].append(op)
    for (key, proc), pops in by_proc.items():
        held = None
        for op in sorted(pops, key=lambda o: o["t0"]):
            if held is not None and op["t0"] >= held[1]:
                spans[key].append((held[0], held[1], proc))
                held = None
            if op["f"] in ("acquire", "renew") and op["status"] == "ok":
                # A renewal replaces the lease's end (it may even shorten it).
                end = op[base] + (op.get("ttl") or 0) / 1000.0
                held = [op["t1"], end] if held is None else [held[0], end]
            elif held is not None and (op["f"] == "release" or op["status"] != "ok"):
                learned = op["t0"] if op["f"] == "release" else (op.get("t_end") or op["t0"])
                spans[key].append((held[0], min(held[1], learned), proc))
                held = None
        if held is not None:
            spans[key].append((held[0], held[1], proc))
    pairs, examples = 0, []
    for key, ss in sorted(spans.items()):
        ss = sorted(s for s in ss if s[1] > s[0])
        for a, (s0, e0, p0) in enumerate(ss):
            for s1, e1, p1 in ss[a + 1:]:
                if s1 >= e0:
                    break
                if p1 != p0:
                    pairs += 1
                    if len(examples) < MAX_PROBLEMS:
                        examples.append("%s: process %s held it over t=[%.3f, %.3f] and process %s over [%.3f, %.3f]"
                                        % (key, p0, s0, e0, p1, s1, e1))
    return pairs, examples


def check_client_overlap(run):
    """Mutual exclusion as clients see it: with each lease counted from its
    request's send time (the bound a correct server keeps, whatever fails), no
    two processes may have believed they held a key at once. The naive count
    (from the reply's time) is information: fencing is what keeps that safe."""
    v = Verdict("client-overlap")
    got = run.history
    if got is None:
        return v.lacks("no history.jsonl")
    ops = got[0]
    pairs, examples = _overlapping_beliefs(ops, "t0")
    for e in examples:
        v.problem("believed overlap: " + e)
    if pairs > len(examples):  # problem() counted only the examples
        v.counts["violations"] = pairs
    v.counts["believed_overlaps"] = pairs
    v.counts["naive_overlaps"] = _overlapping_beliefs(ops, "t1")[0]
    res = run.jsonl("resource.jsonl")
    if res is None:
        v.lacks("no resource.jsonl")
    else:
        v.counts["stale_writes_rejected"] = sum(1 for w in res[0] if not w.get("accepted"))
    v.counts["write_ops_failed"] = sum(1 for o in ops if o["f"] == "write" and o["status"] == "fail")
    return v


def check_waits(run):
    """LOCK.ACQUIRE ... WAIT. Replays each key's queue from the audit, in log
    order: a handoff goes to the first waiter in line (FIFO), never after its
    deadline, with the token of the grant recorded just before it in the same
    entry; a wait times out only after its deadline; only waiters leave the
    queue; nobody outside the queue takes a lock others are queued for. And
    each WAIT a client saw granted carries a token the audit granted (or
    renewed) to that owner."""
    v = Verdict("waits")
    audit = run.audit
    if audit is None:
        return v.lacks("no audit-*.jsonl")
    n = defaultdict(int)
    for key, recs in sorted(audit.steps_by_key.items()):
        queue = []  # [owner, deadline], first in line first
        for at, r in enumerate(recs):
            ev, owner, lt = r["ev"], r["owner"], r["lt"]
            where = "%s index %s" % (key, r["i"])
            mine = next((w for w in queue if w[0] == owner), None)
            if ev == "queued":
                n["queued"] += 1
                if mine is not None:
                    mine[1] = r["exp"]  # a retried WAIT keeps its place
                else:
                    queue.append([owner, r["exp"]])
            elif ev in ("timedout", "dequeued"):
                n[ev] += 1
                if mine is None:
                    v.problem("%s: %s %s, which was not waiting" % (where, owner, ev))
                    continue
                if ev == "timedout" and lt is not None and lt <= mine[1]:
                    v.problem("%s: %s timed out at log time %s, before its deadline %s" % (where, owner, lt, mine[1]))
                queue.remove(mine)
            elif ev == "handoff":
                n["handoffs"] += 1
                if mine is None:
                    v.problem("%s: handed to %s, which was not waiting" % (where, owner))
                    continue
                if queue[0] is not mine:
                    v.problem("%s: handed to %s, but %s was first in line" % (where, owner, queue[0][0]))
                if lt is not None and lt > mine[1]:
                    v.problem("%s: handed to %s at log time %s, after its deadline %s" % (where, owner, lt, mine[1]))
                grant = recs[at - 1] if at else None
                if not (grant and grant["ev"] == "acquired" and grant["i"] == r["i"] and grant["owner"] == owner
                        and grant["token"] == r["token"]):
                    v.problem("%s: handoff to %s with token %s is not the grant recorded before it"
                              % (where, owner, r["token"]))
                queue.remove(mine)
            elif ev == "acquired" and queue:
                after = recs[at + 1] if at + 1 < len(recs) else None
                if not (after and after["ev"] == "handoff" and after["i"] == r["i"] and after["owner"] == owner):
                    v.problem("%s: %s took the lock (token %s) while %s waited for it"
                              % (where, owner, r["token"], ", ".join(w[0] for w in queue)))
        n["left_waiting"] += len(queue)
    got = run.history
    if got is None:
        v.lacks("no history.jsonl: the clients' WAITs not checked")
    else:
        granted = defaultdict(set)
        for r in audit.records(every=True):
            if r["ev"] in ("acquired", "renewed"):
                granted[r["key"]].add((r["owner"], r["token"]))
        for op in got[0]:
            if op["f"] != "acquire" or op.get("wait") is None:
                continue
            n["client_waits"] += 1
            if op["status"] != "ok":
                continue
            n["client_wait_grants"] += 1
            if (op["owner"], op.get("token")) not in granted[op["key"]]:
                v.problem("%s: %s's WAIT was answered token %s, which the audit never granted it"
                          % (op["key"], op["owner"], op.get("token")))
        if not n["client_waits"]:
            v.lacks("no client used WAIT")
    if not n["handoffs"]:
        v.lacks("no lock was handed to a waiter: the queues were never exercised")
    v.counts.update(n)
    return v


CHECKERS = [
    ("fencing", check_fencing),
    ("no-overlap", check_no_overlap),
    ("no-lost-grants", check_no_lost_grants),
    ("linearizable", check_linearizable),
    ("log-time", check_log_time),
    ("locklost", check_locklost),
    ("rewrites", check_rewrites),
    ("notifications", check_notifications),
    ("convergence", check_convergence),
    ("client-overlap", check_client_overlap),
    ("waits", check_waits),
]


def run_all(run_dir):
    """Every checker on `run_dir`. A checker that crashes fails for want of
    evidence it could read, not for a violation: a harness error must never
    count as catching a planted bug."""
    run = Run(run_dir)
    out = []
    for name, fn in CHECKERS:
        try:
            out.append(fn(run))
        except Exception as e:  # a malformed file must not hide the other verdicts
            v = Verdict(name)
            v.lacks("checker crashed: %s: %s" % (type(e).__name__, e))
            out.append(v)
    return out


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip().split("\n\n")[0] if len(argv) == 2 else "usage: checkers.py RUN_DIR", file=sys.stderr)
        return 2
    if not os.path.isdir(argv[1]):
        print("not a directory: %s" % argv[1], file=sys.stderr)
        return 2
    verdicts = run_all(argv[1])
    for v in verdicts:
        print(format_verdict(v))
    return 0 if all(v.ok for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
