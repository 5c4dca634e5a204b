"""Safety checkers for a chaos run directory (formats: FORMATS.md beside this file).

    python3 tests/chaos/checkers.py RUN_DIR

prints one verdict per checker and exits 1 if any failed (2 if RUN_DIR is not a
directory). From Python: `run_all(run_dir) -> [Verdict]`, `format_verdict(v)`.

Each checker is independent and reads only the files it needs; a checker whose
required file is missing reports SKIP (ok). Problems list the first examples;
`counts["violations"]` has the total.

| checker          | reads                              | judges                                      |
|------------------|------------------------------------|---------------------------------------------|
| fencing          | resource, audit                    | accepted tokens never decrease, were granted |
| no-overlap       | audit                              | replicas agree; leases of a key never overlap in log time |
| no-lost-grants   | audit, history, final              | acked grants exist, tokens unique, probe newer |
| linearizable     | history (+ lt from audit)          | per key: a legal order exists (wgl.py)      |
| notifications    | notify, audit, final               | events happened, in log order; healed subscribers got them |
| convergence      | final                              | every node's digest is the same             |
| client-overlap   | history, resource                  | information only: believed overlaps, stale writes |

Standard library only.
"""

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


@dataclass
class Verdict:
    name: str
    ok: bool = True
    counts: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)
    info: list = field(default_factory=list)

    @property
    def skipped(self):
        return "skipped" in self.counts

    def problem(self, text):
        """Records a violation (the first MAX_PROBLEMS are kept as examples)."""
        self.ok = False
        self.counts["violations"] = self.counts.get("violations", 0) + 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)


def format_verdict(v):
    status = "SKIP" if v.skipped else ("PASS" if v.ok else "FAIL")
    counts = ", ".join("%s=%s" % kv for kv in v.counts.items())
    lines = ["%s: %s (%s)" % (v.name, status, counts)]
    lines += ["  - " + p for p in v.problems]
    lines += ["  info: " + i for i in v.info]
    return "\n".join(lines)


def skip(name, why):
    return Verdict(name, True, {"skipped": why})


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
                if r.get("ev") not in LEASE_EVENTS or r.get("i") is None or r.get("key") is None:
                    continue
                self.raw += 1
                rec = (r["ev"], r.get("owner"), r.get("token"), r.get("lt"), r.get("ttl"), r.get("exp"))
                seq = segment[(r["i"], r["key"])]
                if rec not in seq:
                    seq.append(rec)
            for seg in segments:
                for ik, seq in seg.items():
                    self._merge(ik, seq, os.path.basename(path))
        self.by_key = defaultdict(list)
        for (i, key) in sorted(self.entries, key=lambda ik: (ik[0], ik[1])):
            for pos, (ev, owner, token, lt, ttl, exp) in enumerate(self.entries[(i, key)]):
                self.by_key[key].append(
                    {"i": i, "pos": pos, "key": key, "ev": ev, "owner": owner, "token": token,
                     "lt": lt, "ttl": ttl, "exp": exp})

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
                    if ev is None or e == ev:
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
        unknown) and the completion's fields (token, holder, lt, index, error)."""
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
                    for k in ("token", "holder", "lt", "index", "error"):
                        if r.get(k) is not None:
                            op[k] = r[k]
                    if "holder" in r:
                        op["holder"] = r["holder"]
            if orphans:
                notes = notes + ["history: %d completions without an invoke (ignored)" % orphans]
            return [ops[oid] for oid in order], notes
        return self._load("history", load)


# ---------------------------------------------------------------- checkers

