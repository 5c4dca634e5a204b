"""Wing-Gong-Lowe linearizability search for one lock key (fenced-mutex model).

`check_key(ops)` decides whether the operations on one key, with their real-time
windows, can be put in a sequential order that a fenced mutex with leases could
have produced. It is deliberately lenient wherever the history cannot see what
the server saw (the model must never flag a correct server):

* a lease can end silently (expire) at any moment the history cannot rule out,
  so a held state means "the last grant, possibly already expired" and only an
  observation ("free", a refusal) or a release ends it for certain;
* log time `lt` is used only when known (from the history or the audit), and an
  `exp` of None means "unknown";
* an `unknown` operation may take effect anywhere after its invocation, or never;
  an unknown acquire or renew may even be placed more than once. That
  relaxation keeps the search from trying every subset of the timed-out
  acquires (exponential with a few dozen of them); it can only hide a violation
  that needs one timed-out acquire to have granted twice, and no-lost-grants
  checks every token a read reports against the grants in the audit. (A renewal
  sets exp = lt + ttl, which can be earlier than before: an unknown renew makes
  exp unknown, it is not harmless.)

What the history can rule out is an expiry before the lease's real-time bound.
Log time advances at most as fast as the monotonic clock that the harness
shares with the nodes (a leader continues from the log's last time and does not
count elections), and a command is stamped after it was sent. So a lease that a
request sent at `t0` set to `ttl` lasts in real time at least until
`t0 + ttl` (DESIGN.md §4, the bound a client may rely on). Within that bound
(`until`, less `MARGIN` for millisecond rounding) the model does not let the
lease end: a read that completed before it cannot have seen "free", a renew or
release answered before it cannot have been refused, and nobody else can have
been granted the key, not even by an unknown acquire. An operation placed in
the order takes effect no later than the earliest completion among the
operations not yet placed (they all come after it), so that is the time the
bound is compared with. This is what makes a stale "free" and a lease that a
failover shortened visible (issue 10, findings 1 and 2).

The server's boundary is Redis's: a lease is live while `now <= exp` and gone
once `now > exp` (src/keyspace/mod.rs `is_expired`).

Operations, by `f` and `status`:

| f       | ok                         | denied / refused                         |
|---------|----------------------------|------------------------------------------|
| acquire | granted `token` (or refreshed) | denied: held by another owner        |
| renew   | extended                   | refused (`LOCKLOST`): not live as (owner, token) |
| release | released                   | refused (reply 0): not live as (owner, token) |
| rewrite | the value changed in place: now held by `new_owner` with `new_token` | refused: not live as (owner, token) |
| read    | `holder` (owner, token), or None for "free" | —                       |

A refusal, like a read of "free", is an observation that the lease (owner,
token) had ended at that point, so it can never be live again afterwards: the
server judges every later command at a later log time.

Model state: `(owner, token, exp, last, until)`: `owner` None when free (then
`token`, `exp` and `until` are None), `token` None after an unknown acquire or
rewrite whose token a later operation pins, `last` the highest token known to
have been issued on the key, `until` the lease's real-time bound (None when
unknown: after a grant whose request timed out).

The search: a depth-first walk over "which operations are linearized so far",
always choosing among the minimal operations (those no unlinearized operation
precedes in real time), with a memo of configurations already explored. A
configuration is `(p, window, unknowns, state)`: every required operation before
index `p` (invoke order) is linearized, `window` marks the ones linearized after
`p`, `unknowns` the unknown releases linearized. Fewer unknowns used is never
worse (each unknown may also never happen), so a configuration is pruned when
one with the same `(p, window, state)` and a subset of its unknowns was already
explored: the memo is the usual (bitmask, state) cache with that dominance.

Operations that are legal in every state and change nothing (a definite error,
unknown reads) need no place in the order and are dropped before the search.

Standard library only.
"""

import time

INF = float("inf")
FREE = (None, None, None, 0, None)
# Seconds of slack on the real-time bound: log time is whole milliseconds (a
# stamp may lie up to 1 ms ahead of the real time elapsed), and a failover bug
# shortens a lease by far more than this.
MARGIN = 0.010