def check_fencing(run):
    v = Verdict("fencing")
    got = run.jsonl("resource.jsonl")
    if got is None:
        return skip(v.name, "no resource.jsonl")
    writes, v.info = got[0], list(got[1])
    audit = run.audit
    granted = defaultdict(dict)  # key -> token -> owner
    if audit is None:
        v.info.append("no audit logs: accepted tokens not compared with grants")
    else:
        for r in audit.records("acquired", every=True):
            granted[r["key"]][r["token"]] = r["owner"]
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
        if audit is not None:
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
        return skip(v.name, "no audit-*.jsonl")
    v.info += audit.notes
    for (i, key), have, seq, where in audit.divergent:
        v.problem("divergent apply at index %s key %s: %s vs %s (%s)" % (i, key, have, seq, where))
    n = dict(grants=0, renewals=0, releases=0, expiries=0)
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
            if ev == "acquired":
                n["grants"] += 1
                if lease is not None and lease["token"] != tok:
                    if r["lt"] < lease["exp"]:
                        v.problem("%s while token %s (%s, index %s) is held until lt %s"
                                  % (at, lease["token"], lease["owner"], lease["i"], lease["exp"]))
                    else:
                        implicit += 1
                    closed.add(lease["token"])
                lease = dict(token=tok, owner=r["owner"], exp=r["exp"], i=r["i"])
            elif ev == "renewed":
                n["renewals"] += 1
                if lease is not None and lease["token"] == tok:
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
                    if ev == "expired" and r["lt"] < lease["exp"]:
                        v.problem("%s: early, the lease ran until lt %s" % (at, lease["exp"]))
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
        return skip(v.name, "no audit-*.jsonl")
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
        v.info.append("no history.jsonl: acknowledged grants not checked")
    else:
        ops, notes = got
        v.info += notes
        by_token = defaultdict(set)
        for op in ops:
            if op["f"] == "acquire" and op["status"] == "ok" and op.get("token") is not None:
                tok = op["token"]
                acked.append(tok)
                by_token[tok].add((op["key"], op["owner"]))
                if not any(k == op["key"] and o == op["owner"] for k, o, _ in grants.get(tok, ())):
                    v.problem("acquire %s by %s on %s (t=%s) got token %s, which the audit never granted to it"
                              % (op["id"], op["owner"], op["key"], op.get("t1"), tok))
            elif op["f"] == "read" and op["status"] == "ok" and op.get("holder"):
                tok, owner = op["holder"].get("token"), op["holder"].get("owner")
                if tok is not None:
                    acked.append(tok)
                    if not any(k == op["key"] and o == owner for k, o, _ in grants.get(tok, ())):
                        v.problem("read %s on %s (t=%s) saw %s holding token %s, which the audit never granted to it"
                                  % (op["id"], op["key"], op.get("t1"), owner, tok))
        for tok, who in sorted(by_token.items()):
            if len(who) > 1:
                v.problem("token %s acknowledged to several owners: %s" % (tok, sorted(who)))
        v.counts.update(acked_grants=sum(1 for op in ops if op["f"] == "acquire" and op["status"] == "ok"))
    final = run.final
    probe = final.get("probe_token") if final else None
    if probe is None:
        v.info.append("no probe_token in final.json")
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
        if f not in ("acquire", "renew", "release", "read"):
            continue
        if st == "fail":
            # A definite error (no leader, ...) did nothing and observed nothing;
            # only a plain denied acquire (nil reply, no `error`) is a "fail".
            if f == "acquire" and not op.get("error"):
                st = "denied"
            else:
                st = "dropped"
        lt, exp = joined.get(op["id"], (None, None))
        if st == "denied":
            lt = op.get("lt")
        holder = None
        if f == "read" and st == "ok" and op.get("holder"):
            holder = (op["holder"].get("owner"), op["holder"].get("token"))
        out[op["key"]].append(wgl.Op(
            op["id"], op["process"], op["owner"], f, st, op["t0"],
            op["t1"] if st != "unknown" else None, op.get("token"), holder, lt, exp))
    return out