class Op:
    """One operation on the key.

    f: acquire | renew | release | rewrite | read; status: ok | denied |
    refused | unknown. token: granted (acquire ok), named (renew, release,
    rewrite), or the holder's (read). holder: (owner, token) for a read that
    saw one, None for "free". lt/exp: log time of the command and the lease end
    it set, None when unknown. ttl: the lease it asked for (ms; acquire,
    renew). new_owner/new_token: a rewrite's result (new_token None when
    unknown).
    """

    __slots__ = ("id", "process", "owner", "f", "status", "invoke", "complete",
                 "token", "holder", "lt", "exp", "ttl", "new_owner", "new_token", "real_owner")

    def __init__(self, id, process, owner, f, status, invoke, complete=INF,
                 token=None, holder=None, lt=None, exp=None, ttl=None, new_owner=None, new_token=None):
        self.id, self.process, self.owner, self.f, self.status = id, process, owner, f, status
        self.invoke, self.complete = invoke, (INF if complete is None else complete)
        self.token, self.holder, self.lt, self.exp = token, holder, lt, exp
        self.ttl, self.new_owner, self.new_token = ttl, new_owner, new_token
        self.real_owner = owner  # `owner` may become GHOST (see _ghosts_merged)

    def describe(self):
        what = "%s %s by %s" % (self.status, self.f, self.owner)
        if self.f == "read":
            what += " -> %s" % (("%s/%s" % self.holder) if self.holder else "free")
        elif self.token is not None:
            what += " token %s" % self.token
        if self.f == "rewrite" and self.status in ("ok", "unknown"):
            what += " -> %s/%s" % (self.new_owner, "?" if self.new_token is None else self.new_token)
        if self.ttl is not None:
            what += " ttl %s" % self.ttl
        if self.lt is not None:
            what += " lt %s" % self.lt
        end = "inf" if self.complete == INF else "%.3f" % self.complete
        return "op %s (process %s) %s, t=[%.3f, %s]" % (self.id, self.process, what, self.invoke, end)

    def __repr__(self):
        return "Op(%s)" % self.describe()

    def bound(self):
        """The real-time bound of the lease this acquire/renew sets (see the module doc)."""
        return None if self.ttl is None else self.invoke + self.ttl / 1000.0


def describe_state(state):
    owner, token, exp, last, until = state
    if owner is None:
        return "free (last token %s)" % last
    if owner == GHOST:
        owner = "(an owner whose acquire timed out)"
    return "held by %s token %s exp %s live until t=%s (last token %s)" % (
        owner, "?" if token is None else token, "?" if exp is None else exp,
        "?" if until is None else "%.3f" % until, last)


# ---------------------------------------------------------------- the model

def _held_by(state, owner, token):
    """`state` if it is held by `owner` with `token` (an unknown token is pinned
    to `token`, which must then be newer than every known grant; a `token` of
    None matches any), else None."""
    s_owner, s_token, s_exp, last, until = state
    if s_owner != owner:
        return None
    if token is None:
        return state
    if s_token is None:
        return (owner, token, s_exp, token, until) if token > last else None
    return state if s_token == token else None


def _expired_at(state, lt):
    """True only when the state's lease is known to have ended before `lt`
    (the server's boundary: gone once `lt > exp`)."""
    exp = state[2]
    return lt is not None and exp is not None and lt > exp


def _surely_live(state, t):
    """True when the state's lease cannot have expired by real time `t`."""
    until = state[4]
    return state[0] is not None and until is not None and t < until - MARGIN


def _ended(state):
    """The state after an observation that the lease is over."""
    return (None, None, None, state[3], None)