def _stale_reads(kops):
    """Definite violations found without a search: a read that returned holder
    token T although an acquire granting a higher token had completed before
    the read was invoked. Tokens only grow, so no order can explain it."""
    grants = sorted((o.complete, o.token) for o in kops
                    if o.f == "acquire" and o.status == "ok" and o.token is not None)
    out = []
    best, gi = None, 0
    for o in sorted((o for o in kops if o.f == "read" and o.status == "ok" and o.holder), key=lambda o: o.invoke):
        while gi < len(grants) and grants[gi][0] < o.invoke:
            best = grants[gi][1] if best is None else max(best, grants[gi][1])
            gi += 1
        if best is not None and o.holder[1] is not None and o.holder[1] < best:
            out.append("%s: stale read: %s, but token %s had been granted before it began"
                       % (o.id, o.describe(), best))
    return out


def check_linearizable(run, budget=None, seconds_per_key=None):
    # Long runs may allow the search more room (RAFTLOCK_WGL_STATES,
    # RAFTLOCK_WGL_SECONDS); a key whose search runs out is reported as
    # undecided (information), never as a pass of its own.
    if budget is None:
        budget = int(os.environ.get("RAFTLOCK_WGL_STATES", 2_000_000))
    if seconds_per_key is None:
        seconds_per_key = float(os.environ.get("RAFTLOCK_WGL_SECONDS", 20.0))
    v = Verdict("linearizable")
    got = run.history
    if got is None:
        return skip(v.name, "no history.jsonl")
    ops, notes = got
    v.info += notes
    joined = _lt_join(ops, run.audit)
    per_key = _wgl_ops(ops, joined)
    n_ops = max_states = undecided = unknowns = 0
    for key in sorted(per_key):
        kops = per_key[key]
        n_ops += len(kops)
        unknowns += sum(1 for o in kops if o.status == "unknown")
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
            v.info.append("%s: undecided after %d states (%d required ops, %d unknown)"
                          % (key, r.explored, r.required, r.unknowns))
        elif not r.ok:
            v.problem("%s: not linearizable: %s" % (key, r.explain()))
    if not any(o.status in ("ok", "denied") for kops in per_key.values() for o in kops):
        v.info.append("no operation completed: nothing constrains the order")
    with_lt = sum(1 for lt, _ in joined.values() if lt is not None)
    v.counts.update(keys=len(per_key), ops=n_ops, unknown=unknowns, with_lt=with_lt,
                    max_states=max_states, undecided=undecided)
    return v


def check_notifications(run):
    v = Verdict("notifications")
    got = run.jsonl("notify.jsonl")
    if got is None:
        return skip(v.name, "no notify.jsonl")
    recs, v.info = got[0], list(got[1])
    conns = defaultdict(list)  # (sub, conn) -> [(key, ev)]
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
        conns[sc].append((r.get("key"), ev))
    events = sum(len(e) for e in conns.values())
    audit = run.audit
    if audit is None:
        v.info.append("no audit logs: events not compared with the log")
    else:
        seqs = {k: [r["ev"] for r in rs] for k, rs in audit.by_key.items()}
        for (sub, conn), evs in sorted(conns.items(), key=lambda kv: repr(kv[0])):
            pos = defaultdict(int)
            for n, (key, ev) in enumerate(evs, 1):
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
        v.info.append("no final.json: heal events not checked")
    for sub in live:
        if not subs_conns.get(sub):
            if heal:
                v.problem("live subscriber %s has no connection in notify.jsonl" % sub)
            continue
        conn = max(subs_conns[sub], key=lambda c: (c is not None, c))
        got_evs, at = conns.get((sub, conn), []), 0
        for k, h in enumerate(heal, 1):
            want = (h.get("key"), h.get("ev"))
            while at < len(got_evs) and got_evs[at] != want:
                at += 1
            if at >= len(got_evs):
                v.problem("sub %s conn %s missed heal event #%d %s %s (token %s), or got it out of order"
                          % (sub, conn, k, want[0], want[1], h.get("token")))
                break
            at += 1
    if audit is not None and heal:
        seen = {(r["key"], r["ev"], r["token"]) for r in audit.records()}
        absent = [h for h in heal if (h.get("key"), h.get("ev"), h.get("token")) not in seen]
        if absent:
            v.info.append("%d heal events not in the audit, e.g. %s" % (len(absent), absent[0]))
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
        return skip(v.name, "no final.json")
    digests = final.get("digests") or {}
    if not digests:
        return skip(v.name, "final.json has no digests")
    values = defaultdict(list)
    for node, d in sorted(digests.items()):
        if d is None:
            v.problem("node %s gave no digest" % node)
            continue
        values[tuple(d)].append(node)
    if len(values) > 1:
        v.problem("digests differ: " + "; ".join(
            "nodes %s: applied %s %s" % (",".join(ns), d[0], d[1]) for d, ns in sorted(values.items(), key=repr)))
    v.counts.update(nodes=len(digests))
    if len(values) == 1:
        v.counts["applied_index"] = next(iter(values))[0]
    return v