def step(state, op, now=None):
    """The state after a required operation, or None if it is illegal there.
    `now`: the latest real time its linearization point can have (at most its
    completion; the search passes the earliest completion among the operations
    not yet placed, all of which come after it)."""
    now = op.complete if now is None else now
    owner, token, exp, last, until = state
    f, status = op.f, op.status
    if status == "refused":
        # Not live as (owner, token) when the server judged it: fine if the
        # state is another lease (an unknown token may be another one too),
        # or if this lease may have run out by then; it is over for good.
        if owner != op.owner or token is None or token != op.token:
            return state
        return None if _surely_live(state, now) else _ended(state)
    if f == "acquire":
        if status == "denied":
            # Someone else holds it (or may still). Not the caller: the server
            # refreshes a lease for its owner, and grants an ended one.
            if owner is None or owner == op.owner or _expired_at(state, op.lt):
                return None
            return state
        t = op.token
        if owner == op.owner:
            if token is None:  # the pinned token of an unknown grant, or a new grant
                return (owner, t, op.exp, t, op.bound()) if t > last else None
            if token == t:  # refresh: the lease must still have been live
                return None if _expired_at(state, op.lt) else (owner, t, op.exp, last, op.bound())
        if owner is not None:
            # Another lease must have ended before this grant was stamped,
            # which happened before the grant's reply.
            if not (op.lt is None or exp is None or exp < op.lt):
                return None
            if _surely_live(state, now):
                return None
        return (op.owner, t, op.exp, t, op.bound()) if t > last else None
    if f == "renew":
        s = _held_by(state, op.owner, op.token)
        if s is None or _expired_at(s, op.lt):
            return None
        return (s[0], s[1], op.exp, s[3], op.bound())
    if f == "release":
        s = _held_by(state, op.owner, op.token)
        if s is None or _expired_at(s, op.lt):
            return None
        return _ended(s)
    if f == "rewrite":
        # APPEND on the lock key: a new value (the owner) and, as for every
        # write, a new version (the token), newer than every one issued before;
        # the expiry stays.
        s = _held_by(state, op.owner, op.token)
        if s is None or _expired_at(s, op.lt) or not op.new_token > s[3]:
            return None
        return (op.new_owner, op.new_token, s[2], op.new_token, s[4])
    if f == "read":
        if op.holder is None:
            # "free": the lease had ended by the time the read was judged.
            if owner is None:
                return state
            return None if _surely_live(state, now) else _ended(state)
        return _held_by(state, op.holder[0], op.holder[1])
    raise ValueError("not a required operation: %r" % (op,))


def unknown_moves(state, op, now=INF):
    """States an unknown operation may lead to if it took effect (excluding
    `state` itself: taking no effect is the same as never being linearized).
    `now`: the latest real time it can take effect at (see `step`)."""
    owner, token, exp, last, until = state
    out = []
    if op.f == "acquire":
        if owner == op.real_owner and token is not None:
            out.append((owner, token, None, last, op.bound()))  # refreshed, at an unknown log time
        # Granted, token unknown, if the lease there may have ended. No
        # real-time bound: unknown grants of owners nobody names again must
        # lead to one state (see _ghosts_merged).
        if owner is None or owner == op.owner or not _surely_live(state, now):
            out.append((op.owner, None, None, last, None))
    elif op.f == "renew":  # at an unknown log time: the lease may even have been shortened
        s = _held_by(state, op.owner, op.token)
        if s is not None:
            out.append((s[0], s[1], None, s[3], op.bound()))
    elif op.f == "release":
        s = _held_by(state, op.owner, op.token)
        if s is not None:
            out.append(_ended(s))
    elif op.f == "rewrite":
        s = _held_by(state, op.owner, op.token)
        if s is not None:
            out.append((op.new_owner, None, s[2], s[3], s[4]))
    return [s for s in out if s != state]


def is_required(op):
    """Whether the operation constrains the order (else it is dropped)."""
    if op.status in ("ok", "refused"):
        return True
    return op.f == "acquire" and op.status == "denied"


def is_effectful_unknown(op):
    return op.status == "unknown" and op.f in ("acquire", "renew", "release", "rewrite")


# ---------------------------------------------------------------- the search

class Result:
    """ok: True (linearizable), False (not), None (budget exhausted)."""

    def __init__(self, ok, explored, required, unknowns, dropped, stuck=None, stuck_states=()):
        self.ok, self.explored = ok, explored
        self.required, self.unknowns, self.dropped = required, unknowns, dropped
        self.stuck, self.stuck_states = stuck, list(stuck_states)

    def explain(self):
        if self.ok is not False or self.stuck is None:
            return ""
        states = "; ".join(describe_state(s) for s in self.stuck_states[:3])
        return "cannot place %s after the %d operations before it; model state there: %s" % (
            self.stuck.describe(), self.stuck_index, states)


GHOST = "\x00ghost"


def _ghosts_merged(ops, unk):
    """An unknown acquire whose owner no later operation names (clients take a
    new name after an unknown outcome, so this is the usual case) can only
    matter as "somebody else may hold it". All such owners are one for the
    model, so the states they lead to coincide and the memo merges them.
    An operation names an owner until it completes: a read invoked before the
    acquire may still see its grant."""
    last_named = {}
    for o in ops:
        names = [o.owner] + ([o.holder[0]] if o.holder else [])
        for name in names:
            if o.status == "unknown" and o.f == "acquire" and name == o.owner:
                continue  # the acquire itself
            if name is not None and o.complete > last_named.get(name, -INF):
                last_named[name] = o.complete
    out = []
    for o in unk:
        if o.f == "acquire" and last_named.get(o.owner, -INF) < o.invoke:
            ghost = Op(o.id, o.process, GHOST, o.f, o.status, o.invoke, o.complete,
                       o.token, o.holder, o.lt, o.exp, o.ttl, o.new_owner, o.new_token)
            ghost.real_owner = o.owner  # it may still refresh that owner's own lease
            o = ghost
        out.append(o)
    return out


def check_key(ops, budget=2_000_000, initial=FREE, seconds=None):
    """Searches a linearization of `ops` (one key). Returns a Result; `ok` is
    None when `budget` states or `seconds` of search ran out first."""
    deadline = None if seconds is None else time.monotonic() + seconds
    req = sorted((o for o in ops if is_required(o)), key=lambda o: (o.invoke, o.complete, o.id))
    unk = sorted((o for o in ops if is_effectful_unknown(o)), key=lambda o: (o.invoke, o.id))
    unk = _ghosts_merged(ops, unk)
    dropped = len(ops) - len(req) - len(unk)
    n = len(req)
    if n == 0:
        return Result(True, 0, 0, len(unk), dropped)

    def moves(p, wmask, umask, state):
        """The next configurations, lazily: required operations first, and
        unknown ones only if the search comes back for them (they are rarely
        needed, and there can be thousands of them)."""
        m = INF  # earliest completion among unlinearized required ops
        cands = []
        j = p
        while j < n:
            op = req[j]
            if op.invoke > m:
                break
            if not (wmask >> (j - p)) & 1:
                cands.append(j)
                if op.complete < m:
                    m = op.complete
            j += 1
        for j in cands:
            ns = step(state, req[j], m)
            if ns is None:
                continue
            if j == p:
                w, q = wmask >> 1, p + 1
                while w & 1:
                    w >>= 1
                    q += 1
                yield (q, w, umask, ns)
            else:
                yield (p, wmask | (1 << (j - p)), umask, ns)
        for u, op in enumerate(unk):
            if op.invoke > m:
                break
            if (umask >> u) & 1:
                continue
            bit = 1 << u if op.f == "release" else 0  # see the module doc
            for ns in unknown_moves(state, op, m):
                yield (p, wmask, umask | bit, ns)

    memo = {(0, 0, initial): [0]}
    explored = 1
    deepest, deepest_states = 0, {initial}
    stack = [moves(0, 0, 0, initial)]
    while stack:
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            continue
        p, w, u, s = nxt
        if p >= n:
            return Result(True, explored, n, len(unk), dropped)
        key = (p, w, s)
        seen = memo.get(key)
        if seen is None:
            memo[key] = [u]
        else:
            if any(not (prev & ~u) for prev in seen):
                continue
            seen.append(u)
        explored += 1
        if p > deepest:
            deepest, deepest_states = p, {s}
        elif p == deepest and len(deepest_states) < 8:
            deepest_states.add(s)
        if explored > budget or (deadline is not None and explored % 1024 == 0 and time.monotonic() > deadline):
            return Result(None, explored, n, len(unk), dropped)
        stack.append(moves(p, w, u, s))
    r = Result(False, explored, n, len(unk), dropped, req[deepest], sorted(deepest_states, key=repr))
    r.stuck_index = deepest
    return r