def _overlapping_beliefs(ops, base):
    """Pairs of processes that believed they held the same key at once. A
    process holds it from an ok acquire/renew until that request's `base` time
    (t0: sent, the bound DESIGN.md §4 gives clients; t1: answered, a naive
    client) + ttl, until it sends a release, or until it learns otherwise (a
    failed or unknown renew, acquire or release)."""
    spans = defaultdict(list)  # key -> [(start, end, process)]
    by_proc = defaultdict(list)
    for op in ops:
        if op["f"] in ("acquire", "renew", "release"):
            by_proc[(op["key"], op["process"])].append(op)
    for (key, proc), pops in by_proc.items():
        held = None
        for op in sorted(pops, key=lambda o: o["t0"]):
            if held is not None and op["t0"] >= held[1]:
                spans[key].append((held[0], held[1], proc))
                held = None
            if op["f"] in ("acquire", "renew") and op["status"] == "ok":
                end = op[base] + (op.get("ttl") or 0) / 1000.0
                held = [op["t1"], end] if held is None else [held[0], max(held[1], end)]
            elif held is not None and (op["f"] == "release" or op["status"] != "ok"):
                learned = op["t0"] if op["f"] == "release" else (op.get("t_end") or op["t0"])
                spans[key].append((held[0], min(held[1], learned), proc))
                held = None
        if held is not None:
            spans[key].append((held[0], held[1], proc))
    pairs = 0
    for ss in spans.values():
        ss = sorted(s for s in ss if s[1] > s[0])
        for a, (s0, e0, p0) in enumerate(ss):
            for s1, e1, p1 in ss[a + 1:]:
                if s1 >= e0:
                    break
                pairs += p1 != p0
    return pairs


def check_client_overlap(run):
    v = Verdict("client-overlap")
    got = run.history
    if got is None:
        return skip(v.name, "no history.jsonl")
    ops = got[0]
    pairs = _overlapping_beliefs(ops, "t0")
    v.counts["believed_overlaps"] = pairs
    v.counts["naive_overlaps"] = _overlapping_beliefs(ops, "t1")
    res = run.jsonl("resource.jsonl")
    if res is not None:
        v.counts["stale_writes_rejected"] = sum(1 for w in res[0] if not w.get("accepted"))
    v.counts["write_ops_failed"] = sum(1 for o in ops if o["f"] == "write" and o["status"] == "fail")
    if pairs:
        v.info.append("%d pairs of processes believed they held the same key at the same time, "
                      "counting each lease from its request's send time (fencing keeps that safe)" % pairs)
    return v


CHECKERS = [
    ("fencing", check_fencing),
    ("no-overlap", check_no_overlap),
    ("no-lost-grants", check_no_lost_grants),
    ("linearizable", check_linearizable),
    ("notifications", check_notifications),
    ("convergence", check_convergence),
    ("client-overlap", check_client_overlap),
]


def run_all(run_dir):
    """Every checker on `run_dir`; a checker that crashes reports FAIL with the error."""
    run = Run(run_dir)
    out = []
    for name, fn in CHECKERS:
        try:
            out.append(fn(run))
        except Exception as e:  # a malformed file must not hide the other verdicts
            v = Verdict(name)
            v.problem("checker crashed: %s: %s" % (type(e).__name__, e))
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
